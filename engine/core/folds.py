"""The one way to split rows into cross-validation folds: at random by a seed (repeatable), or by group (rows
that share a group never sit on both sides of a split, as sklearn's GroupKFold assigns them)."""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from engine.errors import EngineError


def fold_assignment(n: int, folds: int, seed: int = 0, groups: Sequence | None = None) -> np.ndarray:
    """Fold number per row. Without `groups`: a seeded permutation dealt round the folds (sizes differ by at most
    one); folds=0 or folds >= n means leave-one-out. With `groups`: whole groups to folds, largest first, each to
    the fold with the fewest rows so far (sklearn's GroupKFold; no seed: it is deterministic)."""
    if folds < 0 or folds == 1:
        raise EngineError(f"folds must be 0 (leave-one-out) or at least 2, not {folds}")
    if groups is not None:
        return _by_group(np.asarray(groups), folds)
    if folds == 0 or folds >= n:
        return np.arange(n)
    order = np.random.default_rng(seed).permutation(n)
    out = np.empty(n, dtype=int)
    out[order] = np.arange(n) % folds
    return out


def _by_group(groups: np.ndarray, folds: int) -> np.ndarray:
    unique, index = np.unique(groups, return_inverse=True)
    if folds == 0 or folds > len(unique):
        raise EngineError(f"{len(unique)} groups cannot fill {folds} folds")
    sizes = np.bincount(index)
    order = np.argsort(sizes, kind="stable")[::-1]
    load = np.zeros(folds)
    fold_of_group = np.zeros(len(unique), dtype=int)
    for group in order:
        lightest = int(np.argmin(load))
        load[lightest] += sizes[group]
        fold_of_group[group] = lightest
    return fold_of_group[index]


def splits(fold_of: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(training rows, held-out rows) of each fold in fold order."""
    for f in range(int(fold_of.max()) + 1 if len(fold_of) else 0):
        yield np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)
