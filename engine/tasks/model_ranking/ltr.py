"""Learning to rank candidates for a query: LightGBM LambdaRank over (query, candidate) features.

The features are what transfer already knows, made explicit so a ranker can weigh them per candidate:
the candidate's prior (mean target and mean rank over the training queries), the score transferred from
the k nearest training queries under each view and where that puts the candidate among the others, how
close those neighbours are, the query's own statistics (task statistics for ModelRetrieval A), and
descriptors parsed from the candidate's name (family, size, cased, domain words). Training rows get their
transfer features by leave-one-out inside the training queries, exactly as a new query gets them from all
of them, so the ranker learns on features distributed like the ones it is applied to.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine.errors import missing_extra
from engine.tasks.model_ranking.transfer import (TransferParams, column_prior, leave_one_out, neighbour_order,
                                                 rank_targets, transfer)

FAMILIES = ("distilroberta", "distilbert", "roberta", "deberta", "albert", "electra", "xlnet", "xlm", "mpnet",
            "minilm", "bert", "t5", "gpt", "llama", "mistral", "mixtral", "qwen", "gemma", "phi", "falcon", "claude")
"""Checked in this order (the first match wins, so `distilroberta` is not `roberta`); index + 1 is the feature."""
DOMAIN_WORDS = ("bio", "clinical", "med", "fin", "legal", "multilingual", "twitter", "tweet", "sentiment",
                "emotion", "hate", "squad", "sst", "code", "math", "chat", "instruct")
SIZES = {"tiny": 0.25, "mini": 0.5, "small": 0.5, "base": 1.0, "medium": 1.5, "large": 3.0, "xl": 6.0, "xxl": 12.0}


@dataclass(frozen=True)
class LTRParams:
    """LightGBM LambdaRank settings, fixed small: 79 training queries leave no room for tuning them per run."""
    n_estimators: int = 150
    num_leaves: int = 7
    learning_rate: float = 0.05
    min_data_in_leaf: int = 20
    feature_fraction: float = 0.8
    truncation: int = 10
    """lambdarank_truncation_level: the pairs near the top that drive the gradient."""
    seed: int = 0
    threads: int = 1


def candidate_descriptors(names: Sequence[str]) -> np.ndarray:
    """(candidates × (3 + |DOMAIN_WORDS|)): family index (0 unknown), size factor (NaN unknown; `7b` → 7),
    uncased flag, one flag per domain word found in the lower-cased name."""
    rows = []
    for name in names:
        low = str(name).lower()
        family = next((i + 1 for i, f in enumerate(FAMILIES) if f in low), 0)
        billions = re.search(r"(\d+(?:\.\d+)?)b\b", low)
        size = float(billions.group(1)) if billions else next(
            (v for word, v in SIZES.items() if re.search(rf"(^|[^a-z]){word}([^a-z]|$)", low)), np.nan)
        if np.isnan(size) and low.startswith("distil"):
            size = 0.6
        rows.append([family, size, float("uncased" in low)] + [float(w in low) for w in DOMAIN_WORDS])
    return np.array(rows, dtype=np.float64).reshape(len(names), 3 + len(DOMAIN_WORDS))


def _neighbour_stats(sim: np.ndarray, k: int) -> np.ndarray:
    """(queries × 2): mean and max cosine of the k nearest usable training queries."""
    order = neighbour_order(sim)[:, :k]
    top = np.take_along_axis(sim, order, axis=1)
    usable = np.isfinite(top)
    mean = np.where(usable, top, 0.0).sum(axis=1) / np.maximum(usable.sum(axis=1), 1)
    peak = np.max(np.where(usable, top, -np.inf), axis=1)
    return np.stack([mean, np.where(np.isfinite(peak), peak, 0.0)], axis=1)


def features(sims: Mapping[str, np.ndarray], scores: np.ndarray, params: TransferParams,
             query_stats: np.ndarray | None, descriptors: np.ndarray, loo: bool,
             extra: np.ndarray | None = None) -> np.ndarray:
    """Feature rows (queries × candidates, F) for queries with similarities `sims` (name → queries × training
    queries) to training queries with `scores`. `loo`: the queries ARE the training queries (square sims);
    each one's neighbours are the others only. `extra` (queries × candidates × E; NaN = missing) is appended:
    e.g. the candidates' transferability scores on the query (`query_candidate_block`)."""
    m = scores.shape[1]
    plain = TransferParams(params.k, params.temperature, 0.0)
    ranks = rank_targets(scores)
    # every row gets the priors over all the training queries, its own included: a leave-one-out prior
    # would move with the row's own score (total − own) / (n − 1), a leak the trees find at once
    q = next(iter(sims.values())).shape[0]
    prior = np.broadcast_to(column_prior(scores), (q, m))
    rank_prior = np.broadcast_to(column_prior(ranks), (q, m))
    blocks = [prior, rank_prior]
    per_query = []
    for sim in sims.values():
        sim = np.array(sim, dtype=np.float64, copy=True)
        if loo:
            np.fill_diagonal(sim, -np.inf)
            pred = leave_one_out(sim, scores, plain)
        else:
            pred = transfer(sim, scores, column_prior(scores), plain)
        blocks += [pred, rank_targets(pred), pred - prior]
        per_query.append(_neighbour_stats(sim, params.k))
    q = prior.shape[0]
    cols = [b.reshape(q, m, 1) for b in blocks]
    for stats in per_query + ([query_stats] if query_stats is not None else []):
        cols.append(np.broadcast_to(np.asarray(stats, np.float64)[:, None, :], (q, m, stats.shape[1])))
    cols.append(np.broadcast_to(descriptors[None, :, :], (q, m, descriptors.shape[1])))
    if extra is not None:
        cols.append(np.asarray(extra, np.float64))
    return np.concatenate(cols, axis=2).reshape(q * m, -1)


def query_candidate_block(score_mats: Sequence[np.ndarray]) -> np.ndarray:
    """(queries × candidates × 2·S) from S score matrices (queries × candidates, NaN = missing): each score
    z-scored within its query and its rank position among the candidates (1 best … 0 worst); scores of one
    task are comparable across candidates, not across tasks, so only within-query forms are features."""
    cols = []
    for mat in score_mats:
        mat = np.asarray(mat, np.float64)
        ok = np.isfinite(mat)
        count = np.maximum(ok.sum(axis=1, keepdims=True), 1)
        mean = np.where(ok, mat, 0.0).sum(axis=1, keepdims=True) / count
        std = np.sqrt(np.where(ok, (mat - mean) ** 2, 0.0).sum(axis=1, keepdims=True) / count)
        z = np.where(ok, (mat - mean) / np.where(std > 1e-12, std, 1.0), np.nan)
        cols += [z, rank_targets(mat)]
    return np.stack(cols, axis=2)


def _lightgbm():
    try:
        import lightgbm
    except ImportError as exc:  # pragma: no cover - the extra is installed with the main set-up
        raise missing_extra("lightgbm", "ltr") from exc
    return lightgbm


def fit_predict(train_x: np.ndarray, train_labels: np.ndarray, n_train: int, test_x: np.ndarray, n_test: int,
                label_gain: Sequence[float], params: LTRParams | None = None) -> np.ndarray:
    """Train LambdaRank on `n_train` queries of equal candidate count (rows grouped by query, integer labels
    whose gains are `label_gain`), return scores (n_test × candidates) for the test rows."""
    lgb = _lightgbm()
    params = params or LTRParams()
    m = len(train_labels) // n_train
    model = lgb.LGBMRanker(
        objective="lambdarank", n_estimators=params.n_estimators, num_leaves=params.num_leaves,
        learning_rate=params.learning_rate, min_child_samples=params.min_data_in_leaf,
        colsample_bytree=params.feature_fraction, label_gain=list(label_gain),
        lambdarank_truncation_level=params.truncation, random_state=params.seed, n_jobs=params.threads,
        deterministic=True, force_row_wise=True, verbose=-1)
    model.fit(train_x, train_labels.astype(int), group=[m] * n_train)
    return model.predict(test_x, num_threads=params.threads).reshape(n_test, m)


@dataclass(frozen=True)
class Side:
    """One side of an LTR fit: the training queries, the new ones, or further training queries whose labels
    come from another source (Million LLMs' discovery questions labelled by the LLMs' confidence). Their
    similarities to the training queries per view (`sims`), their task statistics, their extra feature block
    (None: none) and, for training queries, their integer labels (queries × candidates, -1 = unknown → 0)."""
    sims: Mapping[str, np.ndarray]
    stats: np.ndarray | None = None
    extra: np.ndarray | None = None
    labels: np.ndarray | None = None


def predict(train: Side, query: Side, scores: np.ndarray, label_gain: Sequence[float],
            transfer_params: TransferParams, descriptors: np.ndarray, params: LTRParams | None = None,
            pseudo: Side | None = None) -> np.ndarray:
    """LTR predictions (queries × candidates) for new queries from the training queries (square `train.sims`,
    their `scores` and `train.labels`) and the new queries' `query.sims` to them. `pseudo`: further training
    queries with labels of another source, their features made like a new query's."""
    n = scores.shape[0]
    train_x = features(train.sims, scores, transfer_params, train.stats, descriptors, loo=True, extra=train.extra)
    train_labels = np.maximum(train.labels, 0).reshape(-1)
    if pseudo is not None:
        more = features(pseudo.sims, scores, transfer_params, None, descriptors, loo=False, extra=pseudo.extra)
        train_x = np.concatenate([train_x, more])
        train_labels = np.concatenate([train_labels, np.maximum(pseudo.labels, 0).reshape(-1)])
        n += len(pseudo.labels)
    test_x = features(query.sims, scores, transfer_params, query.stats, descriptors, loo=False, extra=query.extra)
    q = next(iter(query.sims.values())).shape[0]
    return fit_predict(train_x, train_labels, n, test_x, q, label_gain, params)
