"""Running a pipeline: every stage's output computed once per query set — read from the stage cache where
an earlier run left it — and the rankings written as a TREC run."""
from __future__ import annotations

import os
import time
from typing import Sequence

from engine.core.ranking.pipeline.cache import stage_key
from engine.core.ranking.pipeline.query import Query, queries_digest
from engine.core.ranking.pipeline.stage import Context, Run, Stage
from engine.io.ranking import Ranking
from engine.errors import EngineError


class KeyedRun(dict):
    """A stage's output with the key that names it (the stage, its input's key, generations, queries)."""
    key: str = ""


def _subtree_collections(stage: Stage) -> list[str]:
    names = list(stage.collections())
    for child in stage.children():
        names += _subtree_collections(child)
    return sorted(set(names))


def evaluate(stage: Stage, queries: Sequence[Query], run: Run | None, ctx: Context) -> KeyedRun:
    """One stage's output for the queries, given the rankings so far (None for a first stage)."""
    if "queries" not in ctx.memo:
        ctx.memo["queries"] = queries_digest(queries)
    upstream = run.key if isinstance(run, KeyedRun) else None
    key = _key(stage, upstream, ctx)
    text = str(stage)
    if stage.costly and ctx.cache is not None:
        hit = ctx.cache.get(key)
        if hit is not None:
            ctx.log.append((text, True))
            out = KeyedRun(hit)
            out.key = key
            return out
    stack = ctx.memo.setdefault("timer-stack", [])
    stack.append(0.0)
    t0 = time.perf_counter()
    try:
        result = stage.transform(queries, run, ctx)
    finally:
        elapsed, inner = time.perf_counter() - t0, stack.pop()
        if stack:
            stack[-1] += elapsed
    if stage.costly:
        ctx.timings.setdefault(text, []).append(elapsed - inner)
    out = KeyedRun({q.qid: result.get(q.qid, Ranking()) for q in queries})
    out.key = key
    if stage.costly:
        ctx.log.append((text, False))
        if ctx.cache is not None:
            ctx.cache.put(key, dict(out), text)
    return out


def check_pipeline(stage: Stage, ctx: Context) -> None:
    """Before any model loads: it starts with a first stage, and every collection it reads opens."""
    if stage.needs_input():
        raise EngineError(f"the pipeline starts with a stage that reorders rankings ({stage}); start with a "
                          "first stage such as retrieve(\"NAME\")")
    stage.check(ctx)


def run_pipeline(stage: Stage, queries: Sequence[Query], ctx: Context | None = None) -> Run:
    """qid → ranking for every query, in the queries' order."""
    ctx = ctx or Context()
    seen: set[str] = set()
    for q in queries:
        if q.qid in seen:
            raise EngineError(f"query id {q.qid!r} appears twice; each query needs its own id")
        seen.add(q.qid)
    check_pipeline(stage, ctx)
    if "queries" not in ctx.memo:
        ctx.memo["queries"] = queries_digest(queries)
    _prepare(stage, None, ctx)
    return dict(evaluate(stage, queries, None, ctx))


def _key(stage: Stage, upstream: str | None, ctx: Context) -> str:
    gens = [f"{n}={ctx.generation(n)}" for n in _subtree_collections(stage)]
    return stage_key(str(stage), upstream, gens, ctx.memo["queries"])


def _prepare(stage: Stage, upstream: str | None, ctx: Context) -> str:
    """Walk the pipeline as `evaluate` will, computing each stage's key, and load the models of the stages
    whose output the cache does not hold (a cached reranker is never loaded). Returns the stage's key."""
    key = _key(stage, upstream, ctx)
    if stage.costly and ctx.cache is not None and ctx.cache.get(key) is not None:
        return key
    if stage.name == "then":  # the second step reads the first's output
        _prepare(stage.second, _prepare(stage.first, upstream, ctx), ctx)
        return key
    for child in stage.children():
        _prepare(child, upstream, ctx)
    if not stage.children():
        stage.prepare(ctx)
    return key


def write_pipeline_run(run: Run, out: str | os.PathLike, run_id: str, k: int | None = None) -> int:
    """The rankings as a TREC run (top k of each), written atomically; returns the lines written."""
    from engine.io.runs import write_run
    return write_run(out, {q: (r.cut(k) if k else r) for q, r in run.items()}, run_id)
