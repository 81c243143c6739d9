"""The operators' stages, one small class each: `a >> b` (Then), `a % k` (Cutoff), `a ^ b` (Concat).
`a | b` is `fuse(a, b)` (engine.core.pipeline.fuse)."""
from __future__ import annotations

from typing import Sequence

from engine.core.pipeline.query import Query
from engine.core.pipeline.stage import Context, Run, Stage, check_range

ATOM = 100
PRECEDENCE = {"%": 5, ">>": 4, "^": 3, "|": 2}  # Python's own, so a printed pipeline parses back the same


def operand(stage: Stage, op: str, right: bool) -> str:
    """A child's text inside an operator, bracketed where Python would group it otherwise."""
    mine, theirs = PRECEDENCE[op], getattr(stage, "precedence", ATOM)
    return f"({stage})" if theirs < mine or (right and theirs == mine) else str(stage)


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
        from engine.core.pipeline.run import evaluate
        return evaluate(self.second, queries, evaluate(self.first, queries, run, ctx), ctx)


class Cutoff(Stage):
    """`a % k`: the top k of each of a's rankings."""
    name, costly, precedence = "cutoff", False, PRECEDENCE["%"]

    def __init__(self, stage: Stage, k: int) -> None:
        super().__init__()
        check_range("cutoff", "k", k, 1, 10**6, integer=True)
        self.stage, self.k = stage, int(k)

    def __str__(self) -> str:
        return f"{operand(self.stage, '%', False)} % {self.k}"

    def children(self) -> Sequence[Stage]:
        return (self.stage,)

    def needs_input(self) -> bool:
        return self.stage.needs_input()

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.pipeline.run import evaluate
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
        from engine.core.pipeline.run import evaluate
        a = evaluate(self.first, queries, run, ctx)
        b = evaluate(self.second, queries, run, ctx)
        from engine.core.ranking import Ranking
        return {q.qid: a.get(q.qid, Ranking()).then(b.get(q.qid, Ranking())) for q in queries}
