"""`fuse(a, b, …)`: several stages' rankings of each query fused into one, by the core's fusion
(`engine.io.fusion`, the code behind `engine fuse`); `a | b` is `fuse(a, b)` with its defaults."""
from __future__ import annotations

from typing import Any, Sequence

from engine.io import fusion
from engine.io.options import DEPTH, WEIGHT
from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.pipeline.stage import PRECEDENCE, Context, Run, Stage, check_choice, check_range, keep_args, operand
from engine.io.ranking import Ranking
from engine.errors import EngineError

METHODS = ("rrf", "weighted", "combsum", "combmnz", "wsum")


class Fuse(Stage):
    """Reciprocal rank fusion (k=60) by default; `weighted` is CombSUM of min-max normalised scores with
    `weights` (wsum likewise, weights required); combsum and combmnz as in `engine fuse`. `depth` keeps the
    top of the fused ranking. With `informative=True` a query none of whose inputs says anything (no items,
    or every score tied) gets no ranking, so a later stage falls back on its own evidence."""
    name = "fuse"

    def __init__(self, *stages: Stage, method: str = "rrf", k: int = fusion.RRF_K,
                 weights: Sequence[float] | None = None, norm: str = "minmax", depth: int | None = None,
                 informative: bool = False) -> None:
        super().__init__()
        if len(stages) < 2 or not all(isinstance(s, Stage) for s in stages):
            raise EngineError("fuse(…) takes two or more stages to fuse")
        check_choice("fuse", "method", method, METHODS)
        check_choice("fuse", "norm", norm, fusion.NORMALIZERS)
        check_range("fuse", "k", k, fusion.RRF_K_RANGE)
        if depth is not None:
            check_range("fuse", "depth", depth, DEPTH)
        if weights is not None:
            if not isinstance(weights, (list, tuple)) or len(weights) != len(stages):
                raise EngineError(f"fuse(…): weights must list one number per stage ({len(stages)})")
            for w in weights:
                check_range("fuse", "weights", w, WEIGHT)
        if method == "wsum" and weights is None:
            raise EngineError("fuse(…): method \"wsum\" needs weights, one per stage")
        self.stages = list(stages)
        self.method, self.k, self.weights, self.norm = method, int(k), weights, norm
        self.depth, self.informative = depth, bool(informative)
        keep_args(self, stages, {"method": (method, "rrf"), "k": (k, fusion.RRF_K),
                                 "weights": (list(weights) if weights is not None else None, None),
                                 "norm": (norm, "minmax"), "depth": (depth, None),
                                 "informative": (bool(informative), False)})
        self.precedence = PRECEDENCE["|"] if len(stages) == 2 and not self.kwargs else 100

    def __str__(self) -> str:
        if self.precedence == PRECEDENCE["|"]:
            return f"{operand(self.stages[0], '|', False)} | {operand(self.stages[1], '|', True)}"
        return super().__str__()

    def children(self) -> Sequence[Stage]:
        return self.stages

    def needs_input(self) -> bool:
        return any(s.needs_input() for s in self.stages)

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.ranking.pipeline.run import evaluate
        parts = [evaluate(s, queries, run, ctx) for s in self.stages]
        out: Run = {}
        for q in queries:
            rankings = [p.get(q.qid, Ranking()) for p in parts]
            if self.informative and not any(fusion.informative(r) for r in rankings):
                out[q.qid] = Ranking()
                continue
            method = "combsum" if self.method == "weighted" else self.method
            fused = fusion.fuse(rankings, method, self.weights, self.norm, self.k, self.depth)
            fields: dict[str, Any] = {}
            for r in reversed(rankings):
                fields.update(r.fields)
            out[q.qid] = Ranking.of(fused, fields)
        return out
