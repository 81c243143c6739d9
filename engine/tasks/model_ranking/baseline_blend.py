"""Defaults that do not lose to the trivial baseline: a method's ranking blended with the baseline's ranking
(average rank for ModelRetrieval A, the popularity prior for Million LLMs) with a weight fitted by cross-
validation INSIDE the training queries, and kept at the baseline alone unless the gain is shown.

    blend(q) = w · rankpos(method(q)) + (1 − w) · rankpos(baseline(q)),   rankpos: 1 best … 0 worst per query

The rule (fixed before any held-out number was looked at; run inside each outer fold of `--cv`, so the
reported scores are nested and honest):

- `INNER_REPEATS` × `INNER_FOLDS`-fold CV inside the training queries; for each weight in `WEIGHTS` and each
  metric, the gain of the blend over the baseline on each inner test fold.
- A weight qualifies only if EVERY guarded metric, and the objective (the mean of the objective metrics), gains
  significantly: a one-sided corrected resampled t-test (Nadeau & Bengio 2003: the variance of the fold gains
  inflated by 1/J + n_test/n_train, because the folds' training sets overlap; a plain paired test over queries
  is too liberal under CV) at level `ALPHA` / (number of non-zero weights) (Bonferroni over the weights tried),
  i.e. the one-sided lower confidence bound of the gain is > 0. All guarded metrics must pass (an intersection-
  union test, so the level holds without a further correction).
- Among the qualifying weights, the one with the largest lower confidence bound of the objective gain; none
  qualifies → w = 0, the baseline itself.

Where the method carries no signal, a weight qualifies by chance with probability ≤ ALPHA per fit; where its
gain is real but small it is given up (the baseline is kept): the guard trades power for never losing.

Per rank position (`fit_positions`, `guarded_positions`): one weight per band of rank positions, each fitted by
the rule above on the metric that band decides alone (Million LLMs: position 1 on MRR, the rest on nDCG@10;
ModelRetrieval A: position 1 on nDCG@1, 2–3 on nDCG@3, 4–5 on nDCG@5), and the ranking composed band by band
(`compose`). A gain on one metric is no longer thrown away to protect another: where the method finds the
second-best answers but not the best, the baseline keeps the first place and the method fills the rest.

No band may cost another reported metric (`InnerCV.keep`): the bands are decided in order, each candidate
(method, weight) scored on the ranking it would compose with the bands already decided (the later bands from the
same candidate), and it qualifies only if its own metric gains significantly (as above) AND no other metric the
bands report is shown to lose: the one-sided lower confidence bound of each other metric's gain over the baseline,
at level `KEEP`, is ≥ 0 (at 0.5 the bound is the mean gain itself). Without it a band chosen on nDCG@10 could push
the baseline's often-right second and third places down where its first place is wrong, and lose MRR.

Among several methods (a sequence instead of one): every (method, weight) pair is a candidate of the same rule,
Bonferroni over all the pairs (ALPHA / (methods × non-zero weights)), and each band takes the qualifying pair
with the largest lower confidence bound. Which method suits a collection (a ranker that learns from the labels,
or a steadier average) is then decided inside the training queries, like the weight, not fixed beforehand.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from engine.tasks.model_ranking.study import FoldPredictor, out_of_fold
from engine.core.folds import fold_assignment
from engine.tasks.model_ranking.transfer import rank_targets

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Weight of the method's ranking; 0 = the baseline alone."""
INNER_FOLDS = 5
INNER_REPEATS = 3
"""Inner CV repeats (seeds 0..R−1): the fold gains of all repeats enter the corrected t-test."""
ALPHA = 0.05
"""Family-wise level of the one-sided tests (Bonferroni over the non-zero weights)."""
KEEP = 0.5
"""Level of the no-loss bound on a band's other reported metrics: 0.5 (the mean gain must be ≥ 0), chosen among
0.5, 0.25 and ALPHA on planted seeds other than the reported ones (docs/model-ranking.md)."""
TIE = 1e-6


def rule(methods: int = 1, cv: "InnerCV | None" = None) -> str:
    """The rule in one line for the CV tables' notes and the run summaries (`methods`: how many it chooses among;
    `cv`: a composed per-position rule's settings, None: the module's default)."""
    if cv is None or (cv.own is None and cv.pick == "lower"):
        return (f"inner {INNER_REPEATS} × {INNER_FOLDS}-fold CV on the training queries; w > 0 only if every "
                f"guarded metric's gain has a one-sided corrected resampled t-test p < "
                f"{ALPHA:g}/{(len(WEIGHTS) - 1) * methods}")
    level = f"{cv.own:g} per candidate" if cv.own is not None else f"{cv.alpha:g}/{(len(WEIGHTS) - 1) * methods}"
    best = "largest mean gain" if cv.pick == "mean" else "largest lower bound"
    return (f"inner {cv.repeats} × {cv.folds}-fold CV on the training queries; a band leaves the baseline only for "
            f"a (method, weight) whose own metric's gain has a one-sided corrected resampled t-test p < {level} and "
            f"whose other metrics' mean gains are not negative; among those the {best}")


RULE = rule()
"""One line for the CV tables' notes."""


@dataclass(frozen=True)
class InnerCV:
    """The rule's inner cross-validation: `repeats` × `folds`-fold, tests at family-wise level `alpha`; `keep`:
    the level of the per-band no-loss bound on the other reported metrics (None: each band alone, on its own
    metric, as the rule's first per-position version did)."""
    folds: int = INNER_FOLDS
    repeats: int = INNER_REPEATS
    alpha: float = ALPHA
    keep: float | None = KEEP
    own: float | None = None
    """Level of a composed band's own-metric test, per candidate (None: `alpha` / candidates, Bonferroni)."""
    pick: str = "lower"
    """Which qualifying candidate a composed band takes: the largest lower bound ("lower") or mean gain ("mean")."""


RowValues = Callable[[np.ndarray, np.ndarray], Mapping[str, np.ndarray]]
"""(predictions (rows × candidates), rows: indices of the training queries) → metric → one value per row."""


def mix(method: np.ndarray, baseline: np.ndarray, weight: float) -> np.ndarray:
    """The blend of two predictions' per-query rank positions; ties broken by the baseline."""
    base = rank_targets(baseline)
    return weight * rank_targets(method) + (1 - weight) * base + TIE * base


@dataclass
class BlendFit:
    """The chosen weight and, per weight and metric, the inner-CV mean gain over the baseline and its one-sided
    lower confidence bound (at the Bonferroni level); among several methods, the index of the chosen one."""
    weight: float
    gains: dict[float, dict[str, float]] = field(default_factory=dict)
    lower: dict[float, dict[str, float]] = field(default_factory=dict)
    method: int = 0


Methods = FoldPredictor | Sequence[FoldPredictor]
"""One method, or several the rule chooses among (per band)."""


def _as_list(method: Methods) -> list[FoldPredictor]:
    return list(method) if isinstance(method, (list, tuple)) else [method]


def corrected_lower_bound(fold_gains: np.ndarray, test_fraction: float, alpha: float) -> float:
    """One-sided (1 − alpha) lower confidence bound of the mean gain from J fold gains of repeated k-fold CV,
    by the corrected resampled t-test (Nadeau & Bengio 2003): var × (1/J + n_test/n_train)."""
    from scipy.stats import t as student

    d = np.asarray(fold_gains, np.float64)
    j = len(d)
    if j < 2:
        return -np.inf
    spread = d.std(ddof=1)
    if spread < 1e-12:
        return float(d.mean()) if d.mean() > 1e-12 else -np.inf
    se = spread * np.sqrt(1 / j + test_fraction / (1 - test_fraction))
    return float(d.mean() - student.ppf(1 - alpha, j - 1) * se)


def no_loss_bound(fold_gains: np.ndarray, test_fraction: float, level: float) -> float:
    """The corrected resampled one-sided lower bound at `level` (0.5: the mean gain), where gains that never vary
    are their mean (no change at all is no loss)."""
    d = np.asarray(fold_gains, np.float64)
    if len(d) < 2 or d.std(ddof=1) < 1e-12:
        return float(d.mean()) if len(d) else -np.inf
    return corrected_lower_bound(d, test_fraction, level)


def fit_weight(method: FoldPredictor, baseline: FoldPredictor, rows: np.ndarray, values: RowValues,
               objective: Sequence[str], guard: Sequence[str], m: int, cv: InnerCV = InnerCV()) -> BlendFit:
    """The blend weight for `method` over `baseline` by the rule of the module doc, CV inside `rows` only:
    `objective` metrics are averaged into the gain that picks among qualifying weights; each of `guard` (and the
    objective) must gain significantly."""
    rows = np.asarray(rows)
    if len(rows) < 2 * cv.folds:
        return BlendFit(0.0)
    return _fit_cached(_inner_predictions(method, baseline, rows, m, cv.folds, cv.repeats), rows, values, objective,
                       guard, cv.folds, cv.alpha)


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


def compose(method: np.ndarray | Sequence[np.ndarray], baseline: np.ndarray, weights: Sequence[float],
            cuts: Sequence[int]) -> np.ndarray:
    """A ranking composed band by band: positions up to cuts[0] from mix(weights[0]), the next up to cuts[1] from
    mix(weights[1]) among the candidates not yet placed, …; the last band holds the rest. As scores (rows ×
    candidates, higher first). `method`: one prediction for every band, or one per band. Equal weights of one
    prediction give exactly mix(weight)'s order."""
    per_band = list(method) if isinstance(method, (list, tuple)) else [method] * len(weights)
    mixes = [mix(pred, baseline, w) for pred, w in zip(per_band, weights)]
    if len(set(weights)) == 1 and all(pred is per_band[0] for pred in per_band):
        return mixes[0]
    n, m = baseline.shape
    out = np.empty((n, m))
    for r in range(n):
        placed: list[int] = []
        taken = np.zeros(m, dtype=bool)
        for band, (scores, cut) in enumerate(zip(mixes, cuts)):
            order = np.argsort(-scores[r], kind="stable")
            want = m if band == len(cuts) - 1 else min(cut, m)
            for j in order:
                if len(placed) >= want:
                    break
                if not taken[j]:
                    taken[j] = True
                    placed.append(int(j))
        out[r, placed] = np.arange(m, 0, -1, dtype=np.float64)[:len(placed)]
    return out


def fit_positions(method: Methods, baseline: FoldPredictor, rows: np.ndarray, values: RowValues,
                  bands: Sequence[str], m: int, cv: InnerCV = InnerCV(), cuts: Sequence[int] | None = None
                  ) -> list[BlendFit]:
    """One weight per band of rank positions, each by the module's rule with its own metric as objective and
    guard (`bands`: the metric deciding each band, best positions first); among several methods, each band's
    (method, weight) pair by the rule over all pairs (`BlendFit.method`). With `cuts` (the bands' last positions,
    as `compose` takes them) and `cv.keep`, the bands are decided in order on the composed ranking and none may
    lose another band's metric (`_fit_composed`)."""
    rows = np.asarray(rows)
    if len(rows) < 2 * cv.folds:
        return [BlendFit(0.0) for _ in bands]
    methods = _as_list(method)
    preds = [_inner_predictions(one, baseline, rows, m, cv.folds, cv.repeats) for one in methods]
    if cuts is not None and cv.keep is not None:
        return _fit_composed(preds, rows, values, bands, cuts, cv)
    return [_fit_among(preds, rows, values, [metric], [metric], cv.folds, cv.alpha) for metric in bands]


def _fit_composed(preds: Sequence, rows: np.ndarray, values: RowValues, bands: Sequence[str], cuts: Sequence[int],
                  cv: InnerCV) -> list[BlendFit]:
    """The bands in order: each (method, weight) candidate scored on `compose` of the bands already decided and
    itself for the rest; it qualifies when the lower bound (Bonferroni over all candidates) of its band metric's
    gain over the decided bands with the baseline for the rest is > 0, and every other band metric's no-loss bound
    (`cv.keep`) of the gain over the baseline is ≥ 0; the qualifying one with the largest lower bound wins, none →
    the baseline for that band."""
    metrics = list(dict.fromkeys(bands))
    level = cv.own if cv.own is not None else cv.alpha / ((len(WEIGHTS) - 1) * len(preds))
    base = [values(mix(pb, pb, 0.0), rows) for _, _, pb in preds[0]]
    decided: list[BlendFit] = []
    for metric in bands:
        best, top = BlendFit(0.0), -np.inf
        reference = np.asarray(_composed_gains(preds, decided, (0, 0.0), rows, values, (bands, cuts, base))[metric])
        for i in range(len(preds)):
            for w in WEIGHTS[1:]:
                gains = _composed_gains(preds, decided, (i, w), rows, values, (bands, cuts, base))
                own = corrected_lower_bound(np.asarray(gains[metric]) - reference, 1 / cv.folds, level)
                kept = all(no_loss_bound(gains[k], 1 / cv.folds, cv.keep) >= 0 for k in metrics if k != metric)
                score = own if cv.pick == "lower" else float(np.mean(np.asarray(gains[metric]) - reference))
                if own > 0 and kept and score > top:  # ties: the first method, the smaller weight
                    top = score
                    best = BlendFit(w, {w: {k: float(np.mean(g)) for k, g in gains.items()}},
                                    {w: {metric: own}}, i)
        decided.append(best)
    return decided


def _composed_gains(preds: Sequence, decided: Sequence[BlendFit], candidate: tuple[int, float], rows: np.ndarray,
                    values: RowValues, layout: tuple) -> dict[str, list[float]]:
    """Per metric, the fold gains over the baseline of the ranking composed from the `decided` bands and the
    `candidate` (method index, weight) for the rest (`layout`: the bands' metrics, their cuts, the baseline's
    values per repeat)."""
    bands, cuts, base = layout
    i, w = candidate
    gains: dict[str, list[float]] = {k: [] for k in dict.fromkeys(bands)}
    for r, (fold_of, _, pb) in enumerate(preds[0]):
        parts = [preds[f.method][r][1] if f.weight > 0 else pb for f in decided]
        parts += [preds[i][r][1]] * (len(bands) - len(decided))
        weights = [f.weight for f in decided] + [w] * (len(bands) - len(decided))
        now = values(compose(parts, pb, weights, cuts), rows)
        for k in gains:
            d = np.asarray(now[k], np.float64) - np.asarray(base[r][k], np.float64)
            gains[k] += [float(d[fold_of == f].mean()) for f in np.unique(fold_of)]
    return gains


def _fit_among(preds: Sequence, rows: np.ndarray, values: RowValues, objective: Sequence[str],
               guard: Sequence[str], folds: int, alpha: float) -> BlendFit:
    """The rule over every (method, weight) pair: each method's fit at the level shared by all the pairs, then
    the qualifying one with the largest lower bound of the objective gain (none: the baseline)."""
    fits = [_fit_cached(p, rows, values, objective, guard, folds, alpha, len(preds)) for p in preds]
    qualifying = [i for i, fit in enumerate(fits) if fit.weight > 0]
    if not qualifying:
        return fits[0]
    best = max(qualifying, key=lambda i: fits[i].lower[fits[i].weight]["objective"])  # ties: the first method
    fits[best].method = best
    return fits[best]


def _inner_predictions(method: FoldPredictor, baseline: FoldPredictor, rows: np.ndarray, m: int, folds: int,
                       repeats: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(fold of each row, method's and baseline's out-of-fold predictions) per inner repeat, inside `rows`."""
    local = lambda fn: (lambda tr, te: fn(rows[tr], rows[te]))  # noqa: E731
    return [(fold_assignment(len(rows), folds, seed), out_of_fold(local(method), len(rows), m, folds, seed),
             out_of_fold(local(baseline), len(rows), m, folds, seed)) for seed in range(repeats)]


def _fit_cached(preds, rows, values: RowValues, objective: Sequence[str], guard: Sequence[str], folds: int,
                alpha: float, methods: int = 1) -> BlendFit:
    """`fit_weight`'s rule on out-of-fold predictions already made (one (folds, method, baseline) per repeat);
    `methods`: how many methods' weights the level is shared among."""
    names = sorted(set(objective) | set(guard))
    fold_gains: dict[float, dict[str, list[float]]] = {w: {k: [] for k in [*names, "objective"]}
                                                       for w in WEIGHTS[1:]}
    for fold_of, pm, pb in preds:
        base = values(mix(pb, pb, 0.0), rows)
        for w in WEIGHTS[1:]:
            now = values(mix(pm, pb, w), rows)
            diffs = {k: np.asarray(now[k], np.float64) - np.asarray(base[k], np.float64) for k in names}
            diffs["objective"] = np.mean([diffs[k] for k in objective], axis=0)
            for f in range(folds):
                sel = fold_of == f
                for k, d in diffs.items():
                    fold_gains[w][k].append(float(d[sel].mean()))
    level = alpha / ((len(WEIGHTS) - 1) * methods)
    fit, best = BlendFit(0.0), -np.inf
    for w, per_metric in fold_gains.items():
        fit.gains[w] = {k: float(np.mean(g)) for k, g in per_metric.items()}
        fit.lower[w] = {k: corrected_lower_bound(g, 1 / folds, level) for k, g in per_metric.items()}
        if all(fit.lower[w][k] > 0 for k in [*guard, "objective"]) and fit.lower[w]["objective"] > best:
            best, fit.weight = fit.lower[w]["objective"], w
    return fit


def guarded_positions(method: Methods, baseline: FoldPredictor, values: RowValues, bands: Sequence[str],
                      cuts: Sequence[int], cv: InnerCV = InnerCV(), chosen: list[tuple[float, ...]] | None = None,
                      picked: list[tuple[int, ...]] | None = None) -> FoldPredictor:
    """A fold predictor: one weight per band of rank positions fitted inside the training rows (`fit_positions`
    by the rule `cv`), then the composed ranking (`compose`) on the held-out rows. `cuts`: the bands' last
    positions, the last one the number of candidates. Each chosen tuple of weights is appended to `chosen`, and
    among several methods each band's method index to `picked`."""
    methods = _as_list(method)
    m = int(cuts[-1])

    def predict(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        fits = fit_positions(methods, baseline, train, values, bands, m, cv, cuts)
        weights = tuple(f.weight for f in fits)
        if chosen is not None:
            chosen.append(weights)
        if picked is not None:
            picked.append(tuple(f.method for f in fits))
        base = baseline(train, test)
        made = {i: methods[i](train, test) for i in {f.method for f in fits if f.weight > 0}}
        return compose([made[f.method] if f.weight > 0 else base for f in fits], base, weights, cuts)
    return predict
