"""DSEBench's converters, and the proof that `engine eval` reproduces DSEBench's published baseline table
from their own runs and judgments (skipped when ../shared/data is absent)."""
from __future__ import annotations

import json

import pytest

from engine.errors import EngineError
from engine.io.runs import read_qrels
from engine.tasks.dse.data import dsebench_qrels, dsebench_run, read_dsebench_judgments


@pytest.fixture(scope="session")
def dsebench(shared_data):
    return shared_data / "dsebench"


def judgment(case: str, cand: str, q_rel: int, t_sim: int) -> dict:
    return {"query_id": "NTCIR_1", "target_dataset_id": "t", "candidate_dataset_id": cand, "case_id": case,
            "query_rel": q_rel, "field_query_rel": [1, 0, 0, 0, 0], "target_sim": t_sim,
            "field_target_sim": [0, 0, 0, 0, 0]}


def test_dsebench_gain_is_query_rel_times_target_sim(tmp_path):
    src = tmp_path / "j.json"
    src.write_text(json.dumps([judgment("1", "a", 2, 2), judgment("1", "b", 1, 0), judgment("2", "c", 1, 2)]))
    assert dsebench_qrels(src, tmp_path / "q.txt") == 3
    assert (tmp_path / "q.txt").read_text() == "1 0 a 4\n1 0 b 0\n2 0 c 2\n"


@pytest.mark.parametrize("records,message", [
    ([{"case_id": "1", "candidate_dataset_id": "a", "query_rel": 1}], "record 1 lacks target_sim"),
    ([judgment("1", "a", 1, 1), judgment("1", "a", 2, 2)], "record 2: case 1 judges candidate a twice"),
    ([judgment("1", "a", "x", 1)], "must be whole numbers from 0 to 2"),
    ({"not": "a list"}, "expected a JSON list"),
])
def test_dsebench_judgments_errors(tmp_path, records, message):
    src = tmp_path / "j.json"
    src.write_text(json.dumps(records))
    with pytest.raises(EngineError, match=message):
        read_dsebench_judgments(src)


def test_dsebench_run_keeps_trec_eval_tie_order(tmp_path):
    src = tmp_path / "BM25_results.json"
    src.write_text(json.dumps({"7": {"a": 1.0, "c": 1.0, "b": 2.0, "d": 0.99999999}}))
    assert dsebench_run(src, tmp_path / "r.run") == 4
    lines = (tmp_path / "r.run").read_text().splitlines()
    assert [ln.split()[2] for ln in lines] == ["b", "c", "a", "d"]  # tie a/c: docid descending, like trec_eval
    assert {ln.split()[5] for ln in lines} == {"BM25_results"}
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": {"a": NaN}}')
    with pytest.raises(EngineError, match="NaN is not valid JSON"):
        dsebench_run(bad, tmp_path / "x.run")
    bad.write_text('{"1": {"a": 1.0},\n "2": ')
    with pytest.raises(EngineError, match=r"bad.json:2: invalid JSON"):
        dsebench_run(bad, tmp_path / "x.run")


# ---------------------------------------------------------------- real data: published numbers

DSEBENCH_ROWS = {"BM25": "BM25_results.json", "TF-IDF": "TFIDF_results.json", "BGE": "BGE_results.json",
                 "GTE": "GTE_results.json"}
DSEBENCH_METRICS = ["map@5", "map@10", "ndcg@5", "ndcg@10", "recall@5", "recall@10"]  # the table's columns


def published_dsebench(dsebench) -> dict[str, list[str]]:
    """Rows of the first table (retrieval models) of Baselines/evaluation_results.md, as printed."""
    text = (dsebench / "Baselines" / "evaluation_results.md").read_text(encoding="utf-8")
    retrieval = text.split("# Evaluation Results of Reranking Models")[0]
    rows = {}
    for line in retrieval.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] in DSEBENCH_ROWS:
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.shared
def test_engine_eval_reproduces_dsebench_published_table(dsebench, run_cli, monkeypatch, capsys, tmp_path):
    if not dsebench.is_dir():
        pytest.skip("../shared/data/dsebench is absent")
    published = published_dsebench(dsebench)
    assert set(published) == set(DSEBENCH_ROWS)
    qrels = tmp_path / "dsebench.qrels"
    code, _, _ = run_cli("convert", "dsebench-qrels",
                         dsebench / "Data" / "human_annotated_judgments.json", qrels)
    assert code == 0
    assert len(read_qrels(qrels)) == 141
    for row, file in DSEBENCH_ROWS.items():
        run = tmp_path / f"{row}.run"
        code, _, _ = run_cli("convert", "dsebench-run",
                             dsebench / "Baselines" / "Retrieval" / file, run)
        assert code == 0
        code, out, _ = run_cli("eval", run, qrels, "--metrics", ",".join(DSEBENCH_METRICS),
                               "--json")
        assert code == 0
        means = json.loads(out)
        ours = [f"{means[m]:.4f}" for m in DSEBENCH_METRICS]
        assert ours == published[row], row
