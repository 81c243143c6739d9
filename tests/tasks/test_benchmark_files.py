"""Converters, and the proof that the evaluator reproduces published numbers: DSEBench's baseline table
from their own runs and judgments (skipped when ../shared/data is absent)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.eval.evaluate import evaluate
from engine.eval.groups import read_groups
from engine.tasks.dse.data import dsebench_qrels, dsebench_run, read_dsebench_judgments
from engine.tasks.model_ranking.data import criticality_label, ntcir_a_groups, ntcir_a_qrels
from engine.eval.runs import read_qrels
from conftest import SHARED_DATA, run_cli

DATA = SHARED_DATA
DSEBENCH = DATA / "dsebench"
NTCIR_A = DATA / "ntcir19-modelretrieval-a"


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
    ([judgment("1", "a", "x", 1)], "must be non-negative integers"),
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
    with pytest.raises(EngineError, match="score nan is not a finite number"):
        dsebench_run(bad, tmp_path / "x.run")
    bad.write_text('{"1": {"a": 1.0},\n "2": ')
    with pytest.raises(EngineError, match=r"bad.json:2: invalid JSON"):
        dsebench_run(bad, tmp_path / "x.run")


def test_ntcir_a_converters(tmp_path):
    gt = tmp_path / "ground-truth.csv"
    gt.write_text("task_id,model_id,f1,model_rank,normalized_f1,relevance_score\n"
                  "5,1,0.9,1.0,1.0,3\n5,2,0.8,2.0,0.89,0\n6,1,0.5,1.0,1.0,3\n")
    assert ntcir_a_qrels(gt, tmp_path / "q.txt") == 3
    assert read_qrels(tmp_path / "q.txt") == {"5": {"1": 3, "2": 0}, "6": {"1": 3}}
    gt.write_text("task_id,model_id,relevance_score\n5,1,3\n5,1,2\n")
    with pytest.raises(EngineError, match=r"ground-truth.csv:3: task 5 × model 1 graded twice"):
        ntcir_a_qrels(gt, tmp_path / "q.txt")
    gt.write_text("task_id,model_id,relevance_score\n5,1,high\n")
    with pytest.raises(EngineError, match=r"ground-truth.csv:2: relevance_score 'high' is not an integer"):
        ntcir_a_qrels(gt, tmp_path / "q.txt")
    tasks = tmp_path / "tasks.csv"
    tasks.write_text("task_id,task_name,task_criticalness\n5,a,High Criticalness\n6,b,Low Criticalness\n")
    assert ntcir_a_groups(tasks, tmp_path / "g.tsv") == 2
    assert (tmp_path / "g.tsv").read_text() == "qid\tgroup\n5\thigh\n6\tlow\n"
    assert read_groups(tmp_path / "g.tsv") == {"5": "high", "6": "low"}
    assert criticality_label("Medium Criticality") == "medium"


# ---------------------------------------------------------------- real data: published numbers

DSEBENCH_ROWS = {"BM25": "BM25_results.json", "TF-IDF": "TFIDF_results.json", "BGE": "BGE_results.json",
                 "GTE": "GTE_results.json"}
DSEBENCH_METRICS = ["map@5", "map@10", "ndcg@5", "ndcg@10", "recall@5", "recall@10"]  # the table's columns


def published_dsebench() -> dict[str, list[str]]:
    """Rows of the first table (retrieval models) of Baselines/evaluation_results.md, as printed."""
    text = (DSEBENCH / "Baselines" / "evaluation_results.md").read_text(encoding="utf-8")
    retrieval = text.split("# Evaluation Results of Reranking Models")[0]
    rows = {}
    for line in retrieval.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] in DSEBENCH_ROWS:
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.shared
@pytest.mark.skipif(not DSEBENCH.is_dir(), reason="../shared/data/dsebench is absent")
def test_engine_eval_reproduces_dsebench_published_table(monkeypatch, capsys, tmp_path):
    published = published_dsebench()
    assert set(published) == set(DSEBENCH_ROWS)
    qrels = tmp_path / "dsebench.qrels"
    code, _, _ = run_cli(monkeypatch, capsys, "convert", "dsebench-qrels",
                         DSEBENCH / "Data" / "human_annotated_judgments.json", qrels)
    assert code == 0
    assert len(read_qrels(qrels)) == 141
    for row, file in DSEBENCH_ROWS.items():
        run = tmp_path / f"{row}.run"
        code, _, _ = run_cli(monkeypatch, capsys, "convert", "dsebench-run",
                             DSEBENCH / "Baselines" / "Retrieval" / file, run)
        assert code == 0
        code, out, _ = run_cli(monkeypatch, capsys, "eval", run, qrels, "--metrics", ",".join(DSEBENCH_METRICS),
                               "--json")
        assert code == 0
        means = json.loads(out)
        ours = [f"{means[m]:.4f}" for m in DSEBENCH_METRICS]
        assert ours == published[row], row


@pytest.mark.shared
@pytest.mark.skipif(not NTCIR_A.is_dir(), reason="../shared/data/ntcir19-modelretrieval-a is absent")
def test_ntcir_a_ground_truth_and_criticality_groups(tmp_path):
    assert ntcir_a_qrels(NTCIR_A / "ground-truth.csv", tmp_path / "a.qrels") == 1580
    assert ntcir_a_groups(NTCIR_A / "tasks.csv", tmp_path / "a.groups") == 127
    qrels = read_qrels(tmp_path / "a.qrels")
    groups = read_groups(tmp_path / "a.groups")
    assert len(qrels) == 79 and all(len(models) == 20 for models in qrels.values())
    assert qrels["1002"]["1"] == 2  # the file's relevance_score column (normalized F1 0.9697 → grade 2)
    assert set(groups.values()) == {"high", "medium", "low"}
    # a run that ranks models by their grade is ideal: nDCG_exp@1,3,5 = 1 in every criticality group
    ideal = {t: {m: float(g) for m, g in models.items()} for t, models in qrels.items()}
    ev = evaluate(ideal, qrels, "ndcg_exp@1,ndcg_exp@3,ndcg_exp@5", groups)
    assert set(ev.groups) == {"high", "medium", "low"} and sum(ev.group_sizes.values()) == 79
    for values in [ev.means, *ev.groups.values()]:
        assert values == pytest.approx(dict.fromkeys(["ndcg_exp@1", "ndcg_exp@3", "ndcg_exp@5"], 1.0))
    # reversed ranking: worst model first scores below the ideal everywhere
    worst = {t: {m: -s for m, s in models.items()} for t, models in ideal.items()}
    assert evaluate(worst, qrels, "ndcg_exp@1").means["ndcg_exp@1"] < 0.5
