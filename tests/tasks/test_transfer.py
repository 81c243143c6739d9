"""The transfer mechanism on planted data: no model, no files."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import EngineError
from engine.core.folds import fold_assignment
from engine.tasks.model_ranking.transfer import (QueryCollection, TransferParams, blend_views, column_prior, cross_validate,
                             leave_one_out, param_grid, rank_targets, rankings, transfer)


def planted(n_clusters: int = 4, per_cluster: int = 12, n_candidates: int = 15, dim: int = 16, seed: int = 0):
    """Queries in clusters; each cluster has its own best candidate, and one candidate is decent everywhere."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(n_clusters, dim))
    cluster = np.repeat(np.arange(n_clusters), per_cluster)
    emb = centers[cluster] + 0.3 * rng.normal(size=(len(cluster), dim))
    scores = 0.5 + 0.05 * rng.normal(size=(len(cluster), n_candidates))
    scores[:, 0] += 0.2  # the global favourite
    scores[np.arange(len(cluster)), 1 + cluster] += 0.4  # each cluster's expert
    return emb.astype(np.float32), scores, cluster


def top1_objective(scores: np.ndarray):
    """Mean true score of the top-ranked candidate (enough to compare rankings in these tests)."""
    def objective(pred: np.ndarray, rows: np.ndarray) -> float:
        return float(np.mean(scores[rows, np.argmax(pred, axis=1)]))
    return objective


def test_transfer_beats_prior_on_planted_clusters():
    emb, scores, cluster = planted()
    objective = top1_objective(scores)
    grid = param_grid(n_train=len(scores))
    transfer_cv = cross_validate(emb, scores, objective, grid, folds=5)
    prior_cv = cross_validate(emb, scores, objective, [TransferParams(1, 1.0, 1.0)], folds=5)
    rows = np.arange(len(scores))
    assert objective(transfer_cv.predictions, rows) > objective(prior_cv.predictions, rows) + 0.15
    # the prior alone always picks the global favourite; transfer picks each cluster's expert
    assert (np.argmax(prior_cv.predictions, axis=1) == 0).all()
    assert np.mean(np.argmax(transfer_cv.predictions, axis=1) == 1 + cluster) > 0.9
    assert len(transfer_cv.chosen) == 5 and transfer_cv.summary()


def test_weighting_extremes():
    sim = np.array([[0.9, 0.5, 0.1]])
    scores = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    prior = column_prior(scores)
    np.testing.assert_allclose(transfer(sim, scores, prior, TransferParams(1, 0.05, 0.0)), [[1.0, 0.0]])
    np.testing.assert_allclose(transfer(sim, scores, prior, TransferParams(3, 0.05, 1.0)), [prior])
    uniform = transfer(sim, scores, prior, TransferParams(2, 1e6, 0.0))
    np.testing.assert_allclose(uniform, [[0.5, 0.5]], atol=1e-5)
    sharp = transfer(sim, scores, prior, TransferParams(2, 0.01, 0.0))
    assert sharp[0, 0] > 0.99
    blended = transfer(sim, scores, prior, TransferParams(1, 0.05, 0.25))
    np.testing.assert_allclose(blended, 0.75 * np.array([[1.0, 0.0]]) + 0.25 * prior)


def test_unknown_scores_are_left_out():
    sim = np.array([[0.9, 0.8]])
    scores = np.array([[np.nan, 0.2], [0.6, np.nan]])
    prior = column_prior(scores)
    np.testing.assert_allclose(prior, [0.6, 0.2])
    pred = transfer(sim, scores, prior, TransferParams(1, 0.05, 0.0))
    # candidate 0: the nearest neighbour does not know it → prior; candidate 1: the nearest's score
    np.testing.assert_allclose(pred, [[0.6, 0.2]])


def test_leave_one_out_matches_a_collection_without_the_query():
    rng = np.random.default_rng(3)
    emb = rng.normal(size=(9, 5)).astype(np.float32)
    scores = rng.random((9, 6))
    scores[2, 1] = np.nan
    scores[5, 1] = np.nan
    params = TransferParams(3, 0.1, 0.3)
    emb_n = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    loo = leave_one_out(emb_n @ emb_n.T, scores, params)
    for i in range(9):
        keep = [j for j in range(9) if j != i]
        coll = QueryCollection([str(j) for j in keep], [f"c{c}" for c in range(6)], emb[keep], scores[keep])
        np.testing.assert_allclose(loo[i], coll.predict(emb[i:i + 1], params)[0], atol=1e-6)


def test_cross_validation_predicts_each_fold_from_its_training_queries():
    emb, scores, _ = planted(per_cluster=5)
    params = TransferParams(3, 0.1, 0.2)
    res = cross_validate(emb, scores, top1_objective(scores), [params], folds=4, seed=1)
    for f in range(4):
        test, train = np.flatnonzero(res.fold_of == f), np.flatnonzero(res.fold_of != f)
        coll = QueryCollection([str(i) for i in train], [str(c) for c in range(scores.shape[1])],
                               emb[train], scores[train])
        np.testing.assert_allclose(res.predictions[test], coll.predict(emb[test], params), atol=1e-6)


def test_cross_validation_chooses_the_informative_representation():
    emb, scores, _ = planted()
    noise = np.random.default_rng(9).normal(size=emb.shape).astype(np.float32)
    res = cross_validate({"noise": noise, "planted": emb}, scores, top1_objective(scores),
                         param_grid((1, 5), (0.1,), (0.0, 0.5), len(scores)), folds=3)
    assert [name for name, _, _ in res.chosen] == ["planted"] * 3


def test_blend_is_weighted_mean_of_cosines():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 8)), rng.normal(size=(2, 3))
    blended = blend_views({"a": a, "b": b}, {"a": 3.0, "b": 1.0})
    cos = lambda x: (x[0] @ x[1]) / np.linalg.norm(x[0]) / np.linalg.norm(x[1])  # noqa: E731
    assert blended[0] @ blended[1] == pytest.approx(0.75 * cos(a) + 0.25 * cos(b), abs=1e-6)
    with pytest.raises(EngineError, match="unknown view"):
        blend_views({"a": a}, {"c": 1.0})


def test_rank_targets_and_rankings():
    r = rank_targets(np.array([[0.2, 0.9, 0.5], [np.nan, 1.0, 0.0]]))
    np.testing.assert_allclose(r[0], [0.0, 1.0, 0.5])
    assert np.isnan(r[1, 0]) and r[1, 1] == 1.0 and r[1, 2] == 0.0
    ranked = rankings(["q"], ["a", "b", "c"], np.array([[0.1, 0.3, 0.2]]))
    assert [d for d, _ in ranked["q"]] == ["b", "c", "a"]


def test_bad_collections_are_errors():
    emb = np.eye(3, dtype=np.float32)
    with pytest.raises(EngineError, match="appears twice"):
        QueryCollection(["a", "a", "b"], ["x"], emb, np.ones((3, 1)))
    with pytest.raises(EngineError, match="shape"):
        QueryCollection(["a", "b", "c"], ["x", "y"], emb, np.ones((3, 1)))
    with pytest.raises(EngineError, match="no known score"):
        QueryCollection(["a", "b", "c"], ["x"], emb, np.array([[1.0], [np.nan], [0.0]]))
    coll = QueryCollection(["a", "b", "c"], ["x"], emb, np.ones((3, 1)))
    with pytest.raises(EngineError, match="dimensions"):
        coll.predict(np.ones((1, 4)), TransferParams())
    with pytest.raises(EngineError, match="k must be"):
        TransferParams(k=0)
    with pytest.raises(EngineError, match="folds"):
        fold_assignment(10, 1)
