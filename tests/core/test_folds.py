"""The one fold splitter: grouped folds are sklearn's GroupKFold's, seeded folds are balanced and repeatable."""
from __future__ import annotations

import numpy as np
import pytest

from engine.core.folds import fold_assignment, splits
from engine.errors import EngineError


@pytest.mark.parametrize("seed", range(5))
def test_grouped_folds_are_group_kfolds(seed):
    from sklearn.model_selection import GroupKFold
    rng = np.random.default_rng(seed)
    groups = [f"g{g}" for g in rng.integers(0, 17, size=120)]
    folds = int(rng.integers(2, 6))
    ours = [(tr.tolist(), te.tolist()) for tr, te in splits(fold_assignment(len(groups), folds, groups=groups))]
    ref = [(tr.tolist(), te.tolist()) for tr, te in GroupKFold(n_splits=folds).split(np.zeros(120), groups=groups)]
    assert ours == ref


def test_seeded_folds_are_balanced_repeatable_and_cover_every_row():
    a, b = fold_assignment(103, 10, seed=3), fold_assignment(103, 10, seed=3)
    assert (a == b).all() and not (a == fold_assignment(103, 10, seed=4)).all()
    assert np.bincount(a).max() - np.bincount(a).min() <= 1 and len(np.unique(a)) == 10
    tests = np.sort(np.concatenate([te for _, te in splits(a)]))
    assert (tests == np.arange(103)).all()
    assert (fold_assignment(5, 0) == np.arange(5)).all() and (fold_assignment(5, 9) == np.arange(5)).all()


def test_impossible_folds_are_refused():
    with pytest.raises(EngineError, match="at least 2, not 1"):
        fold_assignment(10, 1)
    with pytest.raises(EngineError, match="3 groups cannot fill 4 folds"):
        fold_assignment(6, 4, groups=["a", "a", "b", "b", "c", "c"])
