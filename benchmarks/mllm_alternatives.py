"""What else was tried for `engine mllm`'s ensemble, and how far the planted questions' embeddings let any method go.

On the planted constructions of `benchmarks/mllm_planted.py` (same sets, same 5-fold CV, mean ± std over seeds;
Δ against the prior, paired per seed), out of fold:

  ensemble         the default's ranking before the guard (LambdaRank, transfer at two scales)
  + ridge          a fourth ranking: multi-output ridge regression of the LLM targets on the question embedding
                   (the penalty by exact leave-one-out squared error inside the training questions)
  + propagation    a fourth ranking: label propagation over a 10-nearest-neighbour graph of the training and the
                   new questions (alpha 0.9, 30 steps; the new questions are nodes too)
  + clusters       a fourth ranking: the questions clustered by spherical k-means (K = 4, 8 and 16), a new
                   question's targets the clusters' mean targets weighed by a softmax over its cosines to their
                   centroids (T 0.05), the mean rank position over the three K (cluster-based routing)
  LLM id           LambdaRank with the LLM's identity as one more (categorical) feature, in the ensemble
  centroid         a classifier told the training questions' hidden topics: a new question takes the topic of
                   the nearest topic centroid and ranks by that topic's mean targets (no method can know the
                   topics; this is how much the embeddings tell about them)
  topic oracle     the new question's own hidden topic's mean targets (unreachable: the topic is not given)

With `--discovery` each set also gets its generated discovery file (as in `mllm_planted.py --discovery`) and the
question is how the ensemble should use it (`mllm_alternatives_discovery*.json`):

  LambdaRank reads it   the ensemble whose LambdaRank alone reads the discovery set (features, training queries)
  + confidences         and a fourth ranking: the discovery confidences at the broad scale (the default)
  + confidence ridge    instead, a ridge regression of the confidences on the discovery questions' embeddings

    nice python benchmarks/mllm_alternatives.py [--seeds 0,1,2] [--constructions a,b] [--discovery] [--out F.json]

Seeds 100..102 are where variants were chosen (docs/model-ranking.md); 0..2 are the reported ones.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import mllm_planted  # noqa: E402
from engine.core.encoders.base import l2_normalize  # noqa: E402
from engine.core.folds import fold_assignment  # noqa: E402
from engine.io.atomic import write_json  # noqa: E402
from engine.progress import set_quiet  # noqa: E402
from engine.tasks.model_ranking import ltr, mllm  # noqa: E402
from engine.tasks.model_ranking.data import grade_gains  # noqa: E402
from engine.tasks.model_ranking.mllm import Evidence, MllmOptions  # noqa: E402
from engine.tasks.model_ranking.transfer import TransferOptions, column_prior, rank_targets  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "mllm_alternatives.json"
VARIANTS = ("prior", "ensemble", "+ ridge", "+ propagation", "+ clusters", "LLM id", "centroid", "topic oracle")
DISCOVERY_VARIANTS = ("prior", "LambdaRank reads it", "+ confidences", "+ confidence ridge")
ALPHAS = tuple(10.0 ** np.arange(-2, 4.01, 0.5))


def ridge(train: np.ndarray, targets: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Multi-output ridge of the targets on the embeddings (centred), the penalty by exact leave-one-out error."""
    mu_x, mu_y = train.mean(0), targets.mean(0)
    x, y = train - mu_x, targets - mu_y
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    uty = u.T @ y

    def loo_error(alpha: float) -> float:
        shrink = s ** 2 / (s ** 2 + alpha)
        hat = (u ** 2) @ shrink + 1.0 / len(x)
        return float((((y - u @ (shrink[:, None] * uty)) / (1 - hat)[:, None]) ** 2).mean())
    alpha = min(ALPHAS, key=loo_error)
    return (query - mu_x) @ (vt.T @ ((s / (s ** 2 + alpha))[:, None] * uty)) + mu_y


def propagate(train: np.ndarray, targets: np.ndarray, query: np.ndarray, k: int = 10, alpha: float = 0.9,
              temperature: float = 0.1, steps: int = 30) -> np.ndarray:
    """Label propagation (Zhou et al. 2004) over the symmetric k-NN graph of training and new questions, the
    propagated targets divided by the propagated mass of the labelled nodes."""
    x = np.concatenate([train, query])
    sim = x @ x.T
    np.fill_diagonal(sim, -np.inf)
    near = np.argpartition(-sim, k, axis=1)[:, :k]
    rows = np.arange(len(x))[:, None]
    w = np.zeros_like(sim)
    w[rows, near] = np.exp((sim[rows, near] - 1) / temperature)
    w = np.maximum(w, w.T)
    degree = w.sum(1)
    graph = w / np.sqrt(np.outer(degree, degree))
    seed_y = np.zeros((len(x), targets.shape[1]))
    seed_y[:len(train)] = targets
    seed_m = np.zeros((len(x), 1))
    seed_m[:len(train)] = 1
    f, mass = seed_y.copy(), seed_m.copy()
    for _ in range(steps):
        f, mass = alpha * graph @ f + (1 - alpha) * seed_y, alpha * graph @ mass + (1 - alpha) * seed_m
    return f[len(train):] / np.maximum(mass[len(train):], 1e-12)


def clusters(train: np.ndarray, targets: np.ndarray, query: np.ndarray, ks: tuple[int, ...] = (4, 8, 16),
             temperature: float = 0.05, smooth: float = 2.0) -> np.ndarray:
    """Cluster-based routing: per K, spherical k-means over the training questions, each cluster's mean targets
    (shrunk to the prior by `smooth` pseudo-questions), softmax-weighted by the new question's cosines to the
    centroids; the mean rank position over the Ks."""
    import faiss
    prior, parts = targets.mean(0), []
    for k in ks:
        k = min(k, len(train) // 4)
        km = faiss.Kmeans(train.shape[1], k, niter=25, nredo=5, seed=1, spherical=True, verbose=False,
                          min_points_per_centroid=1)
        km.train(np.ascontiguousarray(train, np.float32))
        member = np.argmax(train @ km.centroids.T, axis=1)
        means = np.stack([(targets[member == c].sum(0) + smooth * prior) / ((member == c).sum() + smooth)
                          for c in range(k)])
        sim = query @ km.centroids.T
        w = np.exp((sim - sim.max(1, keepdims=True)) / temperature)
        parts.append(rank_targets((w / w.sum(1, keepdims=True)) @ means))
    return np.mean(parts, axis=0)


class LLMIdentity:
    """While active, LambdaRank gets the candidate's index as one more feature, declared categorical."""

    def __init__(self) -> None:
        self.features, self.fit_predict = ltr.features, ltr.fit_predict

    def _features(self, sims, scores, params, query_stats, descriptors, loo, extra=None):
        x = self.features(sims, scores, params, query_stats, descriptors, loo, extra)
        m = scores.shape[1]
        return np.concatenate([x, np.tile(np.arange(m, dtype=np.float64), x.shape[0] // m)[:, None]], axis=1)

    def _fit_predict(self, train_x, train_labels, n_train, test_x, n_test, label_gain, params=None):
        import lightgbm as lgb
        params = params or ltr.LTRParams()
        m = len(train_labels) // n_train
        model = lgb.LGBMRanker(
            objective="lambdarank", n_estimators=params.n_estimators, num_leaves=params.num_leaves,
            learning_rate=params.learning_rate, min_child_samples=params.min_data_in_leaf,
            colsample_bytree=params.feature_fraction, label_gain=list(label_gain),
            lambdarank_truncation_level=params.truncation, random_state=params.seed, n_jobs=1, deterministic=True,
            force_row_wise=True, verbose=-1, cat_smooth=10, min_data_per_group=20)
        model.fit(train_x, train_labels.astype(int), group=[m] * n_train, categorical_feature=[train_x.shape[1] - 1])
        return model.predict(test_x, num_threads=1).reshape(n_test, m)

    def __enter__(self):
        ltr.features, ltr.fit_predict = self._features, self._fit_predict

    def __exit__(self, *exc):
        ltr.features, ltr.fit_predict = self.features, self.fit_predict


def score_set(name: str, seed: int, folds: int) -> dict[str, tuple[float, float]]:
    """variant → (nDCG@10, MRR) out of fold on one planted set."""
    with tempfile.TemporaryDirectory() as tmp:
        files, emb, _ = mllm_planted.make_set(Path(tmp) / "set", name, seed)
        options = MllmOptions(root=Path(tmp) / "idx", name="set", transfer=TransferOptions(folds=folds))
        side = mllm.dev_side(files["dev"], files["qrels"], files["ids"], options, emb)
    gain = grade_gains(options.targets)
    e, s, g = l2_normalize(side.embeddings[mllm.EMBEDDING]), side.scores, side.grades
    topic = np.array([int(q[1:3]) for q in side.query_ids])
    n, m = s.shape
    fold_of = fold_assignment(n, folds, 0)
    out = {v: np.zeros((n, m)) for v in VARIANTS}
    for f in range(folds):
        te, tr = np.flatnonzero(fold_of == f), np.flatnonzero(fold_of != f)
        evidence, sim, prior = Evidence(side.candidate_ids, {}), e[te] @ e[tr].T, column_prior(s[tr])
        lambdarank = mllm.ltr_predict(e[tr], e[te], s[tr], g[tr], gain, evidence, mllm.FIXED)
        with LLMIdentity():
            with_id = mllm.ltr_predict(e[tr], e[te], s[tr], g[tr], gain, evidence, mllm.FIXED)
        out["prior"][te] = prior
        out["ensemble"][te] = mllm.ensemble(lambdarank, sim, s[tr], mllm.FIXED)
        out["+ ridge"][te] = mllm.ensemble(lambdarank, sim, s[tr], mllm.FIXED, ridge(e[tr], s[tr], e[te]))
        out["+ propagation"][te] = mllm.ensemble(lambdarank, sim, s[tr], mllm.FIXED, propagate(e[tr], s[tr], e[te]))
        out["+ clusters"][te] = mllm.ensemble(lambdarank, sim, s[tr], mllm.FIXED, clusters(e[tr], s[tr], e[te]))
        out["LLM id"][te] = mllm.ensemble(with_id, sim, s[tr], mllm.FIXED)
        topics = np.unique(topic[tr])
        mean_targets = np.stack([s[tr][topic[tr] == t].mean(0) for t in topics]) + 1e-6 * prior
        centroids = np.stack([e[tr][topic[tr] == t].mean(0) for t in topics])
        out["centroid"][te] = mean_targets[np.argmax(e[te] @ centroids.T, axis=1)]
        out["topic oracle"][te] = mean_targets[np.searchsorted(topics, topic[te])]
    return {v: tuple(mllm.scores_of(g, gain, p).values()) for v, p in out.items()}


def score_discovery_set(name: str, seed: int, folds: int) -> dict[str, tuple[float, float]]:
    """DISCOVERY_VARIANTS → (nDCG@10, MRR) out of fold on one planted set with its discovery file."""
    with tempfile.TemporaryDirectory() as tmp:
        files, emb, disc_emb = mllm_planted.make_set(Path(tmp) / "set", name, seed, discovery=True)
        options = MllmOptions(root=Path(tmp) / "idx", name="set", transfer=TransferOptions(folds=folds),
                              discovery=files["discovery"])
        side = mllm.dev_side(files["dev"], files["qrels"], files["ids"], options, emb, disc_emb)
    gain = grade_gains(options.targets)
    e, s, g, arrays = l2_normalize(side.embeddings[mllm.EMBEDDING]), side.scores, side.grades, side.arrays
    disc = l2_normalize(np.asarray(arrays[mllm.DISCOVERY_EMB], np.float32))
    soft = np.nan_to_num(np.asarray(arrays[mllm.DISCOVERY_SOFT], np.float64))
    n, m = s.shape
    fold_of = fold_assignment(n, folds, 0)
    out = {v: np.zeros((n, m)) for v in DISCOVERY_VARIANTS}
    for f in range(folds):
        te, tr = np.flatnonzero(fold_of == f), np.flatnonzero(fold_of != f)
        sim = e[te] @ e[tr].T
        lambdarank = mllm.ltr_predict(e[tr], e[te], s[tr], g[tr], gain, Evidence(side.candidate_ids, arrays),
                                      mllm.FIXED)
        out["prior"][te] = column_prior(s[tr])
        out["LambdaRank reads it"][te] = mllm.ensemble(lambdarank, sim, s[tr], mllm.FIXED)
        out["+ confidences"][te] = mllm.ensemble(lambdarank, sim, s[tr], mllm.FIXED,
                                                 mllm.discovery_transfer(e[te], arrays, mllm.BROAD))
        out["+ confidence ridge"][te] = mllm.ensemble(lambdarank, sim, s[tr], mllm.FIXED, ridge(disc, soft, e[te]))
    return {v: tuple(mllm.scores_of(g, gain, p).values()) for v, p in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--constructions", default="often-second,generalist-first,second-best,mixture,experts")
    ap.add_argument("--discovery", action="store_true", help="compare the ways the ensemble uses a discovery set")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    variants, score = (DISCOVERY_VARIANTS, score_discovery_set) if args.discovery else (VARIANTS, score_set)
    set_quiet(True)
    try:
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: seeds separated by commas, e.g. 0,1,2 (not {args.seeds!r})")
    if len(seeds) < 2 or min(seeds) < 0:
        ap.error(f"--seeds: at least two seeds, each at least 0 (not {args.seeds!r})")
    if args.folds < 2:
        ap.error(f"--folds must be at least 2, not {args.folds}")
    names = args.constructions.split(",")
    unknown = [x for x in names if x not in mllm_planted.NOISE]
    if unknown:
        ap.error(f"--constructions: unknown {unknown[0]!r}")
    start = time.perf_counter()
    results = {}
    for name in names:
        per_seed = [score(name, seed, args.folds) for seed in seeds]
        results[name] = {v: {"ndcg@10": [r[v][0] for r in per_seed], "mrr": [r[v][1] for r in per_seed]}
                         for v in variants}
        print(f"{name}: done", file=sys.stderr, flush=True)
    wall = time.perf_counter() - start
    print(f"seeds {args.seeds} × one {args.folds}-fold CV; Δ against the prior, mean ± std over seeds; "
          f"load {os.getloadavg()[0]:.1f}; {wall:.0f} s")
    print("| construction | metric | " + " | ".join(variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    for name, res in results.items():
        for metric in ("ndcg@10", "mrr"):
            base = np.array(res["prior"][metric])
            cells = [f"{base.mean():.3f}"] + [
                f"{(np.array(res[v][metric]) - base).mean():+.3f} ± {(np.array(res[v][metric]) - base).std(ddof=1):.3f}"
                for v in variants[1:]]
            print(f"| {name} | {'nDCG@10' if metric == 'ndcg@10' else 'MRR'} | " + " | ".join(cells) + " |")
    write_json(args.out, {"seeds": seeds, "folds": args.folds, "discovery": args.discovery, "load_average": os.getloadavg()[0], "wall_s": wall,
                          "results": results})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
