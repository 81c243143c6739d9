"""Running a pipeline: the stage tree compiled once into a plan — each node its stage, its cache key, the
cache's entry for it and its children, every stage checked on the way — then the models of the stages the
plan needs loaded, then the plan evaluated; every costly stage's output is cached unless it fell short."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

from engine.core.ranking.pipeline.cache import stage_key
from engine.core.ranking.pipeline.context import StageRecord
from engine.core.ranking.pipeline.query import Query, queries_digest
from engine.core.ranking.pipeline.stage import Context, Run, Stage
from engine.io.ranking import Ranking
from engine.errors import EngineError


@dataclass
class Node:
    """One stage of a compiled pipeline."""
    stage: Stage
    children: list["Node"]
    key: str = ""
    """Its output's cache key ("" when the run has no cache)."""
    hit: Run | None = None
    """The cache's entry for the key, covering the queries (None: it is computed)."""
    needed: bool = True
    """Whether the run reads its output (not when a stage above or after it is cached)."""
    text: str = field(default="", repr=False)

    @property
    def cached(self) -> bool:
        return self.hit is not None

    def nodes(self) -> list["Node"]:
        """This node and those below it, children first."""
        return [n for c in self.children for n in c.nodes()] + [self]


class Output(NamedTuple):
    run: Run | None  # None: the input of a first stage
    degraded: bool   # it, or something it read, fell short: never cached


def compile_plan(stage: Stage, ctx: Context, queries: Sequence[Query] | None = None) -> Node:
    """The plan of `stage`: every stage checked (before any model loads); with queries and a cache, each
    node's key and the cache's entry for it, and which nodes the run needs."""
    digest = None
    if queries is not None and ctx.cache is not None:  # where models compute, and in what precision, is part
        from engine.core.encoders.device import precision  # of every stage's identity (≈1e-3 apart)
        digest = f"{queries_digest(queries)} {precision()}"
    qids = [q.qid for q in queries] if digest is not None else []
    root = _compile(stage, None, ctx, digest)
    _mark(root, True, ctx, qids)
    return root


def _compile(stage: Stage, upstream: str | None, ctx: Context, digest: str | None) -> Node:
    """The node of `stage` checked, and its key computed (with a cache) from its input's `upstream` key."""
    stage.check(ctx)
    children: list[Node] = []
    given = upstream
    for child in stage.children():
        node = _compile(child, given, ctx, digest)
        children.append(node)
        if stage.chained:  # the next step reads this one's output
            given = node.key
    node = Node(stage, children)
    if digest is not None and ctx.cache is not None:
        node.text = str(stage)
        gens = [f"{n}={ctx.generation(n)}" for n in sorted(set(stage.collections()))]
        node.key = stage_key(node.text, stage.fingerprint(ctx), upstream, [c.key for c in children], gens, digest)
    return node


def _wants_input(node: Node) -> bool:
    """Whether computing the node reads the rankings it is given."""
    if node.cached:
        return False
    if not node.children:
        return node.stage.needs_input()
    if node.stage.chained:  # the first step reads them, if every later step reads the one before
        return all(_wants_input(c) for c in node.children)
    return any(_wants_input(c) for c in node.children)


def _mark(node: Node, needed: bool, ctx: Context, qids: list[str]) -> None:
    """Whether the run needs each node, from the top: a needed costly node is looked up in the cache, and what
    lies below a cached one (or before a step that does not read it) is not needed, nor looked up."""
    node.needed = needed
    if needed and node.key and node.stage.costly and ctx.cache is not None:
        node.hit = ctx.cache.get(node.key, qids)
    below = needed and not node.cached
    if node.stage.chained:
        for child in reversed(node.children):
            _mark(child, below, ctx, qids)
            below = below and _wants_input(child)
    else:
        for child in node.children:
            _mark(child, below, ctx, qids)


def prepare_plan(plan: Node, ctx: Context) -> None:
    """Load what the needed stages compute with before any stage runs (a cached reranker is never loaded)."""
    for node in plan.nodes():
        if node.needed and not node.cached:
            node.stage.prepare(ctx)


def evaluate_plan(node: Node, queries: Sequence[Query], given: Output, ctx: Context) -> Output:
    """The node's output for the queries, given the rankings so far (an empty run for a first stage)."""
    stage = node.stage
    if node.hit is not None:
        ctx.log.append(StageRecord(node.text, True))
        return Output(node.hit, False)
    ctx.counts.pop(id(stage), None)
    ctx.degraded.pop(id(stage), None)
    if node.children:
        parts: list[Run] = []
        inputs, tainted = given, False
        for child in node.children:
            if child.needed:
                out = evaluate_plan(child, queries, inputs, ctx)
                parts.append(out.run)
                tainted = tainted or out.degraded
                if stage.chained:  # the next step reads this one's output
                    inputs = out
        if stage.chained:
            tainted = inputs.degraded
        t0, c0 = time.perf_counter(), time.process_time()
        result = stage.combine(queries, parts, ctx)
    else:
        t0, c0 = time.perf_counter(), time.process_time()
        result = stage.transform(queries, given.run, ctx)
        tainted = given.degraded and stage.needs_input()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    run = {q.qid: result.get(q.qid, Ranking()) for q in queries}
    why = ctx.degraded.get(id(stage), [])
    if why:
        from engine.progress import warn
        warn(f"{node.text or stage}: {'; '.join(why)}; its output is not cached")
    if stage.costly:
        text = node.text or str(stage)
        ctx.log.append(StageRecord(text, False, seconds, dict(ctx.counts.get(id(stage), {})), list(why), cpu))
        if ctx.cache is not None and node.key and not why and not tainted:
            ctx.cache.put(node.key, run, text)
    return Output(run, tainted or bool(why))


def check_pipeline(stage: Stage, ctx: Context) -> None:
    """Before any model loads: it starts with a first stage, and every stage checks (its collections open,
    its specs parse)."""
    _check_first(stage)
    compile_plan(stage, ctx)


def _check_first(stage: Stage) -> None:
    if stage.needs_input():
        raise EngineError(f"the pipeline starts with a stage that reorders rankings ({stage}); start with a "
                          "first stage such as retrieve(\"NAME\")")


def run_pipeline(stage: Stage, queries: Sequence[Query], ctx: Context | None = None) -> Run:
    """qid → ranking for every query, in the queries' order."""
    ctx = ctx or Context()
    seen: set[str] = set()
    for q in queries:
        if q.qid in seen:
            raise EngineError(f"query id {q.qid!r} appears twice; each query needs its own id")
        seen.add(q.qid)
    _check_first(stage)
    plan = compile_plan(stage, ctx, queries)
    prepare_plan(plan, ctx)
    return evaluate_plan(plan, queries, Output(None, False), ctx).run or {}


def write_pipeline_run(run: Run, out: str | os.PathLike, run_id: str, k: int | None = None) -> int:
    """The rankings as a TREC run (top k of each), written atomically; returns the lines written."""
    from engine.io.runs import write_run
    return write_run(out, {q: (r.cut(k) if k else r) for q, r in run.items()}, run_id)
