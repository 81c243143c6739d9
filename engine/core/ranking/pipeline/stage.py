"""The stage base class, its operators and the composites they build.

A stage is a small object: its constructor's arguments are literals (so `str(stage)` is the expression
that builds it again: what pipeline files hold, what `engine pipeline show` prints, and the cache's key),
and `transform(queries, run, ctx)` maps the rankings so far (None for a first stage) to new ones. A
composite (`a >> b`, `a % k`, `a ^ b`, `fuse(a, b, …)` = `a | b`) has children instead and `combine`s their
outputs; the runner (`engine.core.ranking.pipeline.run`) walks the tree, so no stage runs another. The
composites live here, beside the operators that build them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from engine.core.ranking.pipeline.context import Context
from engine.io import fusion
from engine.io.options import DEPTH, WEIGHT, K, Range
from engine.io.ranking import Ranking
from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.core.ranking.pipeline.query import Query

Run = dict[str, Ranking]
"""qid → ranking, in the order of the queries."""


def literal(value: Any) -> str:
    """A constructor argument as pipeline-file text (strings quoted, lists bracketed)."""
    if isinstance(value, str):  # double quotes, single where the text holds only double ones; a JSON string
        if '"' in value and "'" not in value:  # (both kinds) is a Python literal of the same value
            return repr(value)
        import json
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, Stage):
        return str(value)
    return repr(value)


class Stage:
    """One step of a pipeline. Subclasses set `name` (their constructor in the registry) and `args` (the
    constructor's arguments that differ from its defaults, in order), and implement `transform`."""

    name: str = "stage"
    costly: bool = True
    """Whether its output is worth caching (a cutoff or a concatenation is not)."""

    def __init__(self) -> None:
        self.args: list[Any] = []
        self.kwargs: dict[str, Any] = {}

    # -------------------------------------------------------------- what it is
    def __str__(self) -> str:
        parts = [literal(a) for a in self.args] + [f"{k}={literal(v)}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"

    def __repr__(self) -> str:
        return str(self)

    def collections(self) -> list[str]:
        """Names of the collections this stage (not its inputs) reads: their generations key the cache."""
        return []

    def fingerprint(self, ctx: "Context") -> str:
        """The identity of what computes this stage beyond its text (a reranker's model files, a served
        model's URL and name, its template): part of the cache key, so a replaced model is never served from
        the cache. Empty for a stage whose text and collections say everything."""
        return ""

    def children(self) -> Sequence["Stage"]:
        return ()

    def check(self, ctx: Context) -> None:
        """What can be checked of this stage (not its children: the runner visits each) before any model
        loads: collections exist, specs parse."""
        for name in self.collections():
            ctx.collection(name)

    def prepare(self, ctx: Context) -> None:
        """Load what the stage computes with, before any stage runs (a reranker's model: loaded ahead of the
        first stage's query encoder, as `engine search --rerank` does, its torch threads start uncontended).
        Called for the stages whose output the cache does not hold."""

    # -------------------------------------------------------------- what it does
    def transform(self, queries: Sequence["Query"], run: Run | None, ctx: Context) -> Run:
        """A stage without children: the rankings so far (None for a first stage) → its own."""
        raise NotImplementedError

    chained: bool = False
    """A composite whose children run one after the other, each on the output of the one before (`>>`);
    otherwise each child runs on the composite's own input."""

    def combine(self, queries: Sequence["Query"], parts: list[Run], ctx: Context) -> Run:
        """A composite: its children's outputs (in order; of a chained one, the steps that ran) → its own."""
        raise NotImplementedError

    def needs_input(self) -> bool:
        """Whether it reorders a ranking it is given (a first stage makes its own)."""
        return False

    # -------------------------------------------------------------- the operators
    def __rshift__(self, other: "Stage") -> "Then":
        return Then(self, as_stage(other, ">>"))

    def __mod__(self, k: int) -> "Cutoff":
        return Cutoff(self, k)

    def __or__(self, other: "Stage") -> "Fuse":
        return Fuse(self, as_stage(other, "|"))

    def __xor__(self, other: "Stage") -> "Concat":
        return Concat(self, as_stage(other, "^"))


ATOM = 100
PRECEDENCE = {"%": 5, ">>": 4, "^": 3, "|": 2}  # Python's own, so a printed pipeline parses back the same


def operand(stage: Stage, op: str, right: bool) -> str:
    """A child's text inside an operator, bracketed where Python would group it otherwise."""
    mine, theirs = PRECEDENCE[op], getattr(stage, "precedence", ATOM)
    return f"({stage})" if theirs < mine or (right and theirs == mine) else str(stage)


def as_stage(value: Any, op: str) -> Stage:
    if not isinstance(value, Stage):
        raise EngineError(f"`{op}` joins two stages, not a {type(value).__name__}")
    return value


def input_of(stage: Stage, run: Run | None, queries: Sequence["Query"]) -> Run:
    """The rankings a reordering stage works on; one that has none was placed first by mistake."""
    if run is None:
        raise EngineError(f"{stage.name}(…) reorders the rankings of a stage before it; write `first >> "
                          f"{stage.name}(…)`")
    return {q.qid: run.get(q.qid, Ranking()) for q in queries}


def collections_read(stage: Stage) -> list[str]:
    """The names of the collections a pipeline reads anywhere in its tree, sorted."""
    names, todo = set(), [stage]
    while todo:
        s = todo.pop()
        names.update(s.collections())
        todo.extend(s.children())
    return sorted(names)


def check_range(stage: str, option: str, value: Any, declared: Range) -> None:
    """One line naming the stage and keyword when a value is out of the option's declared range."""
    declared.check(option, value, label=f"{stage}(…): {option}", text=False)


def check_choice(stage: str, option: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise EngineError(f"{stage}(…): {option} must be one of {', '.join(choices)}, not {value!r}")


def keep_args(stage: Stage, positional: Sequence[Any], named: Mapping[str, tuple[Any, Any]]) -> None:
    """Record the constructor's arguments for `str(stage)`: positionals as given, named ones unless default."""
    stage.args = list(positional)
    stage.kwargs = {k: v for k, (v, default) in named.items() if v != default}


# ---------------------------------------------------------------- the composites the operators build

class Then(Stage):
    """`a >> b`: b reorders (or replaces) what a returned."""
    name, costly, chained, precedence = "then", False, True, PRECEDENCE[">>"]

    def __init__(self, first: Stage, second: Stage) -> None:
        super().__init__()
        self.first, self.second = first, second

    def __str__(self) -> str:
        return f"{operand(self.first, '>>', False)} >> {operand(self.second, '>>', True)}"

    def children(self) -> Sequence[Stage]:
        return (self.first, self.second)

    def needs_input(self) -> bool:
        return self.first.needs_input()

    def combine(self, queries: Sequence["Query"], parts: list[Run], ctx: Context) -> Run:
        return parts[-1]


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

    def combine(self, queries: Sequence["Query"], parts: list[Run], ctx: Context) -> Run:
        return {q: r.cut(self.k) for q, r in parts[0].items()}


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

    def combine(self, queries: Sequence["Query"], parts: list[Run], ctx: Context) -> Run:
        a, b = parts
        return {q.qid: a.get(q.qid, Ranking()).then(b.get(q.qid, Ranking())) for q in queries}


FUSE_METHODS = ("rrf", "weighted", "combsum", "combmnz", "wsum")


class Fuse(Stage):
    """`fuse(a, b, …)`: several stages' rankings of each query fused into one by the core's fusion
    (`engine.io.fusion`, the code behind `engine fuse`); `a | b` is `fuse(a, b)` with its defaults.
    Reciprocal rank fusion (k=60) by default; `weighted` is CombSUM of min-max normalised scores with
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
        check_choice("fuse", "method", method, FUSE_METHODS)
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
        self.precedence = PRECEDENCE["|"] if len(stages) == 2 and not self.kwargs else ATOM

    def __str__(self) -> str:
        if self.precedence == PRECEDENCE["|"]:
            return f"{operand(self.stages[0], '|', False)} | {operand(self.stages[1], '|', True)}"
        return super().__str__()

    def children(self) -> Sequence[Stage]:
        return self.stages

    def needs_input(self) -> bool:
        return any(s.needs_input() for s in self.stages)

    def combine(self, queries: Sequence["Query"], parts: list[Run], ctx: Context) -> Run:
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
