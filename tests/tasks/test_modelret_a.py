"""`engine modelret-a` on a generated NTCIR-19 ModelRetrieval A folder with a planted structure, bad input,
and the real release when ../shared/data is present."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.core.collection import Collection
from engine.errors import EngineError
from engine.eval.evaluate import evaluate
from engine.eval.groups import read_groups
from engine.io.runs import read_qrels, read_run
from engine.tasks.model_ranking import data, modelret_a
from engine.tasks.model_ranking.data import criticality_label, ntcir_a_groups, ntcir_a_qrels
from engine.tasks.model_ranking.modelret_a import ModelretAOptions
from engine.tasks.model_ranking.transfer import TransferOptions
from fixtures.modelret_release import LABELS, N_MODELS, TOPICS, make_queries, make_release  # noqa: F401


@pytest.fixture(scope="session")
def shared(shared_data):
    return shared_data / "ntcir19-modelretrieval-a"


@pytest.fixture(scope="session")
def encoder():
    from engine.core.encoders.registry import DEFAULT_TEXT_SPEC, load_encoder
    return load_encoder(DEFAULT_TEXT_SPEC)  # cached per process: every test below reuses it


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return make_release(tmp_path_factory.mktemp("ntcir") / "release")


def test_command_ranks_each_topic_expert_first(release: Path, tmp_path: Path, encoder):
    queries = make_queries(tmp_path / "queries")
    out = tmp_path / "run.txt"
    result = CliRunner().invoke(app, ["modelret-a", "--train", str(release), "--queries", str(queries),
                                      "--out", str(out), "--sample", "8", "--root", str(tmp_path / "idx"),
                                      "--quiet"])
    assert result.exit_code == 0, result.output
    run = read_run(out)
    assert sorted(run) == ["2000", "2001", "2002", "2003"]
    for t, qid in enumerate(["2000", "2001", "2002", "2003"]):
        assert len(run[qid]) == N_MODELS
        best = max(run[qid], key=run[qid].get)
        assert best == str(t + 1), f"task {qid}: expected model {t + 1} first, got {best}"


def test_cv_transfer_ensemble_and_ltr_beat_average_rank(release: Path, tmp_path: Path, encoder):
    report = tmp_path / "cv.json"
    result = CliRunner().invoke(app, ["modelret-a", "--train", str(release), "--cv", "--folds", "5", "--repeats", "2",
                                      "--sample", "8", "--root", str(tmp_path / "idx"), "--report",
                                      str(report), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "| average rank (baseline) |" in result.output and "high (7 queries)" in result.output
    assert "| nDCG@3 | p nDCG@3 |" in result.output
    cv = json.loads(report.read_text())
    assert cv["repeats"] == 2 and cv["folds"] == 5 and cv["baseline"] == "average rank (baseline)"
    assert {g: v["n"] for g, v in cv["groups"].items()} == {"high": 7, "medium": 6, "low": 7}

    def at1(prefix: str) -> dict:
        return next(v for name, v in cv["all"].items() if name.startswith(prefix))["ndcg_exp@1"]

    base = at1("average rank")["mean"]
    for variant in ("transfer: text", "transfer: instruction", "view ensemble: text+instruction+labels+stats",
                    "LTR", "guarded: view ensemble"):
        assert at1(variant)["mean"] > base + 0.3, variant
    assert at1("view ensemble: text+instruction+labels+stats")["p"] < 0.01
    # the default is the guarded blend; where the signal is this strong its weight leaves the baseline
    assert "guarded: view ensemble text+instruction+labels+stats ⊕ average rank per position (default)" in cv["all"]
    assert at1("guarded: view ensemble text+instruction+labels+stats ⊕ average rank per")["mean"] > base + 0.3
    assert at1("guarded")["p"] < 0.01


def test_ltr_run_beats_the_prior_and_is_byte_identical(release: Path, tmp_path: Path, encoder):
    """The LTR path ranks each planted topic's expert first, and a second run writes the same bytes."""
    queries = make_queries(tmp_path / "queries")
    for name in ("a", "b"):
        modelret_a.rank_tasks(release, queries, tmp_path / f"{name}.run",
                              options=ModelretAOptions(sample=8, root=tmp_path / "idx", method="ltr"))
    assert (tmp_path / "a.run").read_bytes() == (tmp_path / "b.run").read_bytes()
    run = read_run(tmp_path / "a.run")
    # the prior ranks model 8 (second-best everywhere) first; LTR finds each topic's expert
    assert [max(run[str(2000 + t)], key=run[str(2000 + t)].get) for t in range(4)] == ["1", "2", "3", "4"]


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


# ---------------------------------------------------------------- the stored training set


def fixed(root: Path, **changes) -> ModelretAOptions:
    """Small sample and fixed params: fast, and the storage is what is under test."""
    return replace(ModelretAOptions(sample=8, root=root, transfer=TransferOptions(folds=5, k=3, temperature=0.1,
                                                                                     prior_weight=0.25)), **changes)


@pytest.fixture
def embedded(monkeypatch) -> list[int]:
    """How many tasks each `embed_views` call embedded, in order."""
    calls: list[int] = []
    real = modelret_a.embed_views

    def counting(tasks, *args, **kwargs):
        calls.append(len(tasks))
        return real(tasks, *args, **kwargs)

    monkeypatch.setattr(modelret_a, "embed_views", counting)
    return calls


def test_training_set_is_embedded_once_and_reused(release: Path, tmp_path: Path, embedded, encoder):
    root, queries = tmp_path / "idx", make_queries(tmp_path / "queries")
    first = modelret_a.cross_validate_tasks(release, options=fixed(root), repeats=1)
    assert embedded == [20]
    col = Collection.open("modelret-a", root)
    assert col.extra["task"] == "modelret-a" and col.extra["sample"] == 8 and len(col) == 20
    assert col.ids[0] == "1001" and col.items[0]["criticality"] == "Low Criticalness"
    assert col.document("candidates") == [str(m) for m in range(1, N_MODELS + 1)]
    assert col.array("scores").shape == col.array("grades").shape == (20, N_MODELS)
    assert {"emb_text", "emb_instruction", "emb_labels", "emb_stats", "stats_mean", "stats_std"} <= set(col.stored)
    assert modelret_a.cross_validate_tasks(release, options=fixed(root), repeats=1).table() == first.table()
    assert embedded == [20]  # cross-validated again from the stored views
    modelret_a.rank_tasks(release, queries, tmp_path / "stored.run", options=fixed(root))
    assert embedded == [20, 4]  # ranking embeds only the query tasks
    modelret_a.rank_tasks(release, queries, tmp_path / "fresh.run", options=fixed(tmp_path / "fresh"))
    assert embedded == [20, 4, 20, 4]
    assert (tmp_path / "stored.run").read_bytes() == (tmp_path / "fresh.run").read_bytes()


def test_changed_inputs_or_settings_embed_again(release: Path, tmp_path: Path, embedded, encoder):
    copy, root = tmp_path / "release", tmp_path / "idx"
    shutil.copytree(release, copy)
    modelret_a.cross_validate_tasks(copy, options=fixed(root), repeats=1)
    generation = Collection.open("modelret-a", root).manifest["generation"]
    modelret_a.cross_validate_tasks(copy, options=fixed(root, sample=6), repeats=1)
    train = copy / "task-data" / "train-tasks" / "1001" / "train.jsonl"
    train.write_text(train.read_text() + json.dumps({"text": "one more", "labels": "bullish"}) + "\n")
    modelret_a.cross_validate_tasks(copy, options=fixed(root, sample=6), repeats=1)
    assert embedded == [20, 20, 20]
    assert Collection.open("modelret-a", root).manifest["generation"] == generation + 2


def test_a_folder_that_is_not_a_stored_training_set_is_one_error(run_cli, release: Path, tmp_path: Path, monkeypatch,
                                                                   capsys):
    root = tmp_path / "idx"
    (root / "modelret-a").mkdir(parents=True)
    (root / "modelret-a" / "notes.txt").write_text("mine")
    Collection.from_vectors("other", ["a", "b"], np.eye(2, dtype=np.float32), None, "text", root=root)
    for name, holds in (("modelret-a", "no collection"), ("other", "collection 'other' (vectors only)")):
        code, out, err = run_cli("modelret-a", "--train", str(release), "--cv", "--root",
                                 str(root), "--name", name, "-q")
        assert code == 2 and out == ""
        assert err.strip().count("\n") == 0, err
        assert f"{root / name} holds {holds}, not a stored modelret-a training set; give another --name or " \
               "--root, or remove the folder" in err
    assert (root / "modelret-a" / "notes.txt").read_text() == "mine"
    assert Collection.open("other", root).ids == ["a", "b"]


def test_unknown_model_in_ground_truth_is_one_red_line(repo, release: Path, tmp_path: Path):
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(release, bad)
    lines = (bad / "ground-truth.csv").read_text().splitlines()
    fields = lines[3].split(",")
    fields[1] = "99"
    lines[3] = ",".join(fields)
    (bad / "ground-truth.csv").write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-c", "from engine.cli import main; main()", "modelret-a", "--train", str(bad),
                           "--cv", "--root", str(tmp_path / "idx"), "--quiet"], capture_output=True, text=True,
                          cwd=repo)
    assert proc.returncode == 2
    assert "ground-truth.csv:4: unknown model id '99'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_needs_queries_and_out_or_cv(run_cli, release: Path, monkeypatch, capsys):
    code, _, err = run_cli("modelret-a", "--train", str(release))
    assert code == 2
    assert "give --queries DIR and --out RUN to rank models, or --cv to cross-validate" in err


@pytest.mark.shared
def test_real_release_reads_79_tasks_and_grades_follow_the_rule(shared):
    if not shared.exists():
        pytest.skip("../shared/data/ntcir19-modelretrieval-a not present")
    training = data.read_training(shared)
    assert len(training.tasks) == 79 and len(training.model_ids) == 20
    assert training.model_ids[0] == "1"  # the BOM of models.csv is not part of the id
    expected = np.vectorize(data.relevance_grade)(training.normalized_f1)
    assert (expected == training.grades).all()
    assert (np.nanmax(training.normalized_f1, axis=1) == pytest.approx(1.0))
    assert all(len(t.texts) > 100 and len(t.label_counts) >= 2 for t in training.tasks)
    assert set(training.tiers().values()) == {"high", "medium", "low"}


@pytest.mark.shared
@pytest.mark.slow
def test_real_release_cv(shared, tmp_path: Path, encoder):
    if not shared.exists():
        pytest.skip("../shared/data/ntcir19-modelretrieval-a not present")
    study = modelret_a.cross_validate_tasks(shared, options=ModelretAOptions(root=tmp_path), repeats=1)
    assert {len(rows) for rows in study.groups.values()} == {18, 30, 31}
    summary = study.summary()
    assert set(summary) >= {"average rank (baseline)", "transfer: text", "LTR (LambdaRank)"}
    for row in summary.values():
        assert 0.0 < row["ndcg_exp@5"]["mean"] <= 1.0


# ---------------------------------------------------------------- converters


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



@pytest.mark.shared
def test_ntcir_a_ground_truth_and_criticality_groups(shared, tmp_path):
    if not shared.exists():
        pytest.skip("../shared/data/ntcir19-modelretrieval-a not present")
    assert ntcir_a_qrels(shared / "ground-truth.csv", tmp_path / "a.qrels") == 1580
    assert ntcir_a_groups(shared / "tasks.csv", tmp_path / "a.groups") == 127
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


# ---------------------------------------------------------------- the average-rank baseline: the published ranks


def _published_baseline(release: Path) -> list[str]:
    """The baseline recomputed from the files alone: models by their mean model_rank over the training tasks,
    equal means in models.csv's order (the NTCIR scorer keeps line order on ties)."""
    import csv
    with open(release / "models.csv", encoding="utf-8-sig") as fh:
        models = [row["model_id"] for row in csv.DictReader(fh)]
    ranks: dict[str, list[float]] = {m: [] for m in models}
    with open(release / "ground-truth.csv", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            ranks[row["model_id"]].append(float(row["model_rank"]))
    return sorted(models, key=lambda m: (sum(ranks[m]) / len(ranks[m]), models.index(m)))


def test_mean_rank_order_breaks_ties_by_column_order():
    from engine.tasks.model_ranking.transfer import mean_rank_order
    ranks = np.array([[2, 1, 2, np.nan], [1, 2, 1, np.nan], [3, 3, 3, np.nan]], dtype=float)
    scores = mean_rank_order(ranks)
    # means 2, 2, 2, never ranked: column order, the unranked candidate last, all scores distinct
    assert list(np.argsort(-scores, kind="stable")) == [0, 1, 2, 3] and len(set(scores)) == 4
    assert list(np.argsort(-mean_rank_order(np.array([[3.0, 1.0, 2.0]])))) == [1, 2, 0]


def test_ground_truth_rank_is_the_file_s_or_the_organizers_rule(tmp_path: Path):
    gt = tmp_path / "ground-truth.csv"
    gt.write_text("task_id,model_id,f1,model_rank\n1,a,0.9,2\n1,b,0.8,1\n2,a,0.7,\n2,b,0.7,\n2,c,0.6,\n")
    _, _, _, ranks = data.read_ground_truth(gt, ["a", "b", "c"])
    assert ranks[0, :2].tolist() == [2.0, 1.0] and np.isnan(ranks[0, 2])  # the file's rank wins over F1
    assert ranks[1].tolist() == [1.0, 1.0, 3.0]  # absent: tied models share the better rank
    gt.write_text("task_id,model_id,f1,model_rank\n1,a,0.9,0\n")
    with pytest.raises(EngineError, match=r"ground-truth.csv:2: model_rank 0 is below 1"):
        data.read_ground_truth(gt, ["a"])


@pytest.fixture(scope="module")
def unplanted(tmp_path_factory) -> Path:
    return make_release(tmp_path_factory.mktemp("ntcir-noise") / "release", planted=False, seed=4)


def test_default_falls_back_on_exactly_the_published_mean_rank(unplanted: Path, tmp_path: Path, encoder):
    """Scores that carry no signal: the guarded default keeps the baseline, and its run is exactly the models by
    mean model_rank (models 3 and 6 tie on every task: 3 first, as models.csv lists them)."""
    expected = _published_baseline(unplanted)
    assert expected.index("3") < expected.index("6")  # tied: trec_eval's docid order would put 6 first
    queries = make_queries(tmp_path / "queries")
    out = tmp_path / "run.txt"
    summary = modelret_a.rank_tasks(unplanted, queries, out, options=ModelretAOptions(sample=8, root=tmp_path / "i"))
    assert "weights 0 / 0 / 0" in summary
    run = read_run(out)
    for qid, scores in run.items():
        assert sorted(scores, key=scores.get, reverse=True) == expected, qid


def test_default_cv_equals_or_beats_the_published_mean_rank(unplanted: Path, release: Path, tmp_path: Path,
                                                            encoder):
    """In CV the default never scores below the baseline at nDCG@3 and @5: equal where it falls back, above
    where the planted experts are found."""
    for folder, planted in ((unplanted, False), (release, True)):
        study = modelret_a.cross_validate_tasks(folder, options=ModelretAOptions(
            sample=8, root=tmp_path / f"i{planted}", transfer=TransferOptions(folds=5)), repeats=2)
        by = {v.name: v for v in study.variants}
        base = by[modelret_a.BASELINE]
        default = next(v for name, v in by.items() if name.endswith("(default)"))
        for metric in ("ndcg_exp@3", "ndcg_exp@5"):
            got, want = default.values[metric], base.values[metric]
            if planted:
                assert got.mean() > want.mean() + 0.1, metric
            else:
                np.testing.assert_array_equal(got, want)


def test_tasks_are_embedded_as_a_build_embeds_texts_and_rank_as_torch_does(release: Path, tmp_path: Path, embedded,
                                                                         monkeypatch, encoder):
    """The tasks' texts go through the encoder `engine build` encodes texts with (on the CPU the model's
    onnxruntime sessions); the stored side names that runtime, so the torch model (ENGINE_ONNX=0) embeds them
    again, and both rank every query task alike (the same order, scores within 1e-4)."""
    from engine.core.encoders.registry import DEFAULT_TEXT_SPEC
    from engine.tasks.model_ranking import encoding
    assert encoding.text_encoder(DEFAULT_TEXT_SPEC).info["runtime"] == "onnx"
    root, queries = tmp_path / "idx", make_queries(tmp_path / "queries")
    modelret_a.rank_tasks(release, queries, tmp_path / "onnx.run", options=fixed(root))
    monkeypatch.setenv("ENGINE_ONNX", "0")
    assert encoding.text_encoder(DEFAULT_TEXT_SPEC).info.get("runtime", "torch") == "torch"
    modelret_a.rank_tasks(release, queries, tmp_path / "torch.run", options=fixed(root))
    assert embedded == [20, 4, 20, 4]  # the other runtime is another stored side
    onnx, torch = read_run(tmp_path / "onnx.run"), read_run(tmp_path / "torch.run")
    assert sorted(onnx) == sorted(torch)
    for qid in onnx:
        assert sorted(onnx[qid], key=onnx[qid].get) == sorted(torch[qid], key=torch[qid].get), qid
        assert max(abs(onnx[qid][m] - torch[qid][m]) for m in onnx[qid]) < 1e-4, qid
