"""The stage base class and what a stage runs in.

A stage is a small object: its constructor's arguments are literals (so `str(stage)` is the expression
that builds it again: what pipeline files hold, what `engine pipeline show` prints, and the cache's key),
and `transform(queries, run, ctx)` maps the rankings so far (None for a first stage) to new ones.
Operators build the composites of `engine.core.ranking.pipeline.ops`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from engine.io.ranking import Ranking
from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.core.ranking.pipeline.cache import StageCache
    from engine.core.ranking.pipeline.query import Query

Run = dict[str, Ranking]
"""qid → ranking, in the order of the queries."""


@dataclass
class Context:
    """Where a pipeline runs: the collections' root, the stage cache (None: no cache), the collections
    opened so far (each opened once per run) and a log of each costly stage: (stage text, read from cache)."""
    root: str | os.PathLike | None = None
    cache: "StageCache | None" = None
    opened: dict[str, Any] = field(default_factory=dict)
    log: list[tuple[str, bool]] = field(default_factory=list)
    memo: dict = field(default_factory=dict)
    counts: dict[int, dict[str, int]] = field(default_factory=dict)
    """What each stage reported of its own work (`note`), by the stage's id."""
    degraded: dict[int, list[str]] = field(default_factory=dict)
    """Why a stage's output fell short (`degrade`), by the stage's id."""
    timings: dict[str, list[float]] = field(default_factory=dict)
    """Seconds each costly stage computed (its own time, without the stages it called), per run."""
    """What stages of one run share: query vectors per encoder, a collection's item keys."""

    def note(self, stage: "Stage", **counts: int) -> None:
        """Counts a stage reports about its own work in this run (`pairs_scored`, `pairs_cached`), added up."""
        mine = self.counts.setdefault(id(stage), {})
        for k, v in counts.items():
            mine[k] = mine.get(k, 0) + int(v)

    def degrade(self, stage: "Stage", why: str) -> None:
        """The stage's output is not what it promises (a listwise window kept in its input order, an answer
        that could not be read, a fallback): it is said, and never cached as if it had succeeded."""
        self.degraded.setdefault(id(stage), []).append(why)

    def collection(self, name: str):
        """The collection `name` under the root; `a/b` is the collection b inside the folder a (a task's
        index, e.g. `eventa/images`)."""
        if name not in self.opened:
            from engine.core.storage.searchable import SearchableCollection
            from engine.core.storage.store.stored import DEFAULT_ROOT
            root = Path(self.root if self.root is not None else DEFAULT_ROOT)
            parts = name.rstrip("/").split("/")
            if name.startswith(("/", "\\")) or any(p in ("", ".", "..") or "\\" in p or ":" in p for p in parts):
                # a pipeline file (perhaps one a service was handed) names collections under the root only
                raise EngineError(f"collection {name!r}: a name under the collections' root (name or "
                                  "folder/name), without '..', '.', drive or absolute parts")
            parent, _, leaf = name.rstrip("/").rpartition("/")
            from engine.core.storage.store.stored import collection_path
            for part in parts[:-1]:
                collection_path(part)   # a folder name too long is refused, not an OSError
            self.opened[name] = SearchableCollection.open(leaf, root / parent if parent else root)
        return self.opened[name]

    def positions(self, name: str) -> dict[str, int]:
        """Item id → row of the collection `name`, built once per run (every stage that maps ids to rows
        shares it)."""
        key = ("positions", name)
        if key not in self.memo:
            self.memo[key] = {d: i for i, d in enumerate(self.collection(name).ids)}
        return self.memo[key]

    def generation(self, name: str) -> str:
        """What identifies the collection's current contents (a rebuilt collection has another)."""
        m = self.collection(name).manifest
        return f"{m.get('generation', '')}:{m.get('updated', m.get('created', ''))}"


def literal(value: Any) -> str:
    """A constructor argument as pipeline-file text (strings quoted, lists bracketed)."""
    if isinstance(value, str):
        return repr(value).replace("'", '"') if '"' not in value else repr(value)
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
        """What can be checked before any model loads (collections exist, specs parse)."""
        for name in self.collections():
            ctx.collection(name)
        for child in self.children():
            child.check(ctx)

    def prepare(self, ctx: Context) -> None:
        """Load what the stage computes with, before any stage runs (a reranker's model: loaded ahead of the
        first stage's query encoder, as `engine search --rerank` does, its torch threads start uncontended).
        Called for the stages whose output the cache does not hold."""

    # -------------------------------------------------------------- what it does
    def transform(self, queries: Sequence["Query"], run: Run | None, ctx: Context) -> Run:
        raise NotImplementedError

    def needs_input(self) -> bool:
        """Whether it reorders a ranking it is given (a first stage makes its own)."""
        return False

    # The operators `>>`, `%`, `|` and `^` are attached by `engine.core.ranking.pipeline.ops` (imported with the
    # package), so this module, which every stage imports, imports none of them.


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


def check_range(stage: str, option: str, value: Any, lo: float, hi: float | None = None,
                integer: bool = False) -> None:
    """One line naming the stage and argument when a value is out of its range."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float) if not integer else int)
    if ok:
        ok = value >= lo and (hi is None or value <= hi)
    if not ok:
        what = "a whole number" if integer else "a number"
        bound = f"from {lo:g} to {hi:g}" if hi is not None else f"of at least {lo:g}"
        raise EngineError(f"{stage}(…): {option} must be {what} {bound}, not {value!r}")


def check_choice(stage: str, option: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise EngineError(f"{stage}(…): {option} must be one of {', '.join(choices)}, not {value!r}")


def keep_args(stage: Stage, positional: Sequence[Any], named: Mapping[str, tuple[Any, Any]]) -> None:
    """Record the constructor's arguments for `str(stage)`: positionals as given, named ones unless default."""
    stage.args = list(positional)
    stage.kwargs = {k: v for k, (v, default) in named.items() if v != default}
