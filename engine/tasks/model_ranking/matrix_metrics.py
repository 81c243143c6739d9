"""Metrics of a score matrix: predictions (queries × candidates) ranked row by row and scored against the
grades of the same cells. ModelRetrieval A and Million LLMs score their cross-validation, their tuning objectives
and the guarded blends' fits with these helpers.

Which candidates tied at a cut enter the top is a rule, given by name (`TIES`):

- "position": the candidates listed first (`engine.io.ranking.top_k_rows`): what runs and reported tables use.
- "partition": the ones numpy's introselect (`np.argpartition`) leaves inside the top, then ordered by score
  (ties by candidate order). Million LLMs' tuning objective has always used it; a different choice at the cut
  changes the objective's value, and so which params tuning picks.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from engine.io.ranking import top_k_rows

TIES = ("position", "partition")
RowValue = Callable[[list[int], list[int]], float]
"""(the grades of a ranking's candidates in rank order, the query's positive grades) → a metric's value."""


def ranked_tops(predictions: np.ndarray, depth: int, ties: str = "position") -> np.ndarray:
    """Per row, the `depth` best candidates, best first, the candidates tied at the cut chosen by `ties`."""
    predictions = np.asarray(predictions)
    depth = min(depth, predictions.shape[1])
    if ties == "position":
        return top_k_rows(predictions, depth)
    if ties != "partition":
        raise ValueError(f"unknown tie rule {ties!r}; rules: {', '.join(TIES)}")
    tops = np.argpartition(-predictions, depth - 1, axis=1)[:, :depth]
    order = np.argsort(-np.take_along_axis(predictions, tops, 1), axis=1, kind="stable")
    return np.take_along_axis(tops, order, 1)


def judged_grades(grades: np.ndarray) -> list[list[int]]:
    """Each query's positive grades (what an ideal ranking holds)."""
    return [[int(g) for g in row if g > 0] for row in grades]


def row_values(grades: np.ndarray, metrics: Mapping[str, RowValue], depth: int, ties: str = "position"
               ) -> Callable[[np.ndarray, np.ndarray], dict[str, np.ndarray]]:
    """(predictions for `rows`, rows: indices into `grades`) → metric name → one value per row, each row's top
    `depth` ranked by `ties`."""
    judged = judged_grades(grades)

    def values(predictions: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
        out = {name: np.zeros(len(rows)) for name in metrics}
        for i, (top, r) in enumerate(zip(ranked_tops(predictions, depth, ties), rows)):
            rels = [int(grades[r, j]) for j in top]
            for name, value in metrics.items():
                out[name][i] = value(rels, judged[r])
        return out

    return values


def mean_objective(grades: np.ndarray, value: RowValue, depth: int, ties: str = "position",
                   remember: bool = False) -> Callable[[np.ndarray, np.ndarray], float]:
    """(predictions for `rows`, rows) → the mean of `value` over the rows: what tuning maximizes. `remember`:
    values kept per (row, top `depth` candidates), for tuning that scores thousands of rankings of the same
    queries whose value depends on the top alone."""
    judged = judged_grades(grades)
    memo: dict[tuple[int, tuple[int, ...]], float] = {}

    def objective(predictions: np.ndarray, rows: Sequence[int]) -> float:
        total = 0.0
        for top, r in zip(ranked_tops(predictions, depth, ties), rows):
            key = (int(r), tuple(top.tolist())) if remember else None
            v = memo.get(key) if key is not None else None
            if v is None:
                v = value([int(grades[r, j]) for j in top], judged[r])
                if key is not None:
                    memo[key] = v
            total += v
        return total / max(len(rows), 1)

    return objective
