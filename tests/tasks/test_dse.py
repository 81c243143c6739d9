"""DSEBench adapter: DSEBench's file formats, messy catalogues, and build → submit → eval on a generated
dse_corpus where relevance is planted so that only query and examples together find the best datasets."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import engine.tasks.dse.data as dse_data
import engine.tasks.dse.rank as dse_rank
from engine.cli import app
from engine.core.collection import MANIFEST, Collection
from engine.errors import EngineError
from engine.eval.profiles import PROFILES
from engine.io.runs import read_run
from engine.tasks.dse.data import (load_dse_run, read_cases, read_datasets, read_dse_queries,
                                   read_dsebench_judgments, read_folds, select_cases)
from engine.tasks.dse.index import EMBEDDED, FEATURES, DseIndex, build_dse, ensure_index
from engine.tasks.dse.pipeline import EvalOptions, SubmitOptions, eval_dse, score_run, submit_dse, variant_table
from fixtures.dse_synthetic import generate, write_corpus


@pytest.fixture(scope="session")
def shared(shared_data):
    return shared_data / "dsebench"


runner = CliRunner()




def _invoke(args):
    result = runner.invoke(app, args)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.output


# ---------------------------------------------------------------- formats and messy input (no model)

def test_cases_with_several_examples_and_conflicts(tmp_path):
    p = tmp_path / "cases.tsv"
    p.write_text("1\tQ1\td1\n1\tQ1\td2\n2\tQ2\td3\td4\n")
    cases = read_cases(p)
    assert cases["1"].examples == ["d1", "d2"] and cases["2"].examples == ["d3", "d4"]
    p.write_text("1\tQ1\td1\n1\tQ9\td2\n")
    with pytest.raises(EngineError, match=r"cases.tsv:2: case '1' has query 'Q9'"):
        read_cases(p)
    p.write_text("1\tQ1\n")
    with pytest.raises(EngineError, match=r"cases.tsv:1: expected"):
        read_cases(p)


def test_messy_records_are_cleaned_with_warnings(tmp_path, monkeypatch):
    msgs: list[str] = []
    monkeypatch.setattr(dse_data, "warn", msgs.append)
    p = tmp_path / "datasets.json"
    p.write_text(json.dumps([
        {"id": "a", "title": "Bus ridership", "description": "Passengers", "tags": "bus, transport;city",
         "author": "Office", "summary": "s"},
        {"id": "b", "title": "Solar", "description": "", "tags": ["solar"], "author": None},
        {"id": "a", "title": "duplicate"},
        {"title": "no id"},
        "not an object",
    ]))
    records = read_datasets(p)
    assert [r["id"] for r in records] == ["a", "b"]
    assert records[0]["tags"] == "bus; transport; city" and records[0]["title"] == "Bus ridership"
    assert records[1]["description"] == "" and records[1]["summary"] == "" and records[1]["author"] == ""
    text = "\n".join(msgs)
    assert "duplicate id" in text and "a (#3, first #1)" in text
    assert "without an id" in text and "#4" in text
    assert "not a JSON object" in text and "#5" in text
    assert "tags as a string" in text
    assert "'summary'" in text and "'description'" in text
    p.write_text('{"x": 1')
    with pytest.raises(EngineError, match="invalid JSON"):
        read_datasets(p)


def test_generated_corpus_uses_dsebench_formats(shared, tmp_path):
    paths = write_corpus(generate(n_records=80, n_cases=6, n_train_cases=2, seed=3), tmp_path)
    records = json.loads(paths["datasets"].read_text())
    assert set(records[0]) == {"id", "title", "description", "tags", "author", "summary"}
    assert all(len(line.split("\t")) == 3 for line in paths["cases"].read_text().splitlines())
    assert all(len(line.split("\t")) == 2 for line in paths["queries"].read_text().splitlines())
    judgments = json.loads(paths["judgments"].read_text())
    if shared.exists():  # same keys and value types as the real file
        real = json.loads((shared / "Data" / "human_annotated_judgments.json").read_text())[0]
        assert {k: type(v) for k, v in judgments[0].items()} == {k: type(v) for k, v in real.items()}
    folds = read_folds(paths["folds"])
    assert len(folds) == 5 and all(not set(f.train) & set(f.test) for f in folds)
    assert set().union(*(set(f.test) for f in folds)) == {j["case_id"] for j in judgments}


# ---------------------------------------------------------------- pipeline on the generated corpus

def test_submit_writes_one_ranking_per_case_without_its_examples(dse_corpus, tmp_path):
    paths, root = dse_corpus
    run_path = tmp_path / "run.txt"
    _invoke(["dse", "submit", "--queries", str(paths["queries"]), "--cases", str(paths["cases"]),
             "--out", str(run_path), "--name", "synth", "--root", str(root), "--depth", "50", "--quiet"])
    run = read_run(run_path)
    cases = read_cases(paths["cases"])
    test_cases = [c for c in cases if c.isdigit()]
    assert sorted(run) == sorted(test_cases)
    for cid, docs in run.items():
        assert len(docs) == 50
        assert not set(cases[cid].examples) & set(docs)
    first = run_path.read_text().splitlines()[0].split()
    assert first[1] == "Q0" and first[3] == "1" and first[5] == "dse-rrf"


def test_reranked_submit_orders_each_case_as_cross_encoder_predict(dse_corpus, tmp_path, tiny_cross):
    from sentence_transformers import CrossEncoder

    from engine.tasks.dse.data import read_datasets, record_text
    paths, root = dse_corpus
    plain, reranked = tmp_path / "plain.txt", tmp_path / "re.txt"
    base = ["dse", "submit", "--queries", str(paths["queries"]), "--cases", str(paths["cases"]), "--name", "synth",
            "--root", str(root), "--depth", "20", "--quiet"]
    _invoke(base + ["--out", str(plain)])
    _invoke(base + ["--out", str(reranked), "--rerank", f"cross:{tiny_cross}", "--rerank-depth", "5"])
    first, second = read_run(plain), read_run(reranked)
    cases, queries = read_cases(paths["cases"]), read_dse_queries(paths["queries"])
    records = {r["id"]: r for r in read_datasets(paths["datasets"])}
    cid = sorted(first)[0]
    top = sorted(first[cid], key=lambda d: -first[cid][d])
    text = queries[cases[cid].query_id]
    ref = CrossEncoder(str(tiny_cross), device="cpu").predict([(text, record_text(records[d])) for d in top[:5]])
    want = [top[i] for i in np.argsort(-ref, kind="stable")] + top[5:]
    assert sorted(second[cid], key=lambda d: -second[cid][d]) == want


def test_variant_table_fused_beats_query_only_and_examples_only(dse_corpus, tmp_path):
    paths, root = dse_corpus
    out = tmp_path / "table.json"
    text = _invoke(["dse", "eval", "--judgments", str(paths["judgments"]), "--folds", str(paths["folds"]),
                    "--queries", str(paths["queries"]), "--cases", str(paths["cases"]), "--name", "synth",
                    "--root", str(root), "--out", str(out), "--quiet"])
    table = json.loads(out.read_text())
    q, e = table["query only (RRF dense+BM25)"]["ndcg@10"], table["examples only (RRF dense+BM25)"]["ndcg@10"]
    rrf, tuned = table["fused untuned (RRF)"]["ndcg@10"], table["fused tuned (5-fold CV)"]["ndcg@10"]
    assert rrf > max(q, e) and tuned > max(q, e)
    assert "| fused tuned (5-fold CV) |" in text and "nDCG@10" in text


def test_tuned_submit_and_eval_of_the_run(dse_corpus, tmp_path):
    paths, root = dse_corpus
    run_path, weights = tmp_path / "tuned.txt", tmp_path / "weights.json"
    common = ["--queries", str(paths["queries"]), "--cases", str(paths["cases"]), "--name", "synth",
              "--root", str(root), "--quiet"]
    _invoke(["dse", "submit", *common, "--out", str(run_path), "--method", "tuned", "--folds", str(paths["folds"]),
             "--split", "all", "--save-weights", str(weights)])
    saved = json.loads(weights.read_text())
    assert set(saved["folds"]) == {f"fold_{k}" for k in range(5)} and "all" in saved  # gen_* cases use "all"
    assert "gen_1" in read_run(run_path)
    out = tmp_path / "eval.json"
    _invoke(["dse", "eval", "--judgments", str(paths["judgments"]), "--folds", str(paths["folds"]),
             "--run", str(run_path), "--out", str(out), "--quiet"])
    table = json.loads(out.read_text())
    assert set(table) == {"run", *(f"fold_{k}" for k in range(5))}
    assert 0.0 < table["run"]["ndcg@10"] <= 1.0
    # applying the saved weights gives a run too
    again = tmp_path / "again.txt"
    _invoke(["dse", "submit", *common, "--out", str(again), "--method", "tuned", "--weights", str(weights)])
    assert read_run(again)


def test_unknown_example_dataset_warns_and_case_still_ranked(dse_corpus, tmp_path, monkeypatch):
    paths, root = dse_corpus
    msgs: list[str] = []
    monkeypatch.setattr(dse_rank, "warn", msgs.append)
    cases = tmp_path / "cases.tsv"
    cases.write_text("1\tNTCIR_200000\tno-such-dataset\n2\tNO_QUERY\tno-such-dataset\n")
    run_path = tmp_path / "run.txt"
    submit_dse(paths["queries"], cases, run_path, "synth", root, SubmitOptions(depth=5))
    assert list(read_run(run_path)) == ["1"]
    text = "\n".join(msgs)
    assert "cases.tsv:1 case 1 dataset no-such-dataset" in text
    assert "neither a known query nor a known example" in text and "2" in text


def test_user_errors_are_engine_errors(dse_corpus, tmp_path):
    paths, root = dse_corpus
    with pytest.raises(EngineError, match="dse build datasets datasets.json name missing"):
        submit_dse(paths["queries"], paths["cases"], tmp_path / "r", "missing", root)
    with pytest.raises(EngineError, match="method tuned needs folds"):
        submit_dse(paths["queries"], paths["cases"], tmp_path / "r", "synth", root, SubmitOptions(method="tuned"))
    with pytest.raises(EngineError, match="split 'nonsense'"):
        submit_dse(paths["queries"], paths["cases"], tmp_path / "r", "synth", root, SubmitOptions(split="nonsense"))


@pytest.mark.parametrize("args,message", [
    (["--name", "missing"], "no DSEBench index 'missing' in ROOT/; build it first: `engine dse build --datasets "
                            "datasets.json --name missing --root ROOT`"),
    (["--method", "tuned"], "--method tuned needs --folds (DSEBench's Data/Splits/5-Fold_split, weights tuned per "
                            "fold on its train cases) or --weights FILE"),
    (["--depth", "0"], "--depth must be a whole number of at least 1, not 0"),
    (["--split", "nonsense"], "--split 'nonsense': use test, train, all, or a split file"),
])
def test_submit_errors_name_the_flags_on_the_command_line(run_cli, dse_corpus, tmp_path, monkeypatch, capsys, args, message):
    paths, root = dse_corpus
    code, _, err = run_cli("dse", "submit", "--queries", paths["queries"], "--cases",
                           paths["cases"], "--out", tmp_path / "r", "--name", "synth", "--root", root, *args)
    assert code == 2
    assert message.replace("ROOT", str(root)) in " ".join(err.split())


def test_eval_without_run_needs_queries_and_cases(run_cli, monkeypatch, capsys, tmp_path):
    code, _, err = run_cli("dse", "eval", "--judgments", tmp_path / "j.json")
    assert code == 2
    assert "without --run, the judged cases are ranked with the built index: give --queries and --cases " \
           "(and the index's --name)" in " ".join(err.split())
    with pytest.raises(EngineError, match="without run, .* give queries and cases"):
        eval_dse(tmp_path / "j.json")


# ---------------------------------------------------------------- the real DSEBench files, unchanged

@pytest.mark.shared
def test_real_dsebench_files_load_and_baselines_score_as_published(shared):
    if not shared.exists():
        pytest.skip("../shared/data/dsebench is absent")
    data = shared / "Data"
    queries = read_dse_queries(data / "queries.tsv")
    cases = read_cases(data / "cases.tsv")
    assert len(queries) == 3979 and len(cases) == 5840
    assert len(select_cases(cases, "test")) == 141
    assert all(c.query_id in queries for c in cases.values())
    folds = read_folds(data / "Splits" / "5-Fold_split")
    assert [len(f.test) for f in folds] == [28, 28, 28, 28, 29]
    qrels = read_dsebench_judgments(data / "human_annotated_judgments.json")
    assert len(qrels) == 141 and sum(len(v) for v in qrels.values()) == 7415
    # Baselines/evaluation_results.md, BM25 and GTE rows
    bm25 = score_run(load_dse_run(shared / "Baselines" / "Retrieval" / "BM25_results.json"), qrels)
    assert [round(bm25[m], 4) for m in PROFILES["dsebench"].metrics.split(",")] == \
        [0.3059, 0.3416, 0.0982, 0.1739, 0.1705, 0.2769]
    table = eval_dse(data / "human_annotated_judgments.json", options=EvalOptions(
        folds=data / "Splits" / "5-Fold_split", run=shared / "Baselines" / "Retrieval" / "GTE_results.json"))
    assert round(table["run"]["ndcg@10"], 4) == 0.3649 and len(table) == 6


def test_one_command_from_datasets_json_to_run(dse_corpus, tmp_path):
    paths = write_corpus(generate(n_records=40, n_cases=4, n_train_cases=0, seed=5), tmp_path / "small")
    root, run_path = tmp_path / "indexes", tmp_path / "run.txt"
    args = ["dse", "submit", "--datasets", str(paths["datasets"]), "--queries", str(paths["queries"]),
            "--cases", str(paths["cases"]), "--out", str(run_path), "--name", "small", "--root", str(root),
            "--depth", "10", "--quiet"]
    _invoke(args)
    assert sorted(read_run(run_path)) == ["1", "2", "3", "4"]
    manifest = root / "small" / MANIFEST
    stamp = manifest.stat().st_mtime_ns
    _invoke(args)  # the same datasets.json: the index is reused, not rebuilt
    assert manifest.stat().st_mtime_ns == stamp


def test_case_with_unknown_query_is_ranked_by_its_examples(dse_corpus, tmp_path, monkeypatch):
    paths, root = dse_corpus
    msgs: list[str] = []
    monkeypatch.setattr(dse_rank, "warn", msgs.append)
    example = read_cases(paths["cases"])["1"].examples[0]
    cases = tmp_path / "cases.tsv"
    cases.write_text(f"5\tNO_SUCH_QUERY\t{example}\n")
    run_path = tmp_path / "run.txt"
    submit_dse(paths["queries"], cases, run_path, "synth", root, SubmitOptions(depth=5))
    assert len(read_run(run_path)["5"]) == 5 and example not in read_run(run_path)["5"]
    assert any("cases.tsv:1 case 5 query NO_SUCH_QUERY" in m and "examples only" in m for m in msgs)


# ---------------------------------------------------------------- storage: one collection

def test_index_is_one_collection_search_and_info_work(run_cli, dse_corpus, monkeypatch, capsys):
    paths, root = dse_corpus
    col = Collection.open("synth", root)
    records = read_datasets(paths["datasets"])
    assert col.items == records and col.kind == "text" and col.manifest["format"] == 2
    assert set(col.stored) == {f"emb_{f}" for f in EMBEDDED} | {"bm25"}
    for f in EMBEDDED:
        assert col.array(f"emb_{f}").dtype == np.float16 and col.array(f"emb_{f}").shape == (len(records), col.dim)
    extra = col.extra
    assert extra["task"] == "dsebench" and extra["fields"] == list(EMBEDDED)
    assert extra["source"] == str(paths["datasets"].resolve())
    assert extra["source_bytes"] == paths["datasets"].stat().st_size
    # the search vectors are the whole-record embeddings; scoring reads the float16 copy, cast to float32
    np.testing.assert_allclose(col.embeddings, col.array("emb_all").astype(np.float32), atol=2e-3)
    index = DseIndex.open("synth", root)
    assert index.ids == col.ids and index.emb["all"].dtype == np.float32
    assert np.array_equal(index.emb["title"], col.array("emb_title").astype(np.float32))
    feats = index.features(None, "bus ridership", [0])
    assert feats.shape == (len(records), len(FEATURES))
    code, out, _ = run_cli("search", "synth", "bus ridership", "--json", "-k", "3",
                           "--root", root)
    hits = json.loads(out)["hits"]
    assert code == 0 and len(hits) == 3 and "title" in hits[0]["meta"]
    code, out, _ = run_cli("info", "synth", "--json", "--root", root)
    assert code == 0 and json.loads(out)["count"] == len(records)


def _old_layout(folder: Path, source: str) -> None:
    """What `engine dse build` wrote before the collection store (format 1)."""
    folder.mkdir(parents=True)
    (folder / "dse.json").write_text(json.dumps({"kind": "dsebench", "model": "sbert:all-MiniLM-L6-v2",
                                                 "records": 1, "dim": 4, "source": source, "source_bytes": 1}))
    (folder / "records.json").write_text('[{"id": "a"}]')
    for f in EMBEDDED:
        np.save(folder / f"emb_{f}.npy", np.zeros((1, 4), dtype=np.float16))
    (folder / "bm25").mkdir()
    (folder / "bm25" / "ids.json").write_text('["a"]')


def test_old_layout_index_is_one_error_line_with_the_rebuild(run_cli, dse_corpus, tmp_path, monkeypatch, capsys):
    paths, _ = dse_corpus
    root = tmp_path / "indexes"
    _old_layout(root / "old", "/data/datasets.json")
    code, _, err = run_cli("dse", "submit", "--queries", paths["queries"], "--cases",
                           paths["cases"], "--out", tmp_path / "r", "--name", "old", "--root", root, "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{root / 'old'}: a DSEBench index of format 1 (dse.json, no manifest.json); rebuild it: " \
           f"`engine dse build --datasets /data/datasets.json --name old --root {root}`" in err
    with pytest.raises(EngineError, match="a DSEBench index of format 1"):
        DseIndex.open("old", root)
    (root / "old" / "dse.json").write_text("{broken")  # unreadable settings: the hint still names the command
    with pytest.raises(EngineError, match="engine dse build datasets datasets.json name old"):
        DseIndex.open("old", root)


def test_building_over_an_old_layout_replaces_it(tmp_path):
    paths = write_corpus(generate(n_records=30, n_cases=2, n_train_cases=0, seed=4), tmp_path / "small")
    root = tmp_path / "indexes"
    _old_layout(root / "small", str(paths["datasets"]))
    ensure_index(paths["datasets"], "small", root)  # no manifest.json: built, not reused
    left = {p.name for p in (root / "small").iterdir()}
    assert MANIFEST in left and not left & {"dse.json", "records.json", "bm25", "emb_all.npy"}
    assert len(DseIndex.open("small", root).ids) == 30


def test_dse_build_leaves_other_collections_alone(tmp_path):
    paths = write_corpus(generate(n_records=20, n_cases=2, n_train_cases=0, seed=6), tmp_path / "small")
    root = tmp_path / "indexes"
    Collection.from_vectors("plain", ["a", "b"], np.eye(2, dtype=np.float32), None, "text", root=root)
    with pytest.raises(EngineError, match="holds a collection that is not a DSEBench index"):
        build_dse(paths["datasets"], "plain", root)
    with pytest.raises(EngineError, match="holds a collection that is not a DSEBench index"):
        DseIndex.open("plain", root)
    assert Collection.open("plain", root).ids == ["a", "b"]


# ---------------------------------------------------------------- helpers

def test_variant_table_keeps_the_published_columns():
    means = {"ndcg@5": 0.5, "ndcg@10": 0.25, "map@5": 0.125, "map@10": 1.0, "recall@5": 0.0, "recall@10": 0.75}
    assert variant_table({"run": means}) == (
        "| variant | nDCG@5 | nDCG@10 | MAP@5 | MAP@10 | R@5 | R@10 |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        "| run | 0.5000 | 0.2500 | 0.1250 | 1.0000 | 0.0000 | 0.7500 |")


def test_rankings_leave_out_examples_and_break_ties_by_position():
    feats = np.zeros((5, len(FEATURES)), dtype=np.float32)
    feats[:, FEATURES.index("q_bm25")] = [1.0, 3.0, 3.0, 0.0, 3.0]
    from fixtures.dse_reference import RRF_SYSTEMS, rank_rrf
    ranked = rank_rrf(feats, RRF_SYSTEMS["query"], banned=[1], depth=3)
    assert [i for i, _ in ranked] == [2, 4, 0]
    weights = [1.0 if f == "q_bm25" else 0.0 for f in FEATURES]
    assert [i for i, _ in dse_rank.rank_weighted(feats, weights, [2], 10)] == [1, 4, 0, 3]


def test_options_are_checked():
    with pytest.raises(EngineError, match="unknown method 'best'"):
        SubmitOptions(method="best").check()
    with pytest.raises(EngineError, match="depth must be a whole number of at least 1, not 0"):
        EvalOptions(run="r", depth=0).check()
    assert SubmitOptions(method="tuned", weights="w.json").check().depth == 100
