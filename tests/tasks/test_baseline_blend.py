"""The guarded blend: it stays the baseline when the method carries no signal, and follows the method when it
does (weights fitted inside the training rows only)."""
from __future__ import annotations

import numpy as np

from engine.tasks.model_ranking import baseline_blend
from engine.tasks.model_ranking.transfer import rank_targets

N, M = 60, 10


def _truth(seed: int = 0) -> np.ndarray:
    """Candidate 0 is best for half the queries, candidate q % M + 1 … for the rest: the baseline (mean rank)
    gets the first half right, only a query-aware method gets the second."""
    rng = np.random.default_rng(seed)
    t = rng.random((N, M)) * 0.5
    t[: N // 2, 0] = 1.0
    t[N // 2:, 0] = 0.8
    t[np.arange(N // 2, N), 1 + np.arange(N // 2, N) % (M - 1)] = 1.0
    return t


def _values(truth: np.ndarray):
    def values(pred: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
        best = truth[rows].argmax(axis=1)
        return {"hit": (pred.argmax(axis=1) == best).astype(float)}
    return values


def test_noise_method_keeps_the_baseline_and_an_oracle_is_followed():
    truth = _truth()
    baseline = lambda tr, te: np.tile(rank_targets(truth[tr]).mean(axis=0), (len(te), 1))  # noqa: E731
    noise = lambda tr, te: np.random.default_rng(len(te)).random((len(te), M))  # noqa: E731
    oracle = lambda tr, te: truth[te]  # noqa: E731
    rows = np.arange(N)
    fit = baseline_blend.fit_weight(noise, baseline, rows, _values(truth), ["hit"], ["hit"], M)
    assert fit.weight == 0.0
    fit = baseline_blend.fit_weight(oracle, baseline, rows, _values(truth), ["hit"], ["hit"], M)
    assert fit.weight > 0 and fit.gains[fit.weight]["hit"] > 0.3
    # the fold predictor blends the held-out rows with the weight fitted on the training rows
    chosen: list[float] = []
    pred = baseline_blend.guarded(noise, baseline, _values(truth), ["hit"], ["hit"], M, chosen)(rows[:40], rows[40:])
    assert chosen == [0.0]
    np.testing.assert_array_equal(pred.argmax(axis=1), baseline(rows[:40], rows[40:]).argmax(axis=1))
