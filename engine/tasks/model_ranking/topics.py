"""A latent-topic mixture over the judged questions: the questions' hidden topics estimated from their embeddings
and their relevance together, a new question routed to them by its embedding.

Transfer weighs each nearest dev question by its own similarity, so where a question's nearest neighbours are
mostly of other topics (embeddings noisy against the distance between topics) its evidence is noisy too. A
topic's centre is the mean of many questions and its noise shrinks with their number: on planted sets a nearest
centroid told the true topics ranks better than any neighbour-weighted transfer, and a soft posterior over the
centroids better still. The topics are not given, so they are fitted: a mixture whose components are spherical
Gaussians over the (unit) embeddings with one shared variance and, per LLM, a Bernoulli over "relevant" (target
> 0), by EM over the training questions — the relevance labels pull questions with the same experts into one
component where the embeddings alone would split or merge them. A new question's posterior over the components
comes from its embedding alone; its prediction is that posterior times the components' mean targets, each
shrunk to the prior (the mean target) by `SMOOTH` pseudo-questions. The number of topics is unknown, so the
predictions for K in `KS` (capped at a quarter of the training questions) are averaged. Chosen on planted sets
of other seeds than the ones reported (docs/model-ranking.md).
"""
from __future__ import annotations

import numpy as np

KS = (4, 8, 16, 32)
"""The numbers of components averaged over (each capped at a quarter of the training questions)."""
SMOOTH = 1.0
"""Pseudo-questions at the prior that shrink each component's mean targets and relevance rates."""
ITERATIONS, RESTARTS, SEED = 50, 4, 0
"""EM steps per start (it stops earlier when the log-likelihood settles), k-means++ starts kept by the best
log-likelihood, and the seed of the starts (fixed: the same inputs give the same ranking)."""


def _logsumexp(z: np.ndarray) -> np.ndarray:
    top = z.max(axis=1, keepdims=True)
    return top + np.log(np.exp(z - top).sum(axis=1, keepdims=True))


def _sq_dist(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """(rows × centres) squared Euclidean distances, never below 0."""
    d2 = (x * x).sum(1)[:, None] - 2.0 * x @ centres.T + (centres * centres).sum(1)[None]
    return np.maximum(d2, 0.0)


def _seed_centres(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: each next centre drawn with probability ∝ its squared distance to the nearest so far."""
    centres = [x[rng.integers(len(x))]]
    for _ in range(k - 1):
        d2 = _sq_dist(x, np.asarray(centres)).min(axis=1)
        total = d2.sum()
        centres.append(x[rng.integers(len(x))] if total <= 0 else x[rng.choice(len(x), p=d2 / total)])
    return np.asarray(centres)


def _fit(x: np.ndarray, relevant: np.ndarray, k: int, rate: np.ndarray, rng: np.random.Generator
         ) -> tuple[float, np.ndarray, np.ndarray, float, np.ndarray]:
    """One EM run from a k-means++ start: (log-likelihood, mixing weights, centres, shared variance,
    responsibilities of the training questions)."""
    n, d = x.shape
    centres = _seed_centres(x, k, rng)
    var = max(float(((x - x.mean(0)) ** 2).sum(1).mean() / d), 1e-8)
    weights, rates = np.full(k, 1.0 / k), np.tile(rate, (k, 1))
    previous, ll = -np.inf, -np.inf
    for step in range(ITERATIONS):
        log_r = np.log(weights)[None] - _sq_dist(x, centres) / (2 * var)
        if step:  # the first step assigns by the embeddings alone (the rates are still the global ones)
            log_r = log_r + relevant @ np.log(rates).T + (1 - relevant) @ np.log1p(-rates).T
        norm = _logsumexp(log_r)
        resp = np.exp(log_r - norm)
        ll = float(norm.sum())
        mass = resp.sum(0) + 1e-12
        weights = (mass + 1e-3) / (n + 1e-3 * k)
        centres = (resp.T @ x) / mass[:, None]
        var = max(float((resp * _sq_dist(x, centres)).sum() / (n * d)), 1e-8)
        rates = np.clip((resp.T @ relevant + SMOOTH * rate) / (mass[:, None] + SMOOTH), 1e-4, 1 - 1e-4)
        if abs(ll - previous) <= 1e-6 * abs(ll):
            break
        previous = ll
    return ll, weights, centres, var, resp


def mixture(train: np.ndarray, targets: np.ndarray, query: np.ndarray, k: int,
            extra: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """(queries × LLMs) predicted targets from a k-component topic mixture fitted on the training questions
    (`train`: their unit embeddings, `targets`: questions × LLMs, NaN unknown) for the `query` embeddings.
    `extra`: further questions without targets (unit embeddings, 0/1 relevance per LLM, e.g. a discovery set's
    most confident answers) that shape the topics' centres and relevance rates but not their mean targets."""
    train, query = np.asarray(train, np.float64), np.asarray(query, np.float64)
    known = ~np.isnan(targets)
    values = np.where(known, targets, 0.0)
    relevant = (values > 0).astype(np.float64)
    counts = np.maximum(known.sum(0), 1)
    prior, rate = values.sum(0) / counts, np.clip(relevant.sum(0) / counts, 1e-3, 1 - 1e-3)
    x, labelled = train, len(train)
    if extra is not None:
        x = np.concatenate([train, np.asarray(extra[0], np.float64)])
        relevant = np.concatenate([relevant, np.asarray(extra[1], np.float64)])
    k = max(1, min(k, len(x) // 4))
    rng = np.random.default_rng(SEED)
    _, weights, centres, var, resp = max((_fit(x, relevant, k, rate, rng) for _ in range(RESTARTS)),
                                         key=lambda fit: fit[0])
    resp = resp[:labelled]
    means = (resp.T @ values + SMOOTH * prior) / (resp.T @ known + SMOOTH)
    log_q = np.log(weights)[None] - _sq_dist(query, centres) / (2 * var)
    return np.exp(log_q - _logsumexp(log_q)) @ means


def topic_mixture(train: np.ndarray, targets: np.ndarray, query: np.ndarray,
                  extra: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """`mixture`'s predictions averaged over the numbers of topics in `KS`."""
    return np.mean([mixture(train, targets, query, k, extra) for k in KS], axis=0)
