"""Which stages exist: a constructor name → the class that builds it, as the encoders' and rerankers'
registries do. A new stage is its own class plus one line here; `engine pipeline stages`, the pipeline-file
parser and the docs' table read this list."""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

from engine.errors import EngineError


@dataclass(frozen=True)
class StageEntry:
    name: str      # the constructor a pipeline writes
    cls: str       # "module:Class", imported on first use
    what: str      # one line for the table


STAGES: tuple[StageEntry, ...] = (
    StageEntry("retrieve", "engine.core.ranking.pipeline.retrieve:Retrieve",
               "top k of a collection's index: dense, bm25 or hybrid, filtered, pooled or grouped (first stage)"),
    StageEntry("sparse", "engine.core.ranking.pipeline.sparse:Sparse",
               "top k of a collection's learned sparse index (build --sparse sparse:NAME_OR_DIR): SPLADE-style "
               "weights, dot product (first stage)"),
    StageEntry("multivector", "engine.core.ranking.pipeline.multivector:MultiVector",
               "top k of a collection's multi-vector index (build --multivector multivector:NAME_OR_DIR): "
               "candidates by each query token's nearest centroids (PLAID), nearest tokens or MUVERA "
               "encodings, then exact MaxSim "
               "(first stage)"),
    StageEntry("score", "engine.core.ranking.pipeline.retrieve:Score",
               "every item scored by the query's text or its example items, top k (first stage)"),
    StageEntry("run", "engine.core.ranking.pipeline.runfile:RunFile",
               "a TREC run read from a file, each document's text from a table (first stage)"),
    StageEntry("rerank", "engine.core.ranking.pipeline.rerank:Rerank",
               "the top depth reordered by a reranker spec (cross:, embed:, …)"),
    StageEntry("fuse", "engine.core.ranking.pipeline.stage:Fuse",
               "two or more stages fused: rrf, weighted, combsum, combmnz, wsum (`a | b` is rrf)"),
    StageEntry("expand", "engine.core.ranking.pipeline.expand:Expand",
               "ranked parents → their children, parent by parent, with caps"),
    StageEntry("similarity", "engine.core.ranking.pipeline.expand:Similarity",
               "candidates re-scored by the query's similarity to their vectors, fused with their score"),
    StageEntry("cutoff", "engine.core.ranking.pipeline.stage:Cutoff", "the top k (`a % k`)"),
)


def entry(name: str) -> StageEntry:
    for e in STAGES:
        if e.name == name:
            return e
    raise EngineError(f"unknown stage {name!r}; stages are {', '.join(e.name for e in STAGES)}")


def stage_class(name: str) -> type:
    module, _, cls = entry(name).cls.partition(":")
    return getattr(importlib.import_module(module), cls)


def signature(name: str) -> str:
    """The constructor as a user writes it, with its defaults."""
    params = []
    for p in inspect.signature(stage_class(name).__init__).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.VAR_POSITIONAL:
            params.append(f"*{p.name}")
        elif p.kind is p.VAR_KEYWORD:
            params.append(f"**{p.name}")
        elif p.default is p.empty:
            params.append(p.name)
        else:
            params.append(f"{p.name}={p.default!r}".replace("'", '"'))
    return f"{name}({', '.join(params)})"


def stage_table() -> tuple[list[str], list[list[str]]]:
    return ["stage", "what"], [[f"`{signature(e.name)}`", e.what] for e in STAGES]
