"""Defaults that do not lose to the trivial baseline: a method's ranking blended with the baseline's ranking
(average rank for ModelRetrieval A, the popularity prior for Million LLMs) with a weight fitted by cross-
validation INSIDE the training queries, and shrunk to the baseline alone unless the gain is there.

    blend(q) = w · rankpos(method(q)) + (1 − w) · rankpos(baseline(q)),   rankpos: 1 best … 0 worst per query

w is chosen from `WEIGHTS` on inner out-of-fold predictions of the training queries only: the weight with the
largest mean gain of the objective over the baseline, among those whose gain is at least `MARGIN` standard
errors (paired over queries) and whose every guarded metric does not drop; none qualifies → w = 0, the
baseline itself. Run inside each outer fold of `--cv`, so the reported scores are honest (nested).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from engine.tasks.model_ranking.study import FoldPredictor, out_of_fold
from engine.tasks.model_ranking.transfer import rank_targets

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Weight of the method's ranking; 0 = the baseline alone."""
INNER_FOLDS = 5
MARGIN = 1.0
"""The mean gain must be at least this many paired standard errors above 0."""
TIE = 1e-6
RowValues = Callable[[np.ndarray, np.ndarray], Mapping[str, np.ndarray]]
"""(predictions (rows × candidates), rows: indices of the training queries) → metric → one value per row."""


def mix(method: np.ndarray, baseline: np.ndarray, weight: float) -> np.ndarray:
    """The blend of two predictions' per-query rank positions; ties broken by the baseline."""
    base = rank_targets(baseline)
    return weight * rank_targets(method) + (1 - weight) * base + TIE * base


@dataclass
class BlendFit:
    """The chosen weight and, per weight, the inner-CV mean gain of each metric over the baseline."""
    weight: float
    gains: dict[float, dict[str, float]] = field(default_factory=dict)


def fit_weight(method: FoldPredictor, baseline: FoldPredictor, rows: np.ndarray, values: RowValues,
               objective: Sequence[str], guard: Sequence[str], m: int, folds: int = INNER_FOLDS,
               seed: int = 0) -> BlendFit:
    """The blend weight for `method` over `baseline`, by `folds`-fold CV inside `rows` (see the module doc):
    `objective` metrics are averaged into the gain; `guard` metrics must not drop on average."""
    rows = np.asarray(rows)
    local = lambda fn: (lambda tr, te: fn(rows[tr], rows[te]))  # noqa: E731
    folds = min(folds, len(rows)) if len(rows) >= 4 else 0
    if len(rows) < 4:
        return BlendFit(0.0)
    pm = out_of_fold(local(method), len(rows), m, folds, seed)
    pb = out_of_fold(local(baseline), len(rows), m, folds, seed)
    base = values(mix(pb, pb, 0.0), rows)
    fit = BlendFit(0.0)
    best = 0.0
    for w in WEIGHTS[1:]:
        now = values(mix(pm, pb, w), rows)
        diffs = {k: np.asarray(now[k]) - np.asarray(base[k]) for k in set(objective) | set(guard)}
        gain = np.mean([diffs[k] for k in objective], axis=0)
        fit.gains[w] = {k: float(d.mean()) for k, d in diffs.items()}
        se = gain.std(ddof=1) / np.sqrt(len(gain)) if len(gain) > 1 else np.inf
        ok = gain.mean() > 0 and gain.mean() >= MARGIN * se and all(diffs[k].mean() >= 0 for k in guard)
        if ok and gain.mean() > best:
            best, fit.weight = float(gain.mean()), w
    return fit


def guarded(method: FoldPredictor, baseline: FoldPredictor, values: RowValues, objective: Sequence[str],
            guard: Sequence[str], m: int, chosen: list[float] | None = None) -> FoldPredictor:
    """A fold predictor: the weight fitted inside the training rows, then the blend on the held-out rows.
    Each chosen weight is appended to `chosen` (for the report)."""
    def predict(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        fit = fit_weight(method, baseline, train, values, objective, guard, m)
        if chosen is not None:
            chosen.append(fit.weight)
        base = baseline(train, test)
        return mix(method(train, test) if fit.weight > 0 else base, base, fit.weight)
    return predict
