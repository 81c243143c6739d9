"""`engine modelret-a` on a generated NTCIR-19 ModelRetrieval A folder with a planted structure, bad input,
and the real release when ../shared/data is present."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import REPO, SHARED_DATA
from engine.cli import app
from engine.tasks.model_ranking import data, modelret_a
from engine.errors import EngineError
from engine.eval.runs import read_run

SHARED = SHARED_DATA / "ntcir19-modelretrieval-a"

TOPICS = {
    "finance": "stock market bank interest loan investor dividend portfolio inflation earnings bond trading",
    "medicine": "patient doctor hospital diagnosis symptom treatment surgery vaccine clinical disease nurse therapy",
    "sports": "football match goal team player coach season league championship score stadium tournament",
    "cooking": "recipe oven flour sugar bake dinner kitchen spice soup garlic sauce dessert",
}
LABELS = {"finance": ["bullish", "bearish"], "medicine": ["urgent", "routine", "follow-up"],
          "sports": ["win", "loss"], "cooking": ["sweet", "savory", "spicy"]}
N_MODELS = 8


def _texts(topic: str, n: int, rng: np.random.Generator) -> list[str]:
    words = TOPICS[topic].split()
    return [" ".join(rng.choice(words, 9)) + "." for _ in range(n)]


def _write_task(folder: Path, topic: str, rng: np.random.Generator, n: int = 40, label_key: str = "labels") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, size in (("train", n), ("val", n // 4)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            for text in _texts(topic, size, rng):
                fh.write(json.dumps({"text": text, label_key: str(rng.choice(LABELS[topic]))}) + "\n")


def _planted_f1(topic_index: int, rng: np.random.Generator) -> np.ndarray:
    """Model `topic_index` is best on its topic's tasks; model 7 is second-best everywhere."""
    f1 = 0.80 + 0.02 * rng.random(N_MODELS)
    f1[7] = 0.88
    f1[topic_index] = 0.95
    return f1


def make_release(root: Path, tasks_per_topic: int = 5, seed: int = 0) -> Path:
    """A folder in the NTCIR-A layout: tasks.csv, models.csv (with a BOM), ground-truth.csv, task-data/."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "models.csv", "w", encoding="utf-8-sig", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model_id", "model_name", "model_hf_url"])
        for m in range(1, N_MODELS + 1):
            w.writerow([m, f"org/model-{m}", f"https://example.org/{m}"])
    task_rows, gt_rows = [], []
    tid = 1000
    crit = ["High Criticalness", "Medium Criticalness", "Low Criticalness"]
    for t, topic in enumerate(TOPICS):
        for _ in range(tasks_per_topic):
            tid += 1
            _write_task(root / "task-data" / "train-tasks" / str(tid), topic, rng)
            task_rows.append([tid, f"synthetic/{topic}", "train", "", "",
                              f"Classify {topic} texts as {', '.join(LABELS[topic])}.", crit[tid % 3]])
            f1 = _planted_f1(t, rng)
            order = np.argsort(-f1)
            ranks = np.empty(N_MODELS, int)
            ranks[order] = np.arange(1, N_MODELS + 1)
            for m in range(N_MODELS):
                nf1 = f1[m] / f1.max()
                gt_rows.append([tid, m + 1, f"{f1[m]:.6f}", float(ranks[m]), nf1, data.relevance_grade(nf1)])
    for t, topic in enumerate(TOPICS):  # one test task per topic, instruction given
        task_rows.append([2000 + t, f"synthetic/test-{topic}", "test", "text", "labels",
                          f"Classify {topic} texts as {', '.join(LABELS[topic])}.", crit[t % 3]])
    with open(root / "tasks.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["task_id", "task_name", "task_type", "text_col", "label_col", "task_instruction",
                    "task_criticalness"])
        w.writerows(task_rows)
    with open(root / "ground-truth.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["task_id", "model_id", "f1", "model_rank", "normalized_f1", "relevance_score"])
        w.writerows(gt_rows)
    return root


def make_queries(root: Path, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    for t, topic in enumerate(TOPICS):
        _write_task(root / str(2000 + t), topic, rng)
    return root


@pytest.fixture(scope="session")
def encoder():
    from engine.core.encoders import DEFAULT_TEXT_SPEC, load_encoder
    return load_encoder(DEFAULT_TEXT_SPEC)  # cached per process: every test below reuses it


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return make_release(tmp_path_factory.mktemp("ntcir") / "release")


def test_command_ranks_each_topic_expert_first(release: Path, tmp_path: Path, encoder):
    queries = make_queries(tmp_path / "queries")
    out = tmp_path / "run.txt"
    result = CliRunner().invoke(app, ["modelret-a", "--train", str(release), "--queries", str(queries),
                                      "--out", str(out), "--sample", "8", "--quiet"])
    assert result.exit_code == 0, result.output
    run = read_run(out)
    assert sorted(run) == ["2000", "2001", "2002", "2003"]
    for t, qid in enumerate(["2000", "2001", "2002", "2003"]):
        assert len(run[qid]) == N_MODELS
        best = max(run[qid], key=run[qid].get)
        assert best == str(t + 1), f"task {qid}: expected model {t + 1} first, got {best}"


def test_cv_transfer_beats_average_rank(release: Path, encoder):
    report = modelret_a.cross_validate_tasks(release, folds=5, sample=8)
    rows = {r.variant.split(" (")[0]: r for r in report.rows}
    base = rows["average rank"].means["ndcg_exp@1"]
    assert rows["transfer: text"].means["ndcg_exp@1"] > base + 0.3
    assert rows["transfer: instruction"].means["ndcg_exp@1"] > base + 0.3
    assert rows["transfer: best blend"].means["ndcg_exp@1"] > base + 0.3
    assert set(report.tier_sizes) == {"high", "medium", "low"}
    table = report.table()
    assert "average rank (baseline)" in table and "high (" in table


def test_task_without_train_jsonl(release: Path, tmp_path: Path):
    queries = make_queries(tmp_path / "queries")
    (queries / "2001" / "train.jsonl").unlink()
    with pytest.raises(EngineError, match=r"2001/train\.jsonl: no such file"):
        data.read_query_tasks(queries, release / "tasks.csv")


def test_missing_label_column(tmp_path: Path):
    folder = tmp_path / "7"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"text": "a", "labels": "x"}\n{"text": "b"}\n')
    with pytest.raises(EngineError, match=r"train\.jsonl:2: no label column 'labels'"):
        data.read_task(folder)
    (folder / "train.jsonl").write_text('{"text": "a", "verdict": "x"}\n')
    with pytest.raises(EngineError, match=r"no label column .*label_col"):
        data.read_task(folder)


def test_unknown_model_in_ground_truth_is_one_red_line(release: Path, tmp_path: Path):
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(release, bad)
    lines = (bad / "ground-truth.csv").read_text().splitlines()
    fields = lines[3].split(",")
    fields[1] = "99"
    lines[3] = ",".join(fields)
    (bad / "ground-truth.csv").write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-c", "from engine.cli import main; main()", "modelret-a", "--train", str(bad),
                           "--cv", "--quiet"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert "ground-truth.csv:4: unknown model id '99'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_needs_queries_and_out_or_cv(release: Path):
    result = CliRunner().invoke(app, ["modelret-a", "--train", str(release)])
    assert isinstance(result.exception, EngineError)
    assert "--queries" in str(result.exception)


@pytest.mark.shared
def test_real_release_reads_79_tasks_and_grades_follow_the_rule():
    if not SHARED.exists():
        pytest.skip("../shared/data/ntcir19-modelretrieval-a not present")
    training = data.read_training(SHARED)
    assert len(training.tasks) == 79 and len(training.model_ids) == 20
    assert training.model_ids[0] == "1"  # the BOM of models.csv is not part of the id
    expected = np.vectorize(data.relevance_grade)(training.normalized_f1)
    assert (expected == training.grades).all()
    assert (np.nanmax(training.normalized_f1, axis=1) == pytest.approx(1.0))
    assert all(len(t.texts) > 100 and len(t.label_counts) >= 2 for t in training.tasks)
    assert set(training.tiers().values()) == {"high", "medium", "low"}


@pytest.mark.shared
@pytest.mark.slow
def test_real_release_cv(encoder):
    if not SHARED.exists():
        pytest.skip("../shared/data/ntcir19-modelretrieval-a not present")
    report = modelret_a.cross_validate_tasks(SHARED, folds=10)
    assert report.n_tasks == 79
    assert {r.variant for r in report.rows} >= {"average rank (baseline)", "transfer: text"}
    for row in report.rows:
        assert 0.0 < row.means["ndcg_exp@5"] <= 1.0
