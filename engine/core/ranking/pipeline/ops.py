"""The operators' stages, one small class each: `a >> b` (Then), `a % k` (Cutoff), `a ^ b` (Concat);
`a | b` is `fuse(a, b)` (engine.core.ranking.pipeline.fuse). This module attaches the operators to `Stage`."""
from __future__ import annotations

from typing import Sequence

from engine.core.ranking.pipeline.fuse import Fuse
from engine.core.ranking.pipeline.query import Query
from engine.io.options import K
from engine.core.ranking.pipeline.stage import PRECEDENCE, Context, Run, Stage, as_stage, check_range, operand


class Then(Stage):
    """`a >> b`: b reorders (or replaces) what a returned."""
    name, costly, precedence = "then", False, PRECEDENCE[">>"]

    def __init__(self, first: Stage, second: Stage) -> None:
        super().__init__()
        self.first, self.second = first, second

    def __str__(self) -> str:
        return f"{operand(self.first, '>>', False)} >> {operand(self.second, '>>', True)}"

    def children(self) -> Sequence[Stage]:
        return (self.first, self.second)

    def needs_input(self) -> bool:
        return self.first.needs_input()

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.ranking.pipeline.run import evaluate
        return evaluate(self.second, queries, evaluate(self.first, queries, run, ctx), ctx)


class Cutoff(Stage):
    """`a % k`: the top k of each of a's rankings."""
    name, costly, precedence = "cutoff", False, PRECEDENCE["%"]

    def __init__(self, stage: Stage, k: int) -> None:
        super().__init__()
        check_range("cutoff", "k", k, K)
        self.stage, self.k = stage, int(k)

    def __str__(self) -> str:
        return f"{operand(self.stage, '%', False)} % {self.k}"

    def children(self) -> Sequence[Stage]:
        return (self.stage,)

    def needs_input(self) -> bool:
        return self.stage.needs_input()

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.ranking.pipeline.run import evaluate
        return {q: r.cut(self.k) for q, r in evaluate(self.stage, queries, run, ctx).items()}


class Concat(Stage):
    """`a ^ b`: a's ranking, then b's items that a lacks, below it in b's order (PyTerrier's `^`)."""
    name, costly, precedence = "concat", False, PRECEDENCE["^"]

    def __init__(self, first: Stage, second: Stage) -> None:
        super().__init__()
        self.first, self.second = first, second

    def __str__(self) -> str:
        return f"{operand(self.first, '^', False)} ^ {operand(self.second, '^', True)}"

    def children(self) -> Sequence[Stage]:
        return (self.first, self.second)

    def needs_input(self) -> bool:
        return self.first.needs_input() or self.second.needs_input()

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.ranking.pipeline.run import evaluate
        a = evaluate(self.first, queries, run, ctx)
        b = evaluate(self.second, queries, run, ctx)
        from engine.io.ranking import Ranking
        return {q.qid: a.get(q.qid, Ranking()).then(b.get(q.qid, Ranking())) for q in queries}


def prefixes(stage: Stage) -> list[Stage]:
    """The pipelines that stop after each step of the `>>` chain (and the cutoffs on it): what `--stages`
    scores, so a table shows what each step adds."""
    if isinstance(stage, Then):
        return prefixes(stage.first) + [stage]
    if isinstance(stage, Cutoff) and isinstance(stage.stage, Then):
        return prefixes(stage.stage)[:-1] + [stage]
    return [stage]


Stage.__rshift__ = lambda self, other: Then(self, as_stage(other, ">>"))  # type: ignore[method-assign]
Stage.__mod__ = lambda self, k: Cutoff(self, k)  # type: ignore[method-assign,operator]
Stage.__or__ = lambda self, other: Fuse(self, as_stage(other, "|"))  # type: ignore[method-assign]
Stage.__xor__ = lambda self, other: Concat(self, as_stage(other, "^"))  # type: ignore[method-assign]
