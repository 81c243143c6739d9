"""engine.io.fusion's methods for `engine fuse`: CombSUM, CombMNZ, wsum and the sum normalization by hand,
whole runs fused query by query, coordinate ascent, and parity with ranx's fusion on random runs."""
from __future__ import annotations

import numpy as np
import pytest

from engine.io.fusion import coordinate_ascent, fuse, fuse_runs, normalize_array
from engine.errors import EngineError

A = {"d1": 10.0, "d2": 5.0, "d3": 0.0}   # min-max → 1, .5, 0
B = {"d2": 4.0, "d4": 2.0}               # min-max → 1, 0


def test_rrf_is_the_sum_of_reciprocal_ranks():
    # d1 is first in A and absent from B; d3 third in A; d2 second in A and first in B
    out = dict(fuse([A, B], "rrf"))
    assert out["d2"] == pytest.approx(1 / (60 + 2) + 1 / (60 + 1))
    assert out["d3"] == pytest.approx(1 / (60 + 3))
    assert dict(fuse([A, B], "rrf", k=1))["d4"] == pytest.approx(1 / (1 + 2))


def test_combsum_combmnz_wsum_by_hand():
    assert dict(fuse([A, B], "combsum")) == pytest.approx({"d1": 1.0, "d2": 1.5, "d3": 0.0, "d4": 0.0})
    # CombMNZ: × the number of runs returning the doc (d2 is in both)
    assert dict(fuse([A, B], "combmnz")) == pytest.approx({"d1": 1.0, "d2": 3.0, "d3": 0.0, "d4": 0.0})
    assert dict(fuse([A, B], "wsum", weights=[0.2, 0.8])) == pytest.approx(
        {"d1": 0.2, "d2": 0.2 * 0.5 + 0.8, "d3": 0.0, "d4": 0.0})
    with pytest.raises(EngineError, match="wsum needs one weight per system"):
        fuse([A, B], "wsum")
    with pytest.raises(EngineError, match="unknown fusion method 'borda'"):
        fuse([A, B], "borda")


def test_sum_normalization_shifts_to_zero_and_divides_by_the_sum():
    # 10, 5, 0 → shifted 10, 5, 0, sum 15
    assert normalize_array(np.array([10.0, 5.0, 0.0]), "sum").tolist() == pytest.approx([10 / 15, 5 / 15, 0.0])
    # 3, 2 → 1, 0 (sum 1)
    assert normalize_array(np.array([3.0, 2.0]), "sum").tolist() == [1.0, 0.0]
    assert normalize_array(np.array([2.0, 2.0]), "sum").tolist() == [0.0, 0.0]
    assert dict(fuse([A, B], "combsum", norm="sum")) == pytest.approx(
        {"d1": 10 / 15, "d2": 5 / 15 + 1.0, "d3": 0.0, "d4": 0.0})


def test_fuse_runs_query_by_query_with_a_query_only_some_runs_have():
    r1 = {"q1": A, "q2": {"x": 1.0}}
    r2 = {"q1": B}
    out = fuse_runs([r1, r2], "wsum", weights=[1.0, 3.0])
    assert dict(out["q1"]) == pytest.approx({"d1": 1.0, "d2": 0.5 + 3.0, "d3": 0.0, "d4": 0.0})
    assert out["q2"] == [("x", 0.0)]       # only r1 has q2: its weight alone (a single score min-maxes to 0)
    with pytest.raises(EngineError, match="at least 2 runs"):
        fuse_runs([r1])
    with pytest.raises(EngineError, match="1 fusion weights for 2 systems"):
        fuse_runs([r1, r2], "wsum", weights=[1.0])


def test_coordinate_ascent_finds_the_grid_optimum():
    target = np.array([0.5, 2.0, 0.0])
    weights, best = coordinate_ascent(lambda w: -float(np.sum((w - target) ** 2)), [1.0, 1.0, 1.0])
    assert weights == [0.5, 2.0, 0.0] and best == 0.0


def _random_runs(seed: int, n_runs: int = 3, n_queries: int = 5) -> list[dict[str, dict[str, float]]]:
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(n_runs):
        run = {}
        for q in range(n_queries):
            docs = rng.choice(30, size=int(rng.integers(5, 15)), replace=False)
            run[f"q{q}"] = {f"d{d}": float(rng.normal()) for d in docs}
        runs.append(run)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("method,norm,params", [("rrf", None, {"k": 60}), ("combsum", "min-max", {}),
                                                ("combmnz", "min-max", {}), ("wsum", "min-max", {}),
                                                ("combsum", "sum", {})])
def test_parity_with_ranx_fusion_on_random_runs(method, norm, params):
    from ranx import Run
    from ranx import fuse as ranx_fuse
    runs = _random_runs(5)
    weights = [0.2, 0.5, 0.3]
    ours_norm = {"min-max": "minmax", "sum": "sum", None: "minmax"}[norm]
    ours = fuse_runs(runs, method, weights if method == "wsum" else None, ours_norm, params.get("k", 60))
    ranx_params = dict(params, **({"weights": weights} if method == "wsum" else {}))
    ranx_method = {"combsum": "sum", "combmnz": "mnz"}.get(method, method)
    theirs = ranx_fuse([Run(r) for r in runs], norm=norm, method=ranx_method, params=ranx_params or None).to_dict()
    for q in ours:
        assert dict(ours[q]) == pytest.approx(theirs[q], rel=1e-9, abs=1e-12), q
