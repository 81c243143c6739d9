"""Performance transfer: rank candidates for a new query from the known scores of its nearest training queries.

One mechanism serves every "which candidate is best for this query" task (NTCIR-19 ModelRetrieval A,
TREC Million LLMs): a `QueryCollection` holds one embedding per training query and a
queries × candidates score matrix; a new query's prediction is the similarity-weighted mean of its k
nearest training queries' score rows (softmax over cosine / temperature), blended with the candidates'
global prior (their mean score). `cross_validate` tunes k, temperature, prior weight and — when given
several — the query representation inside each training fold (nested, so the reported scores are
honest), and returns out-of-fold predictions for the caller to score with the task's official metric.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from engine.core.encoders.base import l2_normalize
from engine.core.folds import fold_assignment
from engine.io.options import SHARE, Float, K
from engine.io.ranking import top_k_rows
from engine.errors import EngineError
from engine.io.ids import first_duplicate
from engine.progress import track

Objective = Callable[[np.ndarray, np.ndarray], float]
"""objective(predictions (len(rows) × candidates), rows: indices into the training queries) → mean score,
higher is better. The adapter supplies it from its task's metric."""


RANGES = {"k": K, "temperature": Float(0, 1_000_000, open_lo=True), "prior_weight": SHARE}
"""Each `TransferParams` value's range: its check and the --k, --temperature, --prior-weight of
`engine modelret-a` and `engine mllm` read these."""


@dataclass(frozen=True)
class TransferParams:
    """k nearest training queries, softmax temperature over their cosines, weight of the global prior."""
    k: int = 10
    temperature: float = 0.05
    prior_weight: float = 0.2

    def __post_init__(self) -> None:
        for name, declared in RANGES.items():
            declared.check(name, getattr(self, name), text=False)

    def __str__(self) -> str:
        return f"k={self.k} T={self.temperature:g} prior={self.prior_weight:g}"


DEFAULT_KS = (1, 3, 5, 10, 20, 50)
DEFAULT_TEMPERATURES = (0.01, 0.03, 0.1, 1.0)
DEFAULT_PRIOR_WEIGHTS = (0.0, 0.25, 0.5, 0.75)
DEFAULT_RUN_ID = ""
"""No --run-id: the run is tagged with what made it, `engine-<method>` (`run_tag`)."""


def param_grid(ks: Sequence[int] = DEFAULT_KS, temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
               prior_weights: Sequence[float] = DEFAULT_PRIOR_WEIGHTS, n_train: int | None = None
               ) -> list[TransferParams]:
    """Every combination; ks above the number of neighbours available collapse into one."""
    if n_train is not None:
        ks = sorted({min(k, max(n_train - 1, 1)) for k in ks})
    return [TransferParams(k, t, w) for k, t, w in itertools.product(ks, temperatures, prior_weights)]


@dataclass(frozen=True)
class TransferOptions:
    """What a command sets of the mechanism: params it fixes (None: tuned by leave-one-out over the grids)
    and the outer folds and seed of cross-validation (0 folds: leave-one-out)."""
    k: int | None = None
    temperature: float | None = None
    prior_weight: float | None = None
    folds: int = 10
    seed: int = 0
    ks: tuple[int, ...] = DEFAULT_KS
    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    prior_weights: tuple[float, ...] = DEFAULT_PRIOR_WEIGHTS

    def fixed(self, defaults: TransferParams) -> TransferParams:
        """A method's fixed params with whatever the user set instead."""
        return TransferParams(defaults.k if self.k is None else self.k,
                              defaults.temperature if self.temperature is None else self.temperature,
                              defaults.prior_weight if self.prior_weight is None else self.prior_weight)

    def grid(self, n_train: int) -> list[TransferParams]:
        """The grid with each param the user fixed reduced to that value."""
        if self.k is not None or self.temperature is not None:  # a value the user set is checked, never "default"
            TransferParams(1 if self.k is None else self.k, 1.0 if self.temperature is None else self.temperature)
        return param_grid([self.k] if self.k is not None else self.ks,
                          [self.temperature] if self.temperature is not None else self.temperatures,
                          [self.prior_weight] if self.prior_weight is not None else self.prior_weights, n_train)


def blend_views(views: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """One embedding whose cosine is the weighted mean of the views' cosines.

    Each view is L2-normalized and scaled by sqrt(w / Σw) before concatenation, so for two unit rows
    the dot product is Σ w·cos / Σw. A row missing a view (all zeros) simply loses that view's part;
    rows are re-normalized so such a query still has cosines on the same scale.
    """
    used = {name: w for name, w in weights.items() if w > 0}
    if not used:
        raise EngineError("a blend needs at least one view with a positive weight")
    unknown = [n for n in used if n not in views]
    if unknown:
        raise EngineError(f"unknown view(s) {', '.join(unknown)}; known: {', '.join(views)}")
    total = sum(used.values())
    parts = [l2_normalize(views[n]) * np.float32(np.sqrt(w / total)) for n, w in used.items()]
    return l2_normalize(np.concatenate(parts, axis=1))


def rank_targets(scores: np.ndarray) -> np.ndarray:
    """Each row's scores replaced by their rank position scaled to 1 (best) … 0 (worst); NaN stays NaN.

    The mean of these over training queries is the "average rank" prior.
    """
    from scipy.stats import rankdata

    scores = np.asarray(scores, dtype=np.float64)
    out = np.full_like(scores, np.nan)
    for i, row in enumerate(scores):
        ok = ~np.isnan(row)
        n = int(ok.sum())
        if n == 1:
            out[i, ok] = 1.0
        elif n > 1:
            out[i, ok] = (rankdata(row[ok]) - 1.0) / (n - 1.0)
    return out


def column_prior(scores: np.ndarray) -> np.ndarray:
    """Each candidate's mean known score (0 for a candidate never scored)."""
    known = ~np.isnan(scores)
    count = known.sum(axis=0)
    total = np.where(known, scores, 0.0).sum(axis=0)
    return np.divide(total, count, out=np.zeros(scores.shape[1]), where=count > 0)


def mean_rank_order(ranks: np.ndarray) -> np.ndarray:
    """The average-rank baseline as scores (higher first): candidates by their mean published rank (1 best) over
    the rows that rank them; equal means keep the candidates' column order (a run lists tied candidates in that
    order, and the NTCIR scorer breaks ties in Score by line order), a candidate never ranked comes last. The
    scores are distinct (m … 1), so every scorer reads the same ranking."""
    ranks = np.asarray(ranks, np.float64)
    known = ~np.isnan(ranks)
    count = known.sum(axis=0)
    total = np.where(known, ranks, 0.0).sum(axis=0)
    mean = np.divide(total, count, out=np.full(ranks.shape[1], np.inf), where=count > 0)
    order = np.lexsort((np.arange(ranks.shape[1]), mean))
    scores = np.empty(ranks.shape[1])
    scores[order] = np.arange(ranks.shape[1], 0, -1, dtype=np.float64)
    return scores


def neighbour_order(sim: np.ndarray) -> np.ndarray:
    """Training queries by decreasing similarity, per row, ties by position (computed once, reused for every k)."""
    return top_k_rows(sim, np.shape(sim)[1])


def transfer(sim: np.ndarray, scores: np.ndarray, prior: np.ndarray, params: TransferParams,
             order: np.ndarray | None = None) -> np.ndarray:
    """Predictions (queries × candidates) from similarities to the training queries (queries × n_train).

    `-inf` similarities mark training queries a row may not use (itself, in cross-validation). Unknown
    (NaN) scores are left out of the weighted mean; a candidate no neighbour scored gets the prior.
    `order` is `neighbour_order(sim)` when the caller already has it.
    """
    sim = np.asarray(sim, dtype=np.float64)
    n_train = sim.shape[1]
    if scores.shape[0] != n_train:
        raise EngineError(f"{n_train} similarities per query but {scores.shape[0]} training queries")
    k = min(params.k, n_train)
    if order is not None:
        top = order[:, :k]
    elif k < n_train:
        # the k nearest as an unordered set (not `top_k_rows`, which would change which of the neighbours tied
        # at the cut is kept and the order the mean below adds them in, and so the results)
        top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
    else:
        top = np.tile(np.arange(n_train), (sim.shape[0], 1))
    top_sim = np.take_along_axis(sim, top, axis=1)
    usable = np.isfinite(top_sim)
    peak = np.max(np.where(usable, top_sim, -np.inf), axis=1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    weights = np.where(usable, np.exp((np.where(usable, top_sim, 0.0) - peak) / params.temperature), 0.0)
    neigh = scores[top]  # (q, k, m)
    known = ~np.isnan(neigh)
    if known.all():
        den = weights.sum(axis=1, keepdims=True)
        num = np.einsum("qk,qkm->qm", weights, neigh)
        neighbours = np.divide(num, den, out=np.broadcast_to(prior, num.shape).astype(np.float64).copy(),
                               where=den > 0)
    else:
        w3 = weights[:, :, None] * known
        num = (w3 * np.where(known, neigh, 0.0)).sum(axis=1)
        den = w3.sum(axis=1)
        neighbours = np.divide(num, den, out=np.broadcast_to(prior, num.shape).astype(np.float64).copy(),
                               where=den > 0)
    return (1.0 - params.prior_weight) * neighbours + params.prior_weight * prior[None, :]


def ensemble(sims: Mapping[str, np.ndarray], scores: np.ndarray, prior: np.ndarray, params: TransferParams,
             present: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """The mean of the predictions transferred under several representations (name → queries × training
    similarities), each with the same params: averaging the views' predictions instead of choosing one is
    what holds up on ~80 training queries. `present` (name → bool per query) leaves a query's missing view out."""
    total = count = None
    for name, sim in sims.items():
        pred = transfer(sim, scores, prior, params)
        mask = np.ones(len(pred), bool) if present is None else np.asarray(present[name], bool)
        total = pred * mask[:, None] if total is None else total + pred * mask[:, None]
        count = mask.astype(np.float64) if count is None else count + mask
    if total is None or count is None:
        raise EngineError("an ensemble needs at least one representation")
    # a query with no view at all falls back to the prior
    return np.where(count[:, None] > 0, total / np.maximum(count, 1)[:, None], prior[None, :])


def leave_one_out(sim: np.ndarray, scores: np.ndarray, params: TransferParams,
                  order: np.ndarray | None = None) -> np.ndarray:
    """Each training query predicted from all the others (its own row and prior contribution removed).

    `order` is `neighbour_order` of `sim` with the diagonal set to -inf, when the caller has it.
    """
    n = scores.shape[0]
    masked = np.array(sim, dtype=np.float64, copy=True)
    np.fill_diagonal(masked, -np.inf)
    if order is None:
        order = neighbour_order(masked)
    known = ~np.isnan(scores)
    values = np.where(known, scores, 0.0)
    count = known.sum(axis=0)[None, :] - known
    total = values.sum(axis=0)[None, :] - values
    priors = np.divide(total, count, out=np.zeros_like(total), where=count > 0)  # (n, m): prior without row i
    # a candidate none of the neighbours scored falls back to the row's own prior (the NaN-aware mean
    # returns the placeholder 0 there), so predict with a zero prior and patch those cells
    chunk = transfer(masked, scores, np.zeros(scores.shape[1]), replace(params, prior_weight=0.0), order)
    if not known.all():
        top = order[:, :min(params.k, n)]
        usable = np.isfinite(np.take_along_axis(masked, top, axis=1))
        nobody = ~((~np.isnan(scores[top])) & usable[:, :, None]).any(axis=1)
        chunk = np.where(nobody, priors, chunk)
    return (1.0 - params.prior_weight) * chunk + params.prior_weight * priors


@dataclass
class QueryCollection:
    """Training queries: one embedding each (rows L2-normalized) and their score for every candidate."""
    query_ids: list[str]
    candidate_ids: list[str]
    embeddings: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        self.query_ids = [str(q) for q in self.query_ids]
        self.candidate_ids = [str(c) for c in self.candidate_ids]
        if not np.isfinite(self.embeddings).all():
            raise EngineError("training query embeddings hold NaN or infinite values")
        self.embeddings = l2_normalize(self.embeddings)
        self.scores = np.asarray(self.scores, dtype=np.float64)
        n, m = len(self.query_ids), len(self.candidate_ids)
        if n < 2:
            raise EngineError(f"transfer needs at least 2 training queries, got {n}")
        if not m:
            raise EngineError("transfer needs at least one candidate")
        for what, ids in (("training query", self.query_ids), ("candidate", self.candidate_ids)):
            dup = first_duplicate(ids)
            if dup is not None:
                raise EngineError(f"{what} id {ids[dup[1]]!r} appears twice")
        if self.embeddings.ndim != 2 or self.embeddings.shape[0] != n:
            raise EngineError(f"{n} training queries but embeddings of shape {self.embeddings.shape}")
        if self.scores.shape != (n, m):
            raise EngineError(f"score matrix has shape {self.scores.shape}, expected {(n, m)} "
                              "(training queries × candidates)")
        if np.isinf(self.scores).any():
            raise EngineError("training scores hold infinite values")
        empty = np.isnan(self.scores).all(axis=1)
        if empty.any():
            raise EngineError(f"training query {self.query_ids[int(np.argmax(empty))]!r} has no known score")

    @property
    def prior(self) -> np.ndarray:
        """Each candidate's mean score over the training queries."""
        return column_prior(self.scores)

    def similarity(self, embeddings: np.ndarray) -> np.ndarray:
        embeddings = l2_normalize(np.atleast_2d(embeddings))
        if embeddings.shape[1] != self.embeddings.shape[1]:
            raise EngineError(f"query embeddings have {embeddings.shape[1]} dimensions, the training queries "
                              f"{self.embeddings.shape[1]}: embed both the same way")
        return embeddings @ self.embeddings.T

    def predict(self, embeddings: np.ndarray, params: TransferParams) -> np.ndarray:
        """Predicted scores (queries × candidates) for new queries."""
        return transfer(self.similarity(embeddings), self.scores, self.prior, params)

    def rank(self, query_ids: Sequence[str], embeddings: np.ndarray, params: TransferParams
             ) -> dict[str, list[tuple[str, float]]]:
        """Every candidate for every query, best first: the input of `engine.io.runs.write_run`."""
        if len(query_ids) != len(np.atleast_2d(embeddings)):
            raise EngineError(f"{len(query_ids)} query ids but {len(np.atleast_2d(embeddings))} embeddings")
        return rankings(query_ids, self.candidate_ids, self.predict(embeddings, params))

    def tune(self, objective: Objective, grid: Sequence[TransferParams] | None = None) -> tuple[TransferParams, float]:
        """The parameters with the best leave-one-out objective over the training queries."""
        sim = self.embeddings @ self.embeddings.T
        return tune(sim, self.scores, objective, grid or param_grid(n_train=len(self.query_ids)))


def rankings(query_ids: Sequence[str], candidate_ids: Sequence[str], predictions: np.ndarray
             ) -> dict[str, list[tuple[str, float]]]:
    """qid → [(candidate, score)] best first; ties keep the candidates' given order."""
    predictions = np.atleast_2d(predictions)
    orders = top_k_rows(predictions, predictions.shape[1])
    return {str(qid): [(candidate_ids[j], float(row[j])) for j in order]
            for qid, row, order in zip(query_ids, predictions, orders)}


def tune(sim: np.ndarray, scores: np.ndarray, objective: Objective, grid: Sequence[TransferParams],
         rows: np.ndarray | None = None) -> tuple[TransferParams, float]:
    """Best grid point by leave-one-out over the training queries `rows` (default: all of sim's rows).

    `sim` is square over those training queries; the objective receives global row indices.
    """
    if not grid:
        raise EngineError("empty parameter grid")
    rows = np.arange(scores.shape[0]) if rows is None else np.asarray(rows)
    masked = np.array(sim, dtype=np.float64, copy=True)
    np.fill_diagonal(masked, -np.inf)
    order = neighbour_order(masked)
    best: tuple[TransferParams, float] | None = None
    for params in grid:
        value = float(objective(leave_one_out(sim, scores, params, order), rows))
        if best is None or value > best[1] + 1e-12:
            best = (params, value)
    assert best is not None
    return best


def select(sims: Mapping[str, np.ndarray], scores: np.ndarray, objective: Objective,
           grid: Sequence[TransferParams], rows: np.ndarray | None = None) -> tuple[str, TransferParams, float]:
    """The representation (name → square similarity over the training queries) and params with the best
    leave-one-out objective; ties go to the first listed."""
    best: tuple[str, TransferParams, float] | None = None
    for name, sim in sims.items():
        params, value = tune(sim, scores, objective, grid, rows=rows)
        if best is None or value > best[2] + 1e-12:
            best = (name, params, value)
    if best is None:
        raise EngineError("no query representation to choose from")
    return best


@dataclass
class CVResult:
    """Out-of-fold predictions for every training query and what each fold chose."""
    predictions: np.ndarray
    fold_of: np.ndarray
    chosen: list[tuple[str, TransferParams, float]] = field(default_factory=list)
    """Per fold: (representation, params, inner leave-one-out objective)."""

    def summary(self) -> str:
        """The most often chosen representation and parameters, e.g. for a report line."""
        if not self.chosen:
            return ""
        counts: dict[tuple[str, TransferParams], int] = {}
        for name, params, _ in self.chosen:
            counts[(name, params)] = counts.get((name, params), 0) + 1
        (name, params), n = max(counts.items(), key=lambda kv: kv[1])
        return f"{name}: {params} ({n}/{len(self.chosen)} folds)"


def cross_validate(representations: np.ndarray | Mapping[str, np.ndarray], scores: np.ndarray,
                   objective: Objective, grid: Sequence[TransferParams], folds: int = 0, seed: int = 0,
                   description: str = "cross-validation") -> CVResult:
    """Nested cross-validation: per outer fold, pick representation and params by inner leave-one-out
    on the fold's training queries, then predict the held-out queries from those training queries.

    `representations` is one embedding matrix or a mapping name → matrix (e.g. several view blends) to
    choose among. A grid of one point and one representation is plain (non-nested) cross-validation.
    """
    scores = np.asarray(scores, dtype=np.float64)
    n = scores.shape[0]
    if isinstance(representations, np.ndarray):
        representations = {"embedding": representations}
    if not representations:
        raise EngineError("no query representation to cross-validate")
    sims = {}
    for name, emb in representations.items():
        emb = l2_normalize(emb)
        if emb.shape[0] != n:
            raise EngineError(f"representation {name!r} has {emb.shape[0]} rows for {n} training queries")
        sims[name] = emb @ emb.T
    fold_of = fold_assignment(n, folds, seed)
    n_folds = int(fold_of.max()) + 1
    if n - np.bincount(fold_of).max() < 2:
        raise EngineError(f"{n} training queries are too few for {n_folds}-fold cross-validation")
    predictions = np.empty_like(scores)
    chosen: list[tuple[str, TransferParams, float]] = []
    single = len(grid) == 1 and len(sims) == 1
    for f in track(range(n_folds), total=n_folds, description=description):
        test = np.flatnonzero(fold_of == f)
        train = np.flatnonzero(fold_of != f)
        train_scores = scores[train]
        if single:
            best = (next(iter(sims)), grid[0], float("nan"))
        else:
            best = select({name: sim[np.ix_(train, train)] for name, sim in sims.items()}, train_scores,
                          objective, grid, rows=train)
        name, params, _ = best
        chosen.append(best)
        prior = column_prior(train_scores)
        predictions[test] = transfer(sims[name][np.ix_(test, train)], train_scores, prior, params)
    return CVResult(predictions=predictions, fold_of=fold_of, chosen=chosen)


def run_tag(run_id: str, method: str) -> str:
    """The run id written in a run's last column: the one given, else `engine-<method>` (what made the run)."""
    return run_id or f"engine-{method}"
