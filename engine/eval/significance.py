"""Paired significance tests over per-query values, and corrections for testing many runs against one baseline.

Both tests compare the same queries scored by two runs. The t-test is scipy's `ttest_rel`; the Fisher
randomization test is scipy's `permutation_test` with pairs swapped at random (sign flips of the per-query
differences) and |mean difference| as the statistic (two-sided, as ranx and Smucker et al. 2007 count it),
exact when 2^n fits in the resamples, else Monte Carlo with a fixed seed (so a report is reproducible).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from engine.errors import EngineError

CORRECTIONS = ("holm", "bonferroni", "none")
RESAMPLES = 10_000
SEED = 42


def paired_t(baseline: Sequence[float], other: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test; 1.0 when the runs agree on every query (no evidence)."""
    a, b = np.asarray(baseline, float), np.asarray(other, float)
    if a.shape != b.shape or a.size < 2:
        raise EngineError(f"a paired test needs the same ≥ 2 queries in both runs, got {a.size} and {b.size}")
    from scipy.stats import ttest_rel
    p = float(ttest_rel(b, a).pvalue)
    return 1.0 if math.isnan(p) else p


def randomization(baseline: Sequence[float], other: Sequence[float], resamples: int = RESAMPLES,
                  seed: int = SEED) -> float:
    """Two-sided p-value of the paired Fisher randomization test on the mean difference."""
    a, b = np.asarray(baseline, float), np.asarray(other, float)
    if a.shape != b.shape or a.size < 1:
        raise EngineError(f"a paired test needs the same queries in both runs, got {a.size} and {b.size}")
    if a.size < 2 or not np.any(a != b):
        # one query: its only swap gives the same |difference|, so the exact p-value is 1 (scipy refuses n = 1)
        return 1.0
    from scipy.stats import permutation_test

    def abs_mean_diff(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        return np.abs(np.mean(x - y, axis=axis))

    # two-sided as ranx and Smucker et al. count it: the share of swaps with |mean difference| >= the observed
    res = permutation_test((b, a), abs_mean_diff, permutation_type="samples", vectorized=True,
                           n_resamples=resamples, alternative="greater", random_state=seed)
    return float(min(1.0, res.pvalue))


def adjust(pvalues: Sequence[float], method: str = "holm") -> list[float]:
    """p-values corrected for testing them together: Holm's step-down (controls the family-wise error, never
    weaker than Bonferroni), Bonferroni, or none."""
    if method not in CORRECTIONS:
        raise EngineError(f"unknown correction {method!r}; use one of {', '.join(CORRECTIONS)}")
    p = [float(x) for x in pvalues]
    m = len(p)
    if method == "none" or m == 0:
        return p
    if method == "bonferroni":
        return [min(1.0, m * x) for x in p]
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out
