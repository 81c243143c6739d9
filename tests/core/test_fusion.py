"""engine.io.fusion: RRF and weighted fusion checked against values computed by hand."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import EngineError
from engine.io.fusion import normalize, normalize_array, ranked, rrf, weighted, weighted_arrays


def test_rrf_matches_hand_computed_scores():
    a = [("d1", 9.0), ("d2", 5.0), ("d3", 1.0)]
    b = [("d3", 0.9), ("d1", 0.5)]
    fused = dict(rrf([a, b]))
    assert fused["d1"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["d2"] == pytest.approx(1 / 62)
    assert fused["d3"] == pytest.approx(1 / 63 + 1 / 61)
    assert [d for d, _ in rrf([a, b])] == ["d1", "d3", "d2"]


def test_rrf_ranks_dicts_by_score_not_insertion_order():
    fused = rrf([{"x": 0.1, "y": 0.7, "z": 0.4}])
    assert fused == [("y", pytest.approx(1 / 61)), ("z", pytest.approx(1 / 62)), ("x", pytest.approx(1 / 63))]


def test_rrf_k_weights_and_depth():
    a = {"p": 2.0, "q": 1.0}
    b = {"q": 2.0, "p": 1.0}
    out = rrf([a, b], k=0, weights=[3.0, 1.0])
    assert dict(out) == {"p": pytest.approx(3 / 1 + 1 / 2), "q": pytest.approx(3 / 2 + 1 / 1)}
    assert len(rrf([a, b], depth=1)) == 1
    with pytest.raises(EngineError, match="2 systems"):
        rrf([a, b], weights=[1.0])


def test_ranked_keeps_ties_in_given_order_and_best_duplicate():
    assert ranked([("b", 1.0), ("a", 1.0), ("b", 3.0)]) == [("b", 3.0), ("a", 1.0)]


def test_normalize_minmax_and_zscore():
    assert normalize_array(np.array([2.0, 4.0, 6.0]), "minmax").tolist() == [0.0, 0.5, 1.0]
    z = normalize_array(np.array([1.0, 2.0, 3.0]), "zscore")
    assert z.tolist() == pytest.approx([-np.sqrt(1.5), 0.0, np.sqrt(1.5)])
    assert normalize_array(np.array([5.0, 5.0]), "zscore").tolist() == [0.0, 0.0]
    assert normalize({"a": 10.0, "b": 0.0}) == {"a": 1.0, "b": 0.0}
    with pytest.raises(EngineError, match="normalization"):
        normalize_array(np.array([1.0]), "softmax")


def test_weighted_minmax_hand_computed_with_missing_docs():
    a = {"d1": 10.0, "d2": 5.0, "d3": 0.0}   # → 1, 0.5, 0
    b = {"d2": 4.0, "d4": 2.0}                # → 1, 0; d1, d3 missing → floor 0
    out = dict(weighted([a, b], weights=[1.0, 2.0]))
    assert out == {"d1": pytest.approx(1.0), "d2": pytest.approx(0.5 + 2.0), "d3": pytest.approx(0.0),
                   "d4": pytest.approx(0.0)}
    assert weighted([a, b], weights=[1.0, 2.0])[0][0] == "d2"


def test_weighted_zscore_missing_doc_gets_the_systems_lowest_score():
    a = {"x": 3.0, "y": 1.0}        # z: +1, -1
    b = {"x": 0.0, "z": 2.0}        # z: -1, +1; y missing from b → -1, z missing from a → -1
    out = dict(weighted([a, b], method="zscore"))
    assert out == {"x": pytest.approx(1.0 - 1.0), "y": pytest.approx(-1.0 - 1.0), "z": pytest.approx(-1.0 + 1.0)}


def test_weighted_arrays_agrees_with_dict_fusion():
    cols = np.array([[1.0, 0.2], [3.0, 0.1], [2.0, 0.9]])
    dense = weighted_arrays(cols, [0.5, 2.0], method="zscore")
    docs = ["a", "b", "c"]
    by_dict = dict(weighted([dict(zip(docs, cols[:, 0])), dict(zip(docs, cols[:, 1]))], [0.5, 2.0], "zscore"))
    assert dense.tolist() == pytest.approx([by_dict[d] for d in docs])
