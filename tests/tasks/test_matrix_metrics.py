"""The score-matrix metric helper: which candidates tied at the cut enter the top is the named rule, and the
per-row values and objectives score those tops."""
from __future__ import annotations

import numpy as np
import pytest

from engine.eval.metrics import ndcg
from engine.tasks.model_ranking.matrix_metrics import mean_objective, ranked_tops, row_values


def test_the_tie_rules_agree_without_ties_and_pick_by_their_rule_with_them():
    rng = np.random.default_rng(3)
    distinct = rng.permutation(40).reshape(4, 10).astype(float)
    assert np.array_equal(ranked_tops(distinct, 4, "position"), ranked_tops(distinct, 4, "partition"))
    assert np.array_equal(ranked_tops(distinct, 4), np.argsort(-distinct, axis=1)[:, :4])
    tied = rng.integers(0, 3, size=(50, 12)).astype(float)
    position, partition = ranked_tops(tied, 3, "position"), ranked_tops(tied, 3, "partition")
    assert np.array_equal(position, np.argsort(-tied, axis=1, kind="stable")[:, :3])
    want = np.argpartition(-tied, 2, axis=1)[:, :3]
    assert [set(r) for r in partition] == [set(r) for r in want]
    assert all(np.all(np.diff(t[p]) <= 0) for t, p in zip(tied, partition))  # best first
    assert any(set(a) != set(b) for a, b in zip(position, partition))  # the rules differ where ties meet the cut
    with pytest.raises(ValueError, match="tie rule"):
        ranked_tops(tied, 3, "random")


def test_values_and_objectives_score_the_ranked_tops():
    rng = np.random.default_rng(5)
    grades = rng.integers(0, 3, size=(30, 15))
    pred = rng.integers(0, 4, size=(30, 15)).astype(float)
    rows = np.arange(30)
    value = lambda rels, judged: ndcg(rels, judged, 5, float)  # noqa: E731
    per_row = row_values(grades, {"ndcg": value}, 5)(pred, rows)["ndcg"]
    order = np.argsort(-pred, axis=1, kind="stable")
    want = [value([int(grades[r, j]) for j in order[r, :5]], [int(g) for g in grades[r] if g > 0]) for r in rows]
    assert np.allclose(per_row, want)
    assert mean_objective(grades, value, 5)(pred, rows) == pytest.approx(np.mean(want))
    remembered = mean_objective(grades, value, 5, remember=True)
    assert remembered(pred, rows) == remembered(pred, rows) == pytest.approx(np.mean(want))
    assert mean_objective(grades, value, 5, "partition")(pred, rows) != pytest.approx(np.mean(want))
