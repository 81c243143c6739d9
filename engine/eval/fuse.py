"""`engine fuse`: run files fused query by query with `engine.io.fusion` (the one implementation the task
pipelines use too), with weights given, or tuned on qrels by coordinate ascent on one metric."""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from engine.io.fusion import (
    METHODS,
    NORMALIZERS,
    RRF_K,
    WEIGHT_GRID,
    coordinate_ascent,
    fuse_runs,
)
from engine.errors import EngineError, opt
from engine.io.options import DEPTH
from engine.eval.evaluate import evaluate
from engine.eval.metrics import parse_metric
from engine.io.runs import Qrels, Run, load_run, read_qrels, write_run
from engine.progress import warn


@dataclass(frozen=True)
class FuseOptions:
    method: str = "rrf"
    norm: str = "minmax"
    k: int = RRF_K
    depth: int = 1000            # docs kept per query in the fused run (trec_eval's usual depth)
    metric: str = "ndcg@10"      # what --tune maximizes
    run_id: str = "fused"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise EngineError(f"unknown fusion method {self.method!r}; use one of {', '.join(METHODS)}")
        if self.norm not in NORMALIZERS:
            raise EngineError(f"unknown score normalization {self.norm!r}; use one of {', '.join(NORMALIZERS)}")
        DEPTH.check("depth", self.depth, text=False)
        parse_metric(self.metric)


@dataclass
class FuseReport:
    weights: list[float] | None
    tuned: float | None      # the metric at the tuned weights, on the tuning qrels (optimistic)
    queries: int
    lines: int


def parse_weights(text: str) -> list[float]:
    """`0.5,1,2` → [0.5, 1.0, 2.0]: finite, non-negative, not all zero."""
    import math
    try:
        ws = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise EngineError(f"{opt('weights')} {text!r}: give comma-separated numbers, one per run") from None
    if not ws or not all(math.isfinite(w) and w >= 0 for w in ws) or not any(ws):
        raise EngineError(f"{opt('weights')} {text!r}: weights must be finite, non-negative and not all 0")
    return ws


def _fused(runs: Sequence[Run], weights: Sequence[float] | None, o: FuseOptions) -> Run:
    return {q: dict(pairs) for q, pairs in fuse_runs(runs, o.method, weights, o.norm, o.k, o.depth).items()}


def tune_weights(runs: Sequence[Run], qrels: Qrels, options: FuseOptions = FuseOptions()) -> tuple[list[float], float]:
    """Coordinate ascent over `WEIGHT_GRID` from equal weights, maximizing `options.metric` on `qrels`."""
    metric = parse_metric(options.metric).name
    runs = [{q: r[q] for q in r if q in qrels} for r in runs]   # only judged queries can move the metric

    def objective(w) -> float:
        return evaluate(_fused(runs, list(w), options), qrels, metric).means[metric]

    return coordinate_ascent(objective, [1.0] * len(runs), WEIGHT_GRID)


def fuse_files(run_paths: Sequence[str | os.PathLike], out: str | os.PathLike, options: FuseOptions = FuseOptions(),
               weights: Sequence[float] | None = None, tune: str | os.PathLike | None = None) -> FuseReport:
    """Read the runs, fuse them (weights given, tuned on `tune` qrels, or none), write the fused run atomically."""
    if weights is not None and tune is not None:
        raise EngineError(f"give {opt('weights')} or {opt('tune')}, not both")
    if weights is not None and len(weights) != len(run_paths):
        raise EngineError(f"{len(weights)} weights for {len(run_paths)} runs; give one weight per run")
    runs = [load_run(p) for p in run_paths]
    tuned = None
    if tune is not None:
        weights, tuned = tune_weights(runs, read_qrels(tune), options)
        warn(f"weights tuned on {tune}: {options.metric} there ({tuned:.4f}) is optimistic; report scores of "
             "queries the tuning did not see")
    fused = fuse_runs(runs, options.method, weights, options.norm, options.k, options.depth)
    lines = write_run(out, fused, options.run_id)
    return FuseReport(list(weights) if weights is not None else None, tuned, len(fused), lines)
