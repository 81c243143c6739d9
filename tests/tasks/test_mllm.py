"""`engine mllm` on generated questions with a planted structure (LLMs expert in hidden topics), bad input,
and the real question set and LLM ids at full size when ../shared/data is present (slow)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.core.collection import Collection
from engine.errors import EngineError
from engine.io.runs import read_run
from engine.io.ids import read_id_list
from engine.tasks.model_ranking import data, mllm
from engine.tasks.model_ranking.mllm import MllmOptions
from engine.tasks.model_ranking.transfer import TransferOptions


@pytest.fixture(scope="session")
def shared(shared_data):
    return shared_data / "trec-mllm"


TOPICS = [
    "stock market bank interest loan investor dividend inflation bond",
    "patient doctor hospital diagnosis symptom treatment vaccine disease",
    "football match goal team player coach league championship",
    "recipe oven flour sugar bake kitchen garlic sauce dessert",
    "planet star galaxy telescope orbit astronaut rocket comet",
    "guitar piano melody concert song album drummer chord",
]
N_LLMS = 40
POPULAR = "llm_039"


def _question(topic: int, rng: np.random.Generator) -> str:
    return "what about " + " ".join(rng.choice(TOPICS[topic].split(), 6)) + "?"


def make_track(root: Path, dev_per_topic: int = 8, queries_per_topic: int = 2, seed: int = 0) -> dict[str, Path]:
    """dev TSV + qrels + test TSV + LLM ids: LLM 2t is the most relevant for topic t, 2t+1 the second most;
    a popular LLM is second-most relevant on a third of all questions (what the prior alone learns)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    llms = [f"llm_{i:03d}" for i in range(N_LLMS)]
    (root / "llm_ids.txt").write_text("\n".join(llms) + "\n")
    dev, qrels, test, topic_of = [], [], [], {}
    qid = 100
    for t in range(len(TOPICS)):
        for _ in range(dev_per_topic):
            qid += 1
            dev.append(f"{qid}\t{_question(t, rng)}")
            grades = {llms[2 * t]: 1, llms[2 * t + 1]: 2}
            if rng.random() < 0.35:
                grades[POPULAR] = 2
            for llm in llms[:30]:  # judged LLMs; the rest are unjudged (grade 0)
                qrels.append(f"{qid} 0 {llm} {grades.get(llm, 0)}")
            if POPULAR in grades:
                qrels.append(f"{qid} 0 {POPULAR} 2")
        for _ in range(queries_per_topic):
            qid += 1
            test.append(f"{qid}\t{_question(t, rng)}")
            topic_of[str(qid)] = t
    (root / "dev.tsv").write_text("\n".join(dev) + "\n")
    (root / "qrels.txt").write_text("\n".join(qrels) + "\n")
    (root / "test.tsv").write_text("\n".join(test) + "\n")
    (root / "topics.json").write_text(json.dumps(topic_of))
    return {n: root / f for n, f in (("dev", "dev.tsv"), ("qrels", "qrels.txt"), ("test", "test.tsv"),
                                      ("ids", "llm_ids.txt"), ("topics", "topics.json"))}


@pytest.fixture(scope="session")
def encoder():
    from engine.core.encoders.registry import DEFAULT_TEXT_SPEC, load_encoder
    return load_encoder(DEFAULT_TEXT_SPEC)


@pytest.fixture(scope="module")
def track(tmp_path_factory) -> dict[str, Path]:
    return make_track(tmp_path_factory.mktemp("mllm"))


def test_cv_transfer_and_ltr_beat_the_prior(track, tmp_path: Path, encoder):
    report = tmp_path / "cv.json"
    result = CliRunner().invoke(app, ["mllm", "--dev-queries", str(track["dev"]), "--qrels", str(track["qrels"]),
                                      "--llm-ids", str(track["ids"]), "--cv", "--folds", "4", "--repeats", "2", "--full",
                                      "--report", str(report), "--root", str(tmp_path / "idx"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "| guarded: ensemble, LTR or topics ⊕ prior per position (default) |" in result.output and "| nDCG@10 | p nDCG@10 | MRR | p MRR |" in result.output
    cv = json.loads(report.read_text())
    assert cv["repeats"] == 2 and cv["baseline"] == "prior (mean target)"
    rows = cv["all"]
    prior = rows["prior (mean target)"]
    for variant in ("transfer", "transfer, params tuned per fold", "LTR (LambdaRank)", "ensemble",
                    "topic mixture", "guarded: ensemble, LTR or topics ⊕ prior per position (default)"):
        assert rows[variant]["ndcg@10"]["mean"] > prior["ndcg@10"]["mean"] + 0.3, variant
        assert rows[variant]["mrr"]["mean"] > 0.9 > prior["mrr"]["mean"], variant
        assert rows[variant]["ndcg@10"]["p"] < 0.01


def test_ltr_run_ranks_the_expert_first_and_is_byte_identical(track, tmp_path: Path):
    """LTR on planted data (given embeddings: topic centres + noise) beats the prior, and the same input gives
    the same bytes."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(len(TOPICS), 16))
    topic_of = json.loads(track["topics"].read_text())
    dev_topics = np.repeat(np.arange(len(TOPICS)), 8)
    emb = {"dev": (centres[dev_topics] + 0.3 * rng.normal(size=(48, 16))).astype(np.float32),
           "queries": (centres[[topic_of[q] for q in sorted(topic_of, key=int)]]
                       + 0.3 * rng.normal(size=(12, 16))).astype(np.float32)}
    for name in ("a", "b"):
        mllm.rank_questions(track["dev"], track["qrels"], track["test"], tmp_path / f"{name}.run", track["ids"],
                            MllmOptions(root=tmp_path / name, method="ltr"), embeddings=emb)
    assert (tmp_path / "a.run").read_bytes() == (tmp_path / "b.run").read_bytes()
    run = read_run(tmp_path / "a.run")
    hits = sum(max(s, key=s.get) == f"llm_{2 * topic_of[q]:03d}" for q, s in run.items())
    assert hits >= len(run) - 1  # the prior alone would put llm_039 or one fixed expert first everywhere


def test_run_ranks_every_llm_with_the_topic_expert_first(track, tmp_path: Path, encoder):
    out = tmp_path / "run.txt"
    result = CliRunner().invoke(app, ["mllm", "--dev-queries", str(track["dev"]), "--qrels", str(track["qrels"]),
                                      "--llm-ids", str(track["ids"]), "--queries", str(track["test"]),
                                      "--out", str(out), "--run-id", "planted", "--root", str(tmp_path / "idx"),
                                      "--quiet"])
    assert result.exit_code == 0, result.output
    run = read_run(out)
    topic_of = json.loads(track["topics"].read_text())
    assert set(run) == set(topic_of)
    hits = 0
    for qid, scores in run.items():
        assert len(scores) == N_LLMS  # unjudged LLMs from --llm-ids are ranked too
        hits += max(scores, key=scores.get) == f"llm_{2 * topic_of[qid]:03d}"
    assert hits >= len(run) - 1
    assert out.read_text().split("\n", 1)[0].endswith(" planted")


def test_grade_map_changes_targets(track):
    dev = data.read_dev(track["dev"], track["qrels"], track["ids"], "0:0,1:1,2:0.5")
    assert set(np.unique(dev.targets)) == {0.0, 0.5, 1.0}
    assert dev.targets.shape == (48, N_LLMS)


def test_bad_input(track, tmp_path: Path):
    with pytest.raises(EngineError, match="grade 2 has no target .*add it, e.g. targets 0:0,1:1,2:0"):
        data.read_dev(track["dev"], track["qrels"], track["ids"], "0:0,1:1")
    with pytest.raises(EngineError, match="not `grade:target`"):
        data.parse_targets("0:0,one:1")
    ids = tmp_path / "ids.txt"
    ids.write_text("llm_000\nllm_001\n")
    with pytest.raises(EngineError, match="not in .*ids.txt"):
        data.read_dev(track["dev"], track["qrels"], ids)
    ids.write_text("llm_000\nllm_000\n")
    with pytest.raises(EngineError, match=r"ids.txt:2: duplicate id 'llm_000' \(first on line 1\)"):
        data.read_dev(track["dev"], track["qrels"], ids)
    other = tmp_path / "other.tsv"
    other.write_text("9\twhat?\n")
    with pytest.raises(EngineError, match="only 0 of the questions"):
        data.read_dev(other, track["qrels"])


# ---------------------------------------------------------------- the stored dev side


@pytest.fixture
def saved(monkeypatch) -> list[str]:
    """The name of each training set `training_store.save` stored, in order."""
    from engine.tasks.model_ranking import training_store
    names: list[str] = []
    real = training_store.save

    def counting(side, task, name, *args, **kwargs):
        names.append(name)
        return real(side, task, name, *args, **kwargs)

    monkeypatch.setattr(training_store, "save", counting)
    return names


def given_embeddings(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"dev": rng.normal(size=(48, 16)).astype(np.float32),
            "queries": rng.normal(size=(12, 16)).astype(np.float32)}


def test_dev_side_is_stored_and_reused_with_given_embeddings(track, tmp_path: Path, saved):
    emb = given_embeddings()
    options = MllmOptions(root=tmp_path / "idx", transfer=TransferOptions(folds=4))
    args = (track["dev"], track["qrels"], track["ids"])
    mllm.dev_side(*args, options, embeddings=emb["dev"])
    col = Collection.open("mllm", options.root)
    dev = data.read_dev(*args)
    assert col.extra["task"] == "mllm" and col.manifest["encoder"] is None and col.ids == dev.query_ids
    assert col.items[0]["text"] == dev.texts[0] and col.document("candidates") == dev.llm_ids
    assert np.array_equal(col.array("emb_question"), emb["dev"])  # exactly as given, not re-normalized
    assert np.array_equal(col.array("scores"), dev.targets) and np.array_equal(col.array("grades"), dev.grades)
    study = mllm.cross_validate_dev(*args, options, embeddings=emb["dev"], repeats=1)  # from the stored side
    assert study.variants[0].name == mllm.BASELINE and study.variants[-1].name.endswith("(default)")
    mllm.rank_questions(*args[:2], track["test"], tmp_path / "stored.run", track["ids"], options, embeddings=emb)
    assert saved == ["mllm"]  # cross-validated again and ranked from the stored dev side
    fresh = replace(options, root=tmp_path / "fresh")
    mllm.rank_questions(*args[:2], track["test"], tmp_path / "fresh.run", track["ids"], fresh, embeddings=emb)
    assert (tmp_path / "stored.run").read_bytes() == (tmp_path / "fresh.run").read_bytes()
    mllm.dev_side(*args, replace(options, targets="0:0,1:1,2:0.5"), embeddings=emb["dev"])
    mllm.dev_side(*args, options, embeddings=given_embeddings(1)["dev"])
    assert saved == ["mllm", "mllm", "mllm", "mllm"]  # a fresh root, another grade map, other embeddings


def test_damaged_dev_side_is_stored_again(track, tmp_path: Path, saved, capsys):
    emb = given_embeddings()["dev"]
    options = MllmOptions(root=tmp_path / "idx", transfer=TransferOptions(folds=4, k=3, temperature=0.1,
                                                                          prior_weight=0.25))
    args = (track["dev"], track["qrels"], track["ids"])
    first = mllm.dev_side(*args, options, embeddings=emb)
    stored = Collection.open("mllm", options.root).file("emb_question")
    stored.write_bytes(stored.read_bytes()[:-4] + b"\0\0\0\0")
    again = mllm.dev_side(*args, options, embeddings=emb)
    assert np.array_equal(again.embeddings[mllm.EMBEDDING], first.embeddings[mllm.EMBEDDING]) and \
        np.array_equal(again.scores, first.scores) and np.array_equal(again.grades, first.grades)
    assert saved == ["mllm", "mllm"]
    assert "does not match its checksum" in capsys.readouterr().err
    Collection.open("mllm", options.root)  # whole again


def test_cv_then_ranking_embed_the_dev_questions_once(track, tmp_path: Path, monkeypatch, encoder):
    embedded: list[int] = []
    real = mllm.embed
    monkeypatch.setattr(mllm, "embed", lambda texts, model, encoder=None: embedded.append(len(texts))
                        or real(texts, model, encoder))

    def engine_mllm(root: str, *more: str) -> None:
        result = CliRunner().invoke(app, ["mllm", "--dev-queries", str(track["dev"]), "--qrels", str(track["qrels"]),
                                          "--llm-ids", str(track["ids"]), "--root", str(tmp_path / root), "--k", "3",
                                          "--temperature", "0.1", "--prior-weight", "0.25", "--quiet", *more])
        assert result.exit_code == 0, result.output

    engine_mllm("idx", "--cv", "--folds", "4", "--repeats", "1")
    engine_mllm("idx", "--queries", str(track["test"]), "--out", str(tmp_path / "stored.run"))
    assert embedded == [48, 12]
    # the stored float32 rows give the run of a fresh root, where the dev questions are embedded anew
    engine_mllm("fresh", "--queries", str(track["test"]), "--out", str(tmp_path / "fresh.run"))
    assert embedded == [48, 12, 48, 12]
    assert (tmp_path / "stored.run").read_bytes() == (tmp_path / "fresh.run").read_bytes()


def test_stored_dev_side_of_another_task_is_not_overwritten(track, tmp_path: Path):
    root = tmp_path / "idx"
    Collection.from_vectors("mllm", ["a", "b"], np.eye(2, dtype=np.float32), None, "text", root=root,
                            extra={"task": "modelret-a"})
    with pytest.raises(EngineError, match="holds the modelret-a training set, not a stored mllm training set"):
        mllm.dev_side(track["dev"], track["qrels"], track["ids"], MllmOptions(root=root),
                      embeddings=given_embeddings()["dev"])


@pytest.mark.shared
@pytest.mark.slow
def test_real_size(shared, tmp_path: Path, encoder):
    """The 342 real questions and 1,131 real LLM ids with generated qrels: every LLM ranked for every question."""
    if not shared.exists():
        pytest.skip("../shared/data/trec-mllm not present")
    llms = list(read_id_list(shared / "llm_ids.txt", unique=True))
    rows = [line.split("\t")[0] for line in (shared / "llm_dev_data.tsv").read_text().splitlines() if line]
    rng = np.random.default_rng(0)
    qrels = tmp_path / "qrels.txt"
    with open(qrels, "w") as fh:
        for q in rows:
            best = rng.choice(len(llms), 2, replace=False)
            for j, llm in enumerate(llms):
                fh.write(f"{q} 0 {llm} {1 if j == best[0] else 2 if j == best[1] else 0}\n")
    out = tmp_path / "run.txt"
    options = MllmOptions(root=tmp_path / "idx", transfer=TransferOptions(k=10, temperature=0.05, prior_weight=0.2))
    mllm.rank_questions(shared / "llm_dev_data.tsv", qrels, shared / "llm_dev_data.tsv", out,
                        shared / "llm_ids.txt", options)
    run = read_run(out)
    assert len(run) == 342 and all(len(v) == 1131 for v in run.values())


# ---------------------------------------------------------------- the discovery set


def planted_discovery(root: Path, seed: int = 0, dev_per_topic: int = 6, disc_per_topic: int = 30,
                      noise: float = 1.2, signal: float = 1.5):
    """A planted dev set (6 topics × 30 LLMs: an expert 0.8 and a second expert 0.5 per topic, three generalists
    0.3) and a discovery file over the same topics whose confidences carry the relevance (fixtures/discovery.py).
    Returns (files, dev embeddings, discovery embeddings, discovery rows)."""
    from fixtures.discovery import discovery_rows, write_jsonl
    rng = np.random.default_rng(seed)
    topics, n, dim = 6, 30, 16
    llms = [f"llm_{i:03d}" for i in range(n)]
    p = np.full((topics, n), 0.01)
    for t in range(topics):
        p[t, [0, 1, 2]], p[t, 3 + 2 * t], p[t, 4 + 2 * t] = 0.3, 0.8, 0.5
    centres = rng.normal(size=(topics, dim))
    topic_of = np.repeat(np.arange(topics), dev_per_topic)
    emb = centres[topic_of] + noise * rng.normal(size=(len(topic_of), dim))
    qids = [f"q{t}{i % dev_per_topic:02d}" for i, t in enumerate(topic_of)]
    dev, qrels = [f"{q}\tquestion {q}" for q in qids], []
    for qid, t in zip(qids, topic_of):  # the relevant LLMs by their probability: grades 1 and 2
        rel = np.flatnonzero(rng.random(n) < p[t])
        ranked = rel[np.argsort(-p[t, rel] - 0.1 * rng.random(len(rel)))][:2]
        grade = {int(j): g for g, j in enumerate(ranked, 1)}
        qrels += [f"{qid} 0 {llm} {grade.get(j, 0)}" for j, llm in enumerate(llms)]
    root.mkdir(parents=True, exist_ok=True)
    files = {"dev": root / "dev.tsv", "qrels": root / "qrels.txt", "ids": root / "ids.txt",
             "discovery": root / "discovery.jsonl"}
    files["dev"].write_text("\n".join(dev) + "\n")
    files["qrels"].write_text("\n".join(qrels) + "\n")
    files["ids"].write_text("\n".join(llms) + "\n")
    rows, disc_emb = discovery_rows(p, centres, llms, disc_per_topic, noise, rng, signal=signal)
    write_jsonl(files["discovery"], rows)
    return files, np.asarray(emb, np.float32), disc_emb, rows


def test_discovery_file_formats_and_column_map_read_alike(tmp_path: Path):
    from fixtures.discovery import write_parquet, write_tsv
    from engine.tasks.model_ranking.discovery import STATS, read_discovery
    files, _, _, rows = planted_discovery(tmp_path, disc_per_topic=3)
    llms = [f"llm_{i:03d}" for i in range(30)]
    ref = read_discovery(files["discovery"], llms)
    assert len(ref.query_ids) == 18 and ref.soft.shape == (18, 30) and ref.llm_stats.shape == (30, len(STATS))
    # the soft label: the answer's mean log-probability, z-scored within its question (numpy by hand)
    first = np.array([np.mean(r["logprobs"]) for r in rows[:30]])
    np.testing.assert_allclose(ref.soft[0], (first - first.mean()) / first.std(), rtol=1e-4, atol=1e-5)
    assert ref.llm_stats[0, STATS.index("answered")] == 1.0
    np.testing.assert_allclose(ref.llm_stats[0, STATS.index("mean_tokens")], 4.0)
    for other in (write_tsv(tmp_path / "d.tsv", rows), write_parquet(tmp_path / "d.parquet", rows)):
        got = read_discovery(other, llms)
        assert got.query_ids == ref.query_ids and got.texts == ref.texts
        np.testing.assert_allclose(got.soft, ref.soft, rtol=1e-5, atol=1e-6)
    from fixtures.discovery import write_jsonl
    renamed = write_jsonl(tmp_path / "r.jsonl", rows, {"query_id": "qid", "logprobs": "token_logprobs"})
    got = read_discovery(renamed, llms, "query_id=qid, logprobs=token_logprobs")
    np.testing.assert_allclose(got.soft, ref.soft, rtol=1e-6)
    assert read_discovery(files["discovery"], llms[:10]).unknown_llms == 18 * 20  # other LLMs counted, skipped


@pytest.mark.parametrize("body, columns, message", [
    ('{"qid": "a", "llm_id": "llm_000", "logprobs": [-1]}\n', None, r"d.jsonl:1: no column 'query_id'"),
    ('{"query_id": "a", "llm_id": "llm_000", "logprobs": [-1, "x"]}\n', None, r"d.jsonl:1: .*'x', not a number"),
    ('{"query_id": "a", "llm_id": "llm_000", "logprobs": [0.5]}\n', None, r"d.jsonl:1: .*not a log-probability"),
    ('{"query_id": "a", "llm_id": "zzz", "logprobs": [-1]}\n', None, "no row answers a question"),
    ('{"query_id": "a", "llm_id": "llm_000", "logprobs": [-1]}\n', "qid", "write field=column pairs"),
    ('{"query_id": "a", "llm_id": "llm_000", "logprobs": [-1]}\n', "question=q", "write field=column pairs"),
])
def test_bad_discovery_input_is_one_line(tmp_path: Path, body, columns, message):
    from engine.tasks.model_ranking.discovery import read_discovery
    path = tmp_path / "d.jsonl"
    path.write_text(body)
    with pytest.raises(EngineError, match=message):
        read_discovery(path, ["llm_000"], columns)


def test_discovery_cli_refuses_bad_input_before_any_model_loads(track, tmp_path: Path):
    base = ["mllm", "--dev-queries", str(track["dev"]), "--qrels", str(track["qrels"]), "--cv",
            "--root", str(tmp_path / "idx")]
    (tmp_path / "cols.jsonl").write_text('{"qid": "a", "llm_id": "llm_000", "logprobs": [-1]}\n')
    (tmp_path / "cols.tsv").write_text("query_id\tmodel\tlogprobs\na\tllm_000\t-1\n")
    from fixtures.discovery import write_parquet
    write_parquet(tmp_path / "cols.parquet", [{"query_id": "a", "llm_id": "llm_000", "token_logprobs": [-1.0]}])
    for extra, message in ((["--discovery", str(tmp_path / "none.jsonl")], "no such file"),
                           (["--discovery", str(track["ids"])], "JSONL, TSV or parquet"),
                           (["--discovery-columns", "query_id=q"], "give it too"),
                           (["--discovery", str(tmp_path / "cols.jsonl")], "cols.jsonl:1: no column 'query_id'"),
                           (["--discovery", str(tmp_path / "cols.tsv")], "cols.tsv:2: no column 'llm_id'"),
                           (["--discovery", str(tmp_path / "cols.parquet"), "--discovery-columns", "llm_id=model"],
                            "cols.parquet:1: no column 'model'")):
        result = CliRunner().invoke(app, base + extra)
        assert result.exit_code != 0 and isinstance(result.exception, EngineError), result.output
        assert message in str(result.exception) and "\n" not in str(result.exception)
        assert not (tmp_path / "idx").exists()


def test_discovery_confidences_raise_ltr_above_the_same_method_without(tmp_path: Path, saved):
    """Few noisy dev questions, many discovery questions whose confidences carry relevance: LambdaRank with the
    discovery features beats the same LambdaRank without them out of fold, on nDCG@10 and MRR; the arrays are
    stored with the dev side and reused."""
    from engine.tasks.model_ranking.study import out_of_fold
    files, emb, disc_emb, _ = planted_discovery(tmp_path)
    options = MllmOptions(root=tmp_path / "idx", discovery=files["discovery"])
    args = (files["dev"], files["qrels"], files["ids"])
    side = mllm.dev_side(*args, options, embeddings=emb, discovery_embeddings=disc_emb)
    assert set(side.arrays) == {mllm.DISCOVERY_EMB, mllm.DISCOVERY_SOFT, mllm.LLM_STATS}
    again = mllm.dev_side(*args, options, embeddings=emb, discovery_embeddings=disc_emb)
    assert saved == ["mllm"] and np.array_equal(again.arrays[mllm.DISCOVERY_SOFT], side.arrays[mllm.DISCOVERY_SOFT],
                                                equal_nan=True)
    gain = data.grade_gains(options.targets)
    params = options.transfer.fixed(mllm.FIXED)

    def fold(arrays):
        return lambda tr, te: mllm.ltr_predict(emb[tr], emb[te], side.scores[tr], side.grades[tr], gain,
                                               mllm.Evidence(side.candidate_ids, arrays, pseudo=False), params)
    means = {}
    for label, arrays in (("with", side.arrays), ("without", {})):
        values = [mllm.scores_of(side.grades, gain, out_of_fold(fold(arrays), len(emb), 30, 4, seed))
                  for seed in range(2)]
        means[label] = {k: np.mean([v[k] for v in values]) for k in values[0]}
    assert means["with"]["ndcg@10"] > means["without"]["ndcg@10"] + 0.05, means
    assert means["with"]["mrr"] > means["without"]["mrr"], means


def test_pseudo_grades_are_the_two_most_confident_answers():
    soft = np.array([[0.1, 2.0, np.nan, 1.0], [np.nan, np.nan, np.nan, 0.5], [np.nan] * 4])
    assert mllm.pseudo_grades(soft).tolist() == [[0, 1, 0, 2], [0, 0, 0, 1], [0, 0, 0, 0]]


def test_discovery_questions_as_training_queries_raise_ltr_with_few_dev_questions(tmp_path: Path):
    """Three dev questions per topic, many discovery questions: LambdaRank that also trains on the discovery
    questions (labelled by the answers' confidences) ranks better out of fold than the same LambdaRank with the
    discovery features alone; the pseudo-queries are the discovery questions evenly spread, at most as many as
    the training questions, and none sees itself among its discovery neighbours."""
    from engine.tasks.model_ranking.study import out_of_fold
    files, emb, disc_emb, _ = planted_discovery(tmp_path, dev_per_topic=3)
    options = MllmOptions(root=tmp_path / "idx", discovery=files["discovery"])
    side = mllm.dev_side(files["dev"], files["qrels"], files["ids"], options, embeddings=emb,
                         discovery_embeddings=disc_emb)
    gain, params = data.grade_gains(options.targets), options.transfer.fixed(mllm.FIXED)
    more = mllm.pseudo_queries(emb[:12], side.arrays, params)
    assert more.labels.shape == (12, 30) and (more.labels == 1).sum() == 12 and (more.labels == 2).sum() == 12
    assert more.extra.shape == (12, 30, 2) and np.isfinite(more.extra).all()
    means = {}
    for pseudo in (False, True):
        fold = lambda tr, te: mllm.ltr_predict(emb[tr], emb[te], side.scores[tr], side.grades[tr], gain,  # noqa: E731
                                               mllm.Evidence(side.candidate_ids, side.arrays, pseudo), params)
        values = [mllm.scores_of(side.grades, gain, out_of_fold(fold, len(emb), 30, 4, seed)) for seed in range(2)]
        means[pseudo] = {k: np.mean([v[k] for v in values]) for k in values[0]}
    assert means[True]["ndcg@10"] > means[False]["ndcg@10"] + 0.04, means
    assert means[True]["mrr"] >= means[False]["mrr"] - 0.01, means


def test_run_with_the_discovery_set_ranks_every_llm(tmp_path: Path):
    """`--queries … --discovery`: the discovery arrays are stored with the dev side and a run over every LLM is
    written (LambdaRank with the discovery features; the questions embedded like the dev ones)."""
    files, emb, disc_emb, _ = planted_discovery(tmp_path, disc_per_topic=5)
    test = tmp_path / "test.tsv"
    test.write_text("".join(f"t{i}\tnew question {i}\n" for i in range(4)))
    options = MllmOptions(root=tmp_path / "idx", method="ltr", discovery=files["discovery"])
    summary = mllm.rank_questions(files["dev"], files["qrels"], test, tmp_path / "run.txt", files["ids"], options,
                                  embeddings={"dev": emb, "queries": emb[::9][:4], "discovery": disc_emb})
    run = read_run(tmp_path / "run.txt")
    assert set(run) == {f"t{i}" for i in range(4)} and all(len(s) == 30 for s in run.values()), summary
    stored = Collection.open("mllm", options.root)
    assert np.array_equal(stored.array(mllm.DISCOVERY_EMB), disc_emb)


# ---------------------------------------------------------------- the default on planted constructions


def _often_second(seed: int, signal: bool, topics: int = 10, per_topic: int = 6, m: int = 30):
    """Planted questions where the topic's expert (LLM 3 + topic) is nearly always relevant (0.95) and the best
    answer, and two generalists often relevant (LLM 0: 0.65, LLM 1: 0.35) are the second-best: the prior puts a
    generalist first (right for MRR, worth little to nDCG@10). With `signal` the question's embedding tells its
    topic; without, each question's expert is drawn at random (no question signal). (embeddings, grades)."""
    from fixtures.planted_llms import topic_questions
    emb, grades = topic_questions(seed, signal, topics, per_topic, m, noise=0.6, first_expert=3,
                                  relevant=(0.95, 0.65, 0.35))
    return emb.astype(np.float32), grades


def test_default_keeps_the_gain_where_generalists_are_second_and_is_the_prior_without_signal(seed: int = 0):
    """The default (the ensemble, LambdaRank alone or the topic mixture alone, blended with the prior per rank
    position, `mllm.fold_methods`) out of fold:
    with question signal nDCG@10 ≥ the prior's + 0.1 and MRR ≥ the prior's; without, the prior (a weight
    qualifies by chance in at most one fold, the rule's level) and never below it beyond noise."""
    from engine.core.encoders.base import l2_normalize
    from engine.tasks.model_ranking.study import out_of_fold
    from engine.tasks.model_ranking.transfer import column_prior
    gain = data.grade_gains(data.DEFAULT_TARGETS)
    for signal in (True, False):
        emb, grades = _often_second(seed, signal)
        scores = np.vectorize(gain.get, otypes=[float])(grades)
        n, m = grades.shape
        ids = [f"llm_{j:03d}" for j in range(m)]
        methods = mllm.fold_methods(l2_normalize(emb), scores, grades, gain, mllm.Evidence(ids), mllm.FIXED)
        chosen: list = []
        default = mllm.guarded_positions(list(methods), scores, grades, gain, m, chosen)
        got = mllm.scores_of(grades, gain, out_of_fold(default, n, m, 3, seed))
        base = mllm.scores_of(grades, gain, out_of_fold(
            lambda tr, te: np.tile(column_prior(scores[tr]), (len(te), 1)), n, m, 3, seed))
        if signal:
            assert got["ndcg@10"] >= base["ndcg@10"] + 0.1, (got, base, chosen)
            assert got["mrr"] >= base["mrr"], (got, base, chosen)
        else:
            assert sum(w != (0.0, 0.0) for w in chosen) <= 1, chosen
            assert got["ndcg@10"] >= base["ndcg@10"] - 0.01 and got["mrr"] >= base["mrr"] - 0.01, (got, base)


def test_discovery_confidences_join_the_ensemble_and_raise_it(tmp_path: Path):
    """With a discovery set the ensemble has one more ranking, the confidences of the 30 nearest discovery
    questions (`discovery_transfer` at BROAD), and ranks better out of fold than the same ensemble whose
    LambdaRank alone reads the discovery set, which ranks better than the ensemble without it (nDCG@10 and MRR);
    without one it is the three rankings as before."""
    from engine.tasks.model_ranking.study import memoized, out_of_fold
    from engine.tasks.model_ranking.transfer import column_prior, rank_targets, transfer
    files, emb, disc_emb, _ = planted_discovery(tmp_path, dev_per_topic=4)
    options = MllmOptions(root=tmp_path / "idx", discovery=files["discovery"])
    side = mllm.dev_side(files["dev"], files["qrels"], files["ids"], options, embeddings=emb,
                         discovery_embeddings=disc_emb)
    gain, params = data.grade_gains(options.targets), mllm.FIXED
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    assert mllm.discovery_transfer(unit, {}, mllm.BROAD) is None
    broad = mllm.discovery_transfer(unit[:5], side.arrays, mllm.BROAD)
    assert broad.shape == (5, 30) and np.isfinite(broad).all()

    def fold(ltr_arrays, member_arrays):
        ltr_fold = memoized(lambda tr, te: mllm.ltr_predict(emb[tr], emb[te], side.scores[tr], side.grades[tr], gain,
                                                            mllm.Evidence(side.candidate_ids, ltr_arrays), params))
        return lambda tr, te: mllm.ensemble(ltr_fold(tr, te), unit[te] @ unit[tr].T, side.scores[tr], params,
                                            mllm.discovery_transfer(unit[te], member_arrays, mllm.BROAD))
    tr, te = np.arange(0, 24, 2), np.arange(1, 24, 2)
    plain = fold({}, {})(tr, te)
    sim, prior = unit[te] @ unit[tr].T, column_prior(side.scores[tr])
    three = [mllm.ltr_predict(emb[tr], emb[te], side.scores[tr], side.grades[tr], gain,
                              mllm.Evidence(side.candidate_ids, {}), params),
             transfer(sim, side.scores[tr], prior, params), transfer(sim, side.scores[tr], prior, mllm.BROAD)]
    assert np.allclose(plain, np.mean([rank_targets(p) for p in three], axis=0))
    means = {}
    for label, ltr_arrays, member_arrays in (("with", side.arrays, side.arrays), ("ltr only", side.arrays, {}),
                                             ("without", {}, {})):
        values = [mllm.scores_of(side.grades, gain, out_of_fold(fold(ltr_arrays, member_arrays), len(emb), 30, 4,
                                                                seed)) for seed in range(2)]
        means[label] = {k: np.mean([v[k] for v in values]) for k in values[0]}
    for better, worse in (("with", "ltr only"), ("ltr only", "without")):
        assert means[better]["ndcg@10"] > means[worse]["ndcg@10"] + 0.03, means
        assert means[better]["mrr"] > means[worse]["mrr"], means


def test_discovery_batches_read_as_the_row_reader_does(tmp_path: Path, monkeypatch):
    """JSONL and parquet go through pyarrow's batches (no row reader at all); forcing the row reader gives the
    same questions, texts, soft labels and statistics."""
    from fixtures.discovery import write_parquet
    from engine.tasks.model_ranking import discovery
    files, _, _, rows = planted_discovery(tmp_path, disc_per_topic=3)
    llms = [f"llm_{i:03d}" for i in range(25)]  # some LLMs unknown: counted and skipped alike
    parquet = write_parquet(tmp_path / "d.parquet", rows)
    with monkeypatch.context() as patch:
        patch.setattr(discovery, "_read_rows", lambda *a: pytest.fail("the row reader ran"))
        fast = [discovery.read_discovery(f, llms) for f in (files["discovery"], parquet)]
    monkeypatch.setattr(discovery, "_pyarrow_json", lambda: False)
    for got, f in zip(fast, (files["discovery"], parquet)):
        ref = discovery.read_discovery(f, llms)
        assert got.query_ids == ref.query_ids and got.texts == ref.texts
        assert (got.rows, got.unknown_llms) == (ref.rows, ref.unknown_llms) == (len(rows), 18 * 5)
        np.testing.assert_allclose(got.soft, ref.soft, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got.llm_stats, ref.llm_stats, rtol=1e-6)


@pytest.mark.parametrize("suffix", [".jsonl", ".tsv"])
def test_a_question_answered_twice_by_one_llm_is_refused_naming_both_lines(tmp_path: Path, suffix):
    """Counted twice, the LLM's tokens would double; which answer to keep would be a guess: one line instead."""
    from fixtures.discovery import write_jsonl, write_tsv
    from engine.tasks.model_ranking.discovery import read_discovery
    row = {"query_id": "a", "query_text": "t", "llm_id": "llm_001", "answer": "x", "logprobs": [-1.0, -2.0]}
    rows = [row, {**row, "llm_id": "llm_000"}, {**row, "query_id": "b"}, {**row, "logprobs": [-0.5]}]
    path = (write_jsonl if suffix == ".jsonl" else write_tsv)(tmp_path / f"d{suffix}", rows)
    line = 4 if suffix == ".jsonl" else 5  # the TSV's header is line 1
    with pytest.raises(EngineError, match=rf"d{suffix}:{line}: question 'a' answered twice by LLM 'llm_001' "
                                          rf"\(first on line {line - 3}\)"):
        read_discovery(path, ["llm_000", "llm_001"])


def test_a_huge_finite_logprob_is_clipped_and_said_not_read_as_no_answer(tmp_path: Path, capsys):
    """−1e300 is finite but overflows float32: the answer must still count as given (its confidence the lowest of
    its question), and the clipping is said in one warning line naming the file and line."""
    from fixtures.discovery import write_jsonl
    from engine.tasks.model_ranking.discovery import LOGPROB_FLOOR, STATS, read_discovery
    rows = [{"query_id": q, "query_text": "t", "llm_id": llm, "answer": "x", "logprobs": [-1.0, -2.0]}
            for q in ("a", "b") for llm in ("llm_000", "llm_001", "llm_002")]
    rows[4]["logprobs"] = [-1e300, -1.0]
    for reader in ("batches", "rows"):
        got = read_discovery(write_jsonl(tmp_path / f"{reader}.jsonl", rows) if reader == "batches" else
                             _as_tsv(tmp_path, rows), ["llm_000", "llm_001", "llm_002"])
        assert np.isfinite(got.soft).all() and got.soft[1].argmin() == 1
        assert got.llm_stats[1, STATS.index("answered")] == 1.0
        assert got.llm_stats[1, STATS.index("mean_logprob")] == pytest.approx((-1.5 + (LOGPROB_FLOOR - 1) / 2) / 2)
        err = "".join(capsys.readouterr().err.split())
        assert "1tokenlog-probabilitybelow-10000" in err and (":5:" in err if reader == "batches" else ":6:" in err)


def _as_tsv(tmp_path: Path, rows) -> Path:
    from fixtures.discovery import write_tsv
    return write_tsv(tmp_path / "rows.tsv", rows)


def test_discovery_questions_are_embedded_once_by_content(tmp_path: Path, monkeypatch, fake_encoder):
    """Each distinct discovery question is embedded once; a new dev side (another grade map) over the same
    questions reuses the embeddings, while another model, or the same one on the other runtime, embeds again."""
    files, emb, _, _ = planted_discovery(tmp_path, disc_per_topic=2)
    calls: list[int] = []
    real = mllm.embed
    monkeypatch.setattr(mllm, "embed", lambda texts, model, encoder=None: calls.append(len(texts))
                        or real(texts, model, encoder))
    sides = [mllm.dev_side(files["dev"], files["qrels"], files["ids"],
                           MllmOptions(root=tmp_path / "idx", discovery=files["discovery"], targets=targets),
                           embeddings=emb) for targets in ("0:0,1:1.0,2:0.7", "0:0,1:1.0,2:0.5")]
    questions = len(sides[0].arrays[mllm.DISCOVERY_EMB])
    assert calls == [questions] and questions > 1  # each answered by 30 LLMs: embedded once, for both sides
    assert np.array_equal(sides[0].arrays[mllm.DISCOVERY_EMB], sides[1].arrays[mllm.DISCOVERY_EMB])
    texts = mllm.embed_cached(["b", "a", "b"], "other-model", tmp_path / "cache")
    assert calls == [questions, 2] and np.array_equal(texts[0], texts[2])
    assert np.array_equal(mllm.embed_cached(["b", "a"], "other-model", tmp_path / "cache"), texts[:2])
    assert calls == [questions, 2]
    loaded = mllm.question_encoder("other-model")
    monkeypatch.setattr(mllm, "question_encoder", lambda model: replace(loaded, info={**loaded.info, "runtime": "onnx"}))
    mllm.embed_cached(["b", "a"], "other-model", tmp_path / "cache")
    assert calls == [questions, 2, 2]


def test_dev_side_is_keyed_on_the_encoder_s_identity(track, tmp_path: Path, monkeypatch, fake_encoder):
    """The stored dev side names what embedded it, as the discovery cache does: the same model reuses it, the
    same model on the other runtime (onnx instead of torch) embeds the dev questions again."""
    calls: list[str] = []
    real = mllm.embed
    monkeypatch.setattr(mllm, "embed", lambda texts, model, encoder=None: calls.append(
        encoder.info.get("runtime", "torch")) or real(texts, model, encoder))
    args, options = (track["dev"], track["qrels"], track["ids"]), MllmOptions(root=tmp_path / "idx",
                                                                              model="other-model")
    first = mllm.dev_side(*args, options)
    assert np.array_equal(mllm.dev_side(*args, options).embeddings[mllm.EMBEDDING], first.embeddings[mllm.EMBEDDING])
    assert calls == ["torch"]
    loaded = mllm.question_encoder("other-model")
    monkeypatch.setattr(mllm, "question_encoder", lambda model: replace(loaded, info={**loaded.info, "runtime": "onnx"}))
    mllm.dev_side(*args, options)
    assert calls == ["torch", "onnx"]


def test_questions_are_embedded_on_onnxruntime_as_torch_embeds_them(encoder):
    """On the CPU the questions go through the encoder `engine build` encodes texts with (the model's
    onnxruntime sessions, slices in parallel, longest first); their rows equal the torch model's, in order."""
    from engine.core.encoders.registry import DEFAULT_TEXT_SPEC
    assert mllm.question_encoder(DEFAULT_TEXT_SPEC).info["runtime"] == "onnx"
    rng = np.random.default_rng(0)
    texts = [_question(t % len(TOPICS), rng) + " and" * int(rng.integers(0, 40)) for t in range(70)] + ["x", "?"]
    got = mllm.embed(texts, DEFAULT_TEXT_SPEC)
    want = encoder.encode_texts(texts)
    assert got.shape == want.shape and got.dtype == np.float32
    assert (1 - np.sum(got * want, axis=1)).max() < 1e-5 and np.abs(got - want).max() < 1e-4


def test_discovery_batches_take_integer_then_decimal_logprobs(tmp_path: Path, monkeypatch):
    """A first block of whole-number log-probabilities does not make later decimals irregular (no fallback)."""
    from fixtures.discovery import write_jsonl
    from engine.tasks.model_ranking import discovery
    rows = [{"query_id": f"q{i}", "query_text": "t", "llm_id": "llm_000", "answer": "x", "logprobs": [-1, -2]}
            for i in range(3)] + [{"query_id": "q9", "query_text": "t", "llm_id": "llm_000", "answer": "x",
                                   "logprobs": [-0.5, -0.25]}]
    monkeypatch.setattr(discovery, "_read_rows", lambda *a: pytest.fail("the row reader ran"))
    got = discovery.read_discovery(write_jsonl(tmp_path / "d.jsonl", rows), ["llm_000"])
    assert got.query_ids == ["q0", "q1", "q2", "q9"]
    assert got.llm_stats[0, discovery.STATS.index("mean_logprob")] == pytest.approx((3 * -1.5 - 0.375) / 4)


def test_discovery_questions_shape_the_default_s_topics(tmp_path: Path):
    """With a discovery set the default's topic mixture (`fold_methods`, alone and in the ensemble) fits its topics
    on the discovery questions too (`discovery_topics`: at most two per training question, labelled by their two
    most confident LLMs), and with four dev questions per topic ranks better out of fold than the mixture fitted
    on the dev questions alone (nDCG@10 and MRR); without a discovery set it is that mixture."""
    from engine.core.encoders.base import l2_normalize
    from engine.tasks.model_ranking import topics
    from engine.tasks.model_ranking.study import out_of_fold
    means: dict[str, list[dict]] = {"shaped": [], "dev alone": []}
    for seed in range(2):
        files, emb, disc_emb, _ = planted_discovery(tmp_path / str(seed), seed, dev_per_topic=4)
        options = MllmOptions(root=tmp_path / str(seed) / "idx", discovery=files["discovery"])
        side = mllm.dev_side(files["dev"], files["qrels"], files["ids"], options, embeddings=emb,
                             discovery_embeddings=disc_emb)
        gain, unit = data.grade_gains(options.targets), l2_normalize(emb)
        shaped_by = mllm.discovery_topics(side.arrays, 10)
        assert shaped_by[0].shape == (20, emb.shape[1]) and set(np.unique(shaped_by[1])) == {0.0, 1.0}
        assert (shaped_by[1].sum(1) == 2).all() and mllm.discovery_topics({}, 10) is None
        folds = {}
        for label, arrays in (("shaped", side.arrays), ("dev alone", {})):
            folds[label] = mllm.fold_methods(unit, side.scores, side.grades, gain,
                                             mllm.Evidence(side.candidate_ids, arrays), mllm.FIXED)[2]
        tr, te = np.arange(0, 24, 2), np.arange(1, 24, 2)
        assert np.array_equal(folds["shaped"](tr, te), topics.topic_mixture(
            unit[tr], side.scores[tr], unit[te], mllm.discovery_topics(side.arrays, len(tr))))
        assert np.array_equal(folds["dev alone"](tr, te), topics.topic_mixture(unit[tr], side.scores[tr], unit[te]))
        for label, fold in folds.items():
            means[label] += [mllm.scores_of(side.grades, gain, out_of_fold(fold, len(emb), 30, 4, s)) for s in range(2)]
    mean = {label: {k: np.mean([v[k] for v in values]) for k in values[0]} for label, values in means.items()}
    assert mean["shaped"]["ndcg@10"] > mean["dev alone"]["ndcg@10"] + 0.1, mean
    assert mean["shaped"]["mrr"] > mean["dev alone"]["mrr"] + 0.05, mean
