"""Score fusion, the one implementation behind `engine fuse` and the task pipelines (EVENTA, DSE): reciprocal
rank fusion, CombSUM, CombMNZ and weighted sums of normalized scores.

A "system" is one ranking: a dict {docid: score} or a list of (docid, score) pairs. Both are ranked by
score, best first (ties keep the given order), so a list already sorted best first keeps its order.
Results are lists of (docid, fused score), best first, ties broken by first appearance.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from engine.io.options import Int
from engine.io.ranking import RankingLike, as_pairs
from engine.errors import EngineError, opt

NORMALIZERS = ("minmax", "zscore", "sum", "none")
METHODS = ("rrf", "combsum", "combmnz", "wsum")
RRF_K = 60
RRF_K_RANGE = Int(0, 1_000_000)
"""The RRF constant's range: `engine fuse --k` and `fuse(k=)` alike."""


def ranked(ranking: RankingLike) -> list[tuple[str, float]]:
    """A system's docs best first: score descending, ties in the given order; a repeated doc keeps its best."""
    best: dict[str, float] = {}
    for doc, score in as_pairs(ranking):
        if doc not in best or score > best[doc]:
            best[doc] = score
    return sorted(best.items(), key=lambda kv: -kv[1])  # sorted() is stable


def informative(ranking: RankingLike) -> bool:
    """Whether a system says anything about this query: it returned a doc, and not two or more all tied (an
    empty article store scores every article alike; such a system must not reorder the others)."""
    scores = [s for _, s in as_pairs(ranking)]
    if len(scores) <= 1:
        return bool(scores)
    lo, hi = min(scores), max(scores)
    return hi - lo > 1e-9 * max(1.0, abs(hi), abs(lo))


def _informative_only(rankings: Sequence[RankingLike], weights: Sequence[float]
                      ) -> tuple[list[RankingLike], list[float]]:
    """The systems (and their weights) that carry information, or all of them when none does: a stage with
    none never reorders the stages that have some."""
    keep = [i for i, r in enumerate(rankings) if informative(r)]
    if not keep or len(keep) == len(rankings):
        return list(rankings), list(weights)
    return [rankings[i] for i in keep], [weights[i] for i in keep]


def _check_weights(n: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * n
    if len(weights) != n:
        raise EngineError(f"{len(weights)} fusion weights for {n} systems; give one weight per system")
    return [float(w) for w in weights]


def _sorted_result(fused: dict[str, float], depth: int | None) -> list[tuple[str, float]]:
    out = sorted(fused.items(), key=lambda kv: -kv[1])
    return out[:depth] if depth is not None else out


def rrf(rankings: Sequence[RankingLike], k: int = RRF_K, weights: Sequence[float] | None = None,
        depth: int | None = None) -> list[tuple[str, float]]:
    """Reciprocal rank fusion (Cormack et al. 2009): score(d) = Σ w_s / (k + rank_s(d)), rank from 1.

    Untuned and scale-free, so it is the safe default when systems' scores are not comparable;
    a doc a system does not return gains nothing from it. A system whose scores all tie is left out
    (`informative`) while another has information.
    """
    if k < 0:
        raise EngineError(f"RRF k must be >= 0, not {k}")
    rankings, ws = _informative_only(rankings, _check_weights(len(rankings), weights))
    fused: dict[str, float] = {}
    for w, ranking in zip(ws, rankings):
        for rank, (doc, _) in enumerate(ranked(ranking), 1):
            fused[doc] = fused.get(doc, 0.0) + w / (k + rank)
    return _sorted_result(fused, depth)


def normalize_array(values: np.ndarray, method: str = "minmax", axis: int = -1) -> np.ndarray:
    """Scores on a common scale along `axis` (each row of a matrix on its own): min-max to [0, 1],
    z-score (mean 0, sd 1), sum (shifted to a minimum of 0, then divided by their sum: Montague & Aslam's
    "sum", ranx's `sum`), or unchanged ("none"). Constant scores carry no ranking information and map to 0.
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
    if method == "sum":
        shifted = v - v.min(axis=axis, keepdims=True)
        total = shifted.sum(axis=axis, keepdims=True)
        return np.divide(shifted, total, out=np.zeros_like(v), where=total > 0)
    sd = v.std(axis=axis, keepdims=True)
    return np.divide(v - v.mean(axis=axis, keepdims=True), sd, out=np.zeros_like(v), where=sd > 0)


def normalize(ranking: RankingLike, method: str = "minmax") -> dict[str, float]:
    """One system's {docid: normalized score}."""
    pairs = ranked(ranking)
    values = normalize_array(np.array([s for _, s in pairs]), method)
    return {doc: float(v) for (doc, _), v in zip(pairs, values)}


def weighted(rankings: Sequence[RankingLike], weights: Sequence[float] | None = None, method: str = "minmax",
             depth: int | None = None, mnz: bool = False) -> list[tuple[str, float]]:
    """Σ w_s · norm_s(d) over systems (CombSUM on normalized scores; with `mnz`, CombMNZ: times the number of
    systems that returned d).

    A doc missing from a system gets that system's lowest normalized score, not 0: under z-scores 0 is
    average, and a system that did not return a doc has no reason to rank it above its own last doc.
    (Under min-max and sum the lowest is 0, so those agree with ranx, which counts a missing doc as 0.)
    A system whose scores all tie is left out (`informative`) while another has information.
    """
    rankings, ws = _informative_only(rankings, _check_weights(len(rankings), weights))
    normed = [normalize(r, method) for r in rankings]
    docs: dict[str, None] = {}
    for n in normed:
        docs.update(dict.fromkeys(n))
    floors = [min(n.values()) if n else 0.0 for n in normed]
    fused = {d: sum(w * n.get(d, floor) for w, n, floor in zip(ws, normed, floors)) for d in docs}
    if mnz:
        fused = {d: v * sum(1 for n in normed if d in n) for d, v in fused.items()}
    return _sorted_result(fused, depth)


def fuse(rankings: Sequence[RankingLike], method: str = "rrf", weights: Sequence[float] | None = None,
         norm: str = "minmax", k: int = RRF_K, depth: int | None = None) -> list[tuple[str, float]]:
    """One query's systems fused by `method`: rrf (ranks only; weights optional), combsum and combmnz
    (normalized scores, unweighted unless given), wsum (normalized scores × weights, which it needs)."""
    if method not in METHODS:
        raise EngineError(f"unknown fusion method {method!r}; use one of {', '.join(METHODS)}")
    if method == "rrf":
        return rrf(rankings, k=k, weights=weights, depth=depth)
    if method == "wsum" and weights is None:
        raise EngineError(f"fusion method wsum needs one weight per system (give {opt('weights')} or "
                          f"{opt('tune')})")
    return weighted(rankings, weights, norm, depth, mnz=method == "combmnz")


def fuse_runs(runs: Sequence[Mapping[str, RankingLike]], method: str = "rrf", weights: Sequence[float] | None = None,
              norm: str = "minmax", k: int = RRF_K, depth: int | None = None) -> dict[str, list[tuple[str, float]]]:
    """Whole runs (qid → ranking) fused query by query; a query some runs lack is fused from those that have it."""
    if len(runs) < 2:
        raise EngineError(f"fusion needs at least 2 runs, got {len(runs)}")
    if weights is not None:
        weights = _check_weights(len(runs), weights)
    qids: dict[str, None] = {}
    for run in runs:
        qids.update(dict.fromkeys(run))
    out = {}
    for q in qids:
        idx = [i for i, run in enumerate(runs) if q in run]
        ws = None if weights is None else [weights[i] for i in idx]
        out[q] = fuse([runs[i][q] for i in idx], method, ws, norm, k, depth)
    return out


WEIGHT_GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)


def coordinate_ascent(objective: Callable[[np.ndarray], float], start: Sequence[float],
                      grid: Sequence[float] = WEIGHT_GRID, passes: int = 3) -> tuple[list[float], float]:
    """Weights maximizing `objective`: each weight in turn set to its best grid value, until a pass changes
    nothing (at most `passes`); an all-zero vector is never tried. Returns (weights, best value)."""
    w = np.array(start, dtype=np.float64)
    best = objective(w)
    for _ in range(passes):
        improved = False
        for j in range(len(w)):
            for g in grid:
                if g == w[j]:
                    continue
                trial = w.copy()
                trial[j] = g
                if not trial.any():
                    continue
                v = objective(trial)
                if v > best + 1e-9:
                    best, w, improved = v, trial, True
        if not improved:
            break
    return [float(x) for x in w], best


def weighted_arrays(columns: np.ndarray, weights: Sequence[float], method: str = "zscore") -> np.ndarray:
    """The same fusion for dense score matrices (docs × systems, every doc scored by every system)."""
    cols = np.asarray(columns, dtype=np.float64)
    if cols.ndim != 2:
        raise EngineError("weighted_arrays needs a docs × systems matrix")
    ws = np.asarray(_check_weights(cols.shape[1], weights))
    return normalize_array(cols, method, axis=0) @ ws
