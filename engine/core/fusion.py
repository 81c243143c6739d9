"""Score fusion shared by the task adapters: reciprocal rank fusion and weighted sums of normalized scores.

A "system" is one ranking: a dict {docid: score} or a list of (docid, score) pairs. Both are ranked by
score, best first (ties keep the given order), so a list already sorted best first keeps its order.
Results are lists of (docid, fused score), best first, ties broken by first appearance.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.core.ranking import Ranking, as_pairs
from engine.errors import EngineError

NORMALIZERS = ("minmax", "zscore", "none")
RRF_K = 60


def ranked(ranking: Ranking) -> list[tuple[str, float]]:
    """A system's docs best first: score descending, ties in the given order; a repeated doc keeps its best."""
    best: dict[str, float] = {}
    for doc, score in as_pairs(ranking):
        if doc not in best or score > best[doc]:
            best[doc] = score
    return sorted(best.items(), key=lambda kv: -kv[1])  # sorted() is stable


def _check_weights(n: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * n
    if len(weights) != n:
        raise EngineError(f"{len(weights)} fusion weights for {n} systems; give one weight per system")
    return [float(w) for w in weights]


def _sorted_result(fused: dict[str, float], depth: int | None) -> list[tuple[str, float]]:
    out = sorted(fused.items(), key=lambda kv: -kv[1])
    return out[:depth] if depth is not None else out


def rrf(rankings: Sequence[Ranking], k: int = RRF_K, weights: Sequence[float] | None = None,
        depth: int | None = None) -> list[tuple[str, float]]:
    """Reciprocal rank fusion (Cormack et al. 2009): score(d) = Σ w_s / (k + rank_s(d)), rank from 1.

    Untuned and scale-free, so it is the safe default when systems' scores are not comparable;
    a doc a system does not return gains nothing from it.
    """
    if k < 0:
        raise EngineError(f"RRF k must be >= 0, not {k}")
    ws = _check_weights(len(rankings), weights)
    fused: dict[str, float] = {}
    for w, ranking in zip(ws, rankings):
        for rank, (doc, _) in enumerate(ranked(ranking), 1):
            fused[doc] = fused.get(doc, 0.0) + w / (k + rank)
    return _sorted_result(fused, depth)


def normalize_array(values: np.ndarray, method: str = "minmax", axis: int = -1) -> np.ndarray:
    """Scores on a common scale along `axis` (each row of a matrix on its own): min-max to [0, 1],
    z-score (mean 0, sd 1), or unchanged ("none"). Constant scores carry no ranking information and map to 0.
    """
    v = np.asarray(values, dtype=np.float64)
    if method not in NORMALIZERS:
        raise EngineError(f"unknown score normalization {method!r}; use one of {', '.join(NORMALIZERS)}")
    if method == "none" or v.size == 0:
        return v.copy()
    if method == "minmax":
        lo, hi = v.min(axis=axis, keepdims=True), v.max(axis=axis, keepdims=True)
        span = hi - lo
        return np.divide(v - lo, span, out=np.zeros_like(v), where=span > 0)
    sd = v.std(axis=axis, keepdims=True)
    return np.divide(v - v.mean(axis=axis, keepdims=True), sd, out=np.zeros_like(v), where=sd > 0)


def normalize(ranking: Ranking, method: str = "minmax") -> dict[str, float]:
    """One system's {docid: normalized score}."""
    pairs = ranked(ranking)
    values = normalize_array(np.array([s for _, s in pairs]), method)
    return {doc: float(v) for (doc, _), v in zip(pairs, values)}


def weighted(rankings: Sequence[Ranking], weights: Sequence[float] | None = None, method: str = "minmax",
             depth: int | None = None) -> list[tuple[str, float]]:
    """Σ w_s · norm_s(d) over systems (CombSUM on normalized scores).

    A doc missing from a system gets that system's lowest normalized score, not 0: under z-scores 0 is
    average, and a system that did not return a doc has no reason to rank it above its own last doc.
    """
    ws = _check_weights(len(rankings), weights)
    normed = [normalize(r, method) for r in rankings]
    docs: dict[str, None] = {}
    for n in normed:
        docs.update(dict.fromkeys(n))
    floors = [min(n.values()) if n else 0.0 for n in normed]
    fused = {d: sum(w * n.get(d, floor) for w, n, floor in zip(ws, normed, floors)) for d in docs}
    return _sorted_result(fused, depth)


def weighted_arrays(columns: np.ndarray, weights: Sequence[float], method: str = "zscore") -> np.ndarray:
    """The same fusion for dense score matrices (docs × systems, every doc scored by every system)."""
    cols = np.asarray(columns, dtype=np.float64)
    if cols.ndim != 2:
        raise EngineError("weighted_arrays needs a docs × systems matrix")
    ws = np.asarray(_check_weights(cols.shape[1], weights))
    return normalize_array(cols, method, axis=0) @ ws
