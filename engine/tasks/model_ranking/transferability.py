"""Transferability scores: how well a candidate model's frozen features fit a task's labels, from one forward
pass and no fine-tuning (LogME, You et al. 2021; H-score, Bao et al. 2019; kNN and linear probes).

Each score is ONE function (features: texts × dim, labels: integer class per text) → float, higher is better,
and ONE line of `SCORES`. Scores of different candidates on the same task are comparable; across tasks they
are not (ranking uses them per task).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from engine.core.encoders.base import l2_normalize
from engine.core.folds import fold_assignment

KNN_K = 5
"""Neighbours of the kNN probe."""
RIDGE_ALPHA = 1.0
"""L2 penalty of the linear (ridge) probe, on standardized features."""
PROBE_FOLDS = 5
"""Cross-validation folds of the kNN and linear probes (seed 0: the same split for every candidate)."""


def _classes(labels: np.ndarray) -> tuple[np.ndarray, int]:
    """Labels as 0..C−1 and C."""
    _, codes = np.unique(np.asarray(labels), return_inverse=True)
    return codes.reshape(-1), int(codes.max()) + 1 if len(codes) else 0


def logme(features: np.ndarray, labels: np.ndarray, iterations: int = 100, tol: float = 1e-6) -> float:
    """LogME: the maximized log evidence per text of a Bayesian linear model (prior N(0, 1/α), noise 1/β) fitted
    to each class's one-hot column on the features, averaged over classes. α and β by the paper's fixed-point
    iteration (MacKay), run to convergence."""
    f = np.asarray(features, np.float64)
    codes, c = _classes(labels)
    n, d = f.shape
    v, s, _ = np.linalg.svd(f.T @ f)
    s = np.clip(s, 0.0, None)
    total = 0.0
    for k in range(c):
        y = (codes == k).astype(np.float64)
        proj = v.T @ (f.T @ y)
        alpha, beta = 1.0, 1.0
        for _ in range(iterations):
            m = v @ (proj * beta / (alpha + beta * s))
            gamma = float((beta * s / (alpha + beta * s)).sum())
            alpha_de = float(m @ m)
            beta_de = float(((y - f @ m) ** 2).sum())
            new_alpha = gamma / max(alpha_de, 1e-12)
            new_beta = (n - gamma) / max(beta_de, 1e-12)
            done = abs(new_alpha / new_beta - alpha / beta) <= tol * alpha / beta
            alpha, beta = new_alpha, new_beta
            if done:
                break
        m = v @ (proj * beta / (alpha + beta * s))
        alpha_de, beta_de = float(m @ m), float(((y - f @ m) ** 2).sum())
        evidence = (d / 2 * np.log(alpha) + n / 2 * np.log(beta) - 0.5 * np.sum(np.log(alpha + beta * s))
                    - beta / 2 * beta_de - alpha / 2 * alpha_de - n / 2 * np.log(2 * np.pi))
        total += evidence / n
    return float(total / max(c, 1))


def ledoit_wolf(features: np.ndarray) -> np.ndarray:
    """The Ledoit–Wolf shrunk covariance (centered features): a well-conditioned estimate when texts < dims."""
    x = np.asarray(features, np.float64)
    x = x - x.mean(axis=0)
    n, d = x.shape
    cov = x.T @ x / n
    mu = np.trace(cov) / d
    delta = ((cov - mu * np.eye(d)) ** 2).sum() / d
    x2 = x ** 2
    beta = min(((x2.T @ x2).sum() / n - (cov ** 2).sum()) / (n * d), delta)
    shrink = 0.0 if delta == 0 else beta / delta
    return (1 - shrink) * cov + shrink * mu * np.eye(d)


def hscore(features: np.ndarray, labels: np.ndarray) -> float:
    """H-score: tr(cov(f)⁻¹ · cov(E[f | y])), the features' between-class covariance measured in their own
    metric; cov(f) shrunk (Ledoit–Wolf), else with fewer texts than dims every model separates the classes."""
    f = np.asarray(features, np.float64)
    codes, c = _classes(labels)
    means = np.stack([f[codes == k].mean(axis=0) for k in range(c)])
    g = means[codes]
    g = g - g.mean(axis=0)
    between = g.T @ g / len(f)
    return float(np.trace(np.linalg.pinv(ledoit_wolf(f), hermitian=True) @ between))


def knn(features: np.ndarray, labels: np.ndarray, k: int = KNN_K, folds: int = PROBE_FOLDS) -> float:
    """kNN probe: cross-validated accuracy of a k-nearest-neighbour vote (cosine; ties → the smaller class)."""
    f = l2_normalize(np.asarray(features, np.float32)).astype(np.float64)
    codes, c = _classes(labels)
    fold_of = fold_assignment(len(f), folds, 0)
    correct = 0
    for fold in np.unique(fold_of):
        test, train = fold_of == fold, fold_of != fold
        dist = ((f[test, None, :] - f[None, train, :]) ** 2).sum(axis=2)
        near = np.argsort(dist, axis=1, kind="stable")[:, :min(k, int(train.sum()))]
        votes = np.zeros((int(test.sum()), c))
        np.add.at(votes, (np.repeat(np.arange(len(near)), near.shape[1]), codes[train][near].reshape(-1)), 1)
        correct += int((votes.argmax(axis=1) == codes[test]).sum())
    return correct / max(len(f), 1)


def linear(features: np.ndarray, labels: np.ndarray, alpha: float = RIDGE_ALPHA, folds: int = PROBE_FOLDS) -> float:
    """Linear probe: cross-validated accuracy of a ridge classifier (one-vs-all ±1 targets, intercept) on the
    features standardized with the training fold's mean and std."""
    f = np.asarray(features, np.float64)
    codes, c = _classes(labels)
    fold_of = fold_assignment(len(f), folds, 0)
    correct = 0
    for fold in np.unique(fold_of):
        test, train = fold_of == fold, fold_of != fold
        mean, std = f[train].mean(axis=0), f[train].std(axis=0)
        std = np.where(std > 1e-12, std, 1.0)
        x, xt = (f[train] - mean) / std, (f[test] - mean) / std
        y = np.where(codes[train][:, None] == np.arange(max(c, 2))[None, :], 1.0, -1.0)
        ym = y.mean(axis=0)
        w = x.T @ np.linalg.solve(x @ x.T + alpha * np.eye(len(x)), y - ym)
        correct += int(((xt @ w + ym).argmax(axis=1) == codes[test]).sum())
    return correct / max(len(f), 1)


SCORES: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "logme": logme,
    "hscore": hscore,
    "knn": knn,
    "linear": linear,
}
"""`--method` name → score; one line per method."""


def score_matrix(features: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]], task_ids: list[str],
                 model_ids: list[str], method: str) -> np.ndarray:
    """tasks × candidates: `method`'s score of each (task, model)'s (features, labels); NaN where missing."""
    fn = SCORES[method]
    out = np.full((len(task_ids), len(model_ids)), np.nan)
    for i, t in enumerate(task_ids):
        for j, m in enumerate(model_ids):
            if (t, m) in features:
                x, y = features[(t, m)]
                out[i, j] = fn(x, y) if len(np.unique(y)) > 1 else np.nan
    return out
