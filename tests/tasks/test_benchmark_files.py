"""Converters, and checks of the evaluator on real benchmark files (skipped when ../shared/data is absent).
DSEBench's converters and published table live in test_dse_files.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.eval.evaluate import evaluate
from engine.eval.groups import read_groups
from engine.tasks.model_ranking.data import criticality_label, ntcir_a_groups, ntcir_a_qrels
from engine.eval.runs import read_qrels
from conftest import SHARED_DATA, run_cli

DATA = SHARED_DATA
NTCIR_A = DATA / "ntcir19-modelretrieval-a"


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
