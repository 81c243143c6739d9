"""Which rerankers exist: a spec prefix → the loader that builds it, as the encoders' registry does
(`engine.core.encoders.registry`). A new kind is its own module plus one line here; help, errors and the
docs' table come from this list.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

from engine.errors import EngineError
from engine.io.options import RANGES


@dataclass(frozen=True)
class RerankerEntry:
    prefix: str       # what a spec starts with, before the first ':'
    loader: str       # "module:function", imported on first use, called with the text after "prefix:"
    syntax: str       # how a user writes the spec
    candidates: str   # what it scores a text query against: "text" or "text, image"
    what: str         # one line for the table


RERANKERS: tuple[RerankerEntry, ...] = (
    RerankerEntry("cross", "engine.core.rerankers.cross:cross_reranker", "cross:NAME_OR_DIR", "text",
                  "sentence-transformers CrossEncoder (a Hugging Face id or a local folder): reads query and "
                  "document together; batched, --device, fp16 on CUDA"),
    RerankerEntry("embed", "engine.core.rerankers.embed:embed_reranker", "embed:SPEC", "text, image",
                  "re-score the candidates with a second bi-encoder (any encoder spec, e.g. a larger sbert: or "
                  "a clip: for image collections)"),
)

DEFAULT_DEPTH = 100
MAX_DEPTH = int(RANGES["rerank_depth"].hi)  # declared once, in the option layer


def entry_for(spec: str) -> tuple[RerankerEntry, str]:
    """The registry entry a reranker spec names and the argument after its prefix (checked, no model loads)."""
    prefix, _, arg = (spec or "").strip().partition(":")
    for entry in RERANKERS:
        if prefix.lower() == entry.prefix:
            if not arg.strip():
                raise EngineError(f"reranker spec {spec!r} names no model; write {entry.syntax}")
            return entry, arg.strip()
    raise EngineError(f"unknown reranker spec {spec!r}; use one of {', '.join(e.syntax for e in RERANKERS)}")


def load_reranker(spec: str):
    """The reranker a spec names; bad or unavailable specs raise EngineError with the fix."""
    entry, arg = entry_for(spec)
    module, _, function = entry.loader.partition(":")
    return getattr(importlib.import_module(module), function)(arg)


@functools.lru_cache(maxsize=4)
def cached_reranker(spec: str):
    """One loaded reranker per spec per process (a service, a pipeline's batches)."""
    return load_reranker(spec)


def check_depth(depth: int | None, k: int, option: str = "rerank_depth") -> int:
    """Candidates the first stage fetches for the reranker: at least k, at most MAX_DEPTH."""
    from engine.errors import opt
    if depth is None:
        return max(k, DEFAULT_DEPTH)
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise EngineError(f"{opt(option)} must be a whole number from 1 to {MAX_DEPTH}, not {depth!r}")
    if depth < k:
        raise EngineError(f"{opt(option)} {depth} is below -k {k}: the reranker can only order what the "
                          "first stage fetched; give a depth of at least k")
    return depth


def reranker_help() -> str:
    return "Reranker spec: " + "; ".join(f"{e.syntax} ({e.candidates})" for e in RERANKERS) + "."


def reranker_table() -> tuple[list[str], list[list[str]]]:
    return ["spec", "what", "candidates"], [[f"`{e.syntax}`", e.what, e.candidates] for e in RERANKERS]
