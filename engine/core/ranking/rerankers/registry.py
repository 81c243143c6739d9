"""Which rerankers exist: a spec prefix → the loader that builds it, as the encoders' registry does
(`engine.core.encoders.registry`). A new kind is its own module plus one line here; help, errors and the
docs' table come from this list.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path

from typing import Any

from engine.errors import EngineError
from engine.io.options import Int


@dataclass(frozen=True)
class RerankerEntry:
    prefix: str       # what a spec starts with, before the first ':'
    loader: str       # "module:function", imported on first use, called with the parsed `RerankerSpec`
    syntax: str       # how a user writes the spec
    candidates: str   # what it scores a text query against: "text", "image" or "text, image"
    what: str         # one line for the table
    options: tuple[str, ...] = ()  # keyword options its loader takes (checked in `engine.core.ranking.rerankers.prompts`)
    arg: str = "model"  # what follows the prefix: "model" (a name or folder), "served" (also a URL#MODEL), "encoder"


RERANKERS: tuple[RerankerEntry, ...] = (
    RerankerEntry("cross", "engine.core.ranking.rerankers.cross:cross_reranker", "cross:NAME_OR_DIR", "text",
                  "sentence-transformers CrossEncoder (a Hugging Face id or a local folder): reads query and "
                  "document together; batched, --device, fp16 on CUDA; on a CPU on onnxruntime (--rerank-dtype "
                  "int8: quantized)", ("dtype",)),
    RerankerEntry("embed", "engine.core.ranking.rerankers.embed:embed_reranker", "embed:SPEC", "text, image",
                  "re-score the candidates with a second bi-encoder (any encoder spec, e.g. a larger sbert: or "
                  "a clip: for image collections)", arg="encoder"),
    RerankerEntry("llm", "engine.core.ranking.rerankers.llm:llm_reranker", "llm:NAME_OR_DIR", "text",
                  "a causal LM read pointwise: log P(yes) − log P(no) after the instruction, query and document "
                  "(Qwen3-Reranker's format or the chat template); http://HOST:PORT/v1#MODEL for a served one",
                  ("template", "instruction", "batch_size", "max_length", "batch_tokens"), "served"),
    RerankerEntry("llm-list", "engine.core.ranking.rerankers.llm_list:llm_list_reranker", "llm-list:NAME_OR_DIR", "text",
                  "a chat LLM ordering 20 candidates at a time (RankGPT's sliding window; --rerank-rounds R: "
                  "grouped voting); http://HOST:PORT/v1#MODEL for a served one",
                  ("instruction", "rounds", "batch_size", "batch_tokens"), "served"),
    RerankerEntry("maxsim", "engine.core.ranking.rerankers.maxsim:maxsim_reranker", "maxsim:NAME_OR_DIR",
                  "text, image",
                  "late interaction: a MultiVectorEncoder (ColBERT, PyLate checkpoints; ColPali/ColQwen2 for page "
                  "images) scores the query's and each candidate's token vectors by MaxSim"),
    RerankerEntry("vlm", "engine.core.ranking.rerankers.vlm:vlm_reranker", "vlm:NAME_OR_DIR", "image",
                  "an image-text-to-text model (Qwen2-VL class) read pointwise: log-odds of \"yes\" for (caption, "
                  "image)", ("instruction", "batch_size"), "model"),
)

DEFAULT_DEPTH = 100
RERANK_DEPTH = Int(1, 10_000)
"""Candidates a reranker orders per query: every --rerank-depth, `engine rerank --depth` and `rerank(depth=)`."""
MAX_DEPTH = int(RERANK_DEPTH.hi)


def entry_for(spec: str) -> tuple[RerankerEntry, str]:
    """The registry entry a reranker spec's text names and the argument after its prefix (checked, no model
    loads): read by `RerankerSpec.parse` alone, once per spec."""
    prefix, _, arg = (spec or "").strip().partition(":")
    for entry in RERANKERS:
        if prefix.lower() == entry.prefix:
            if not arg.strip():
                raise EngineError(f"reranker spec {spec!r} names no model; write {entry.syntax}")
            return entry, arg.strip()
    raise EngineError(f"unknown reranker spec {spec!r}; use one of {', '.join(e.syntax for e in RERANKERS)}")


def check_arg(entry: RerankerEntry, arg: str, spec: str) -> None:
    """A served model's URL names its model after '#'; a path that looks local exists (no model loads)."""
    from engine.core.ranking.rerankers.endpoint import is_served
    if entry.arg == "encoder":
        from engine.core.encoders.registry import entry_for as encoder_entry
        encoder_entry(arg)
        return
    if is_served(arg):
        from urllib.parse import urlsplit
        url, _, model = arg.partition("#")
        if entry.arg != "served":
            raise EngineError(f"reranker spec {spec!r}: {entry.prefix}: loads its model here; give a folder or name")
        try:
            parts = urlsplit(url)
            port, host = parts.port, parts.hostname
        except ValueError:  # a port out of range, an unclosed [IPv6 bracket
            port = host = None
        if not model.strip() or not host or port is None:
            raise EngineError(f"reranker spec {spec!r}: write {entry.prefix}:http://HOST:PORT/v1#MODEL (the "
                              "server's URL, then the model it serves after '#')")
        return
    if arg.startswith((".", "/", "~")) and not Path(arg).expanduser().exists():
        raise EngineError(f"reranker spec {spec!r}: no such folder or file {arg}")


def checked_options(entry: RerankerEntry, /, keywords: bool = False, **options) -> dict:
    """The options that were given (None: not given), each checked against the kind `entry`: one it does not
    take, or a value out of range, is one line naming it (as a command's flag, or with `keywords` as the
    keyword a pipeline's `rerank(…)` takes). Spelling only: nothing is read or loaded."""
    from engine.core.ranking.rerankers.prompts import OPTION_CHECKS
    from engine.errors import opt
    clean = {}
    for name, value in options.items():
        if value is None:
            continue
        cli = name in ("template", "instruction", "rounds", "batch_tokens", "dtype") and not keywords
        label = opt(f"rerank_{name}") if cli else name
        if name not in entry.options:
            takers = [f"{e.prefix}:" for e in RERANKERS if name in e.options]
            if not takers:
                raise EngineError(f"{label}: no reranker takes this option ({entry.prefix}: takes "
                                  f"{', '.join(entry.options) or 'none'})")
            raise EngineError(f"{label} goes with a {' or '.join(takers)} reranker, not {entry.prefix}:")
        clean[name] = OPTION_CHECKS[name](value, label if not cli else "")
    return clean


def options_taken(spec: Any, **options) -> dict:
    """Of `options` (a task's instruction), those the kind of `spec` takes: a task offers its instruction
    to every reranker, and a `cross:` simply has no use for it."""
    return {k: v for k, v in options.items() if k in spec.entry.options}


def build(spec: Any) -> Any:
    """The `Reranker` a parsed `RerankerSpec` names: its kind's loader called with the spec (nothing is parsed again)."""
    module, _, function = spec.entry.loader.partition(":")
    return getattr(importlib.import_module(module), function)(spec)


@functools.lru_cache(maxsize=4)
def cached_loaded(spec: Any, identity: str = "") -> Any:
    """The reranker a parsed `RerankerSpec` names, loaded once per process and `identity` (its model's files:
    `fingerprint.model_key`) — a service, a pipeline's batches."""
    return build(spec)


def check_depth(depth: int | None, k: int, option: str = "rerank_depth") -> int:
    """Candidates the first stage fetches for the reranker: at least k, at most MAX_DEPTH."""
    from engine.errors import opt
    if depth is None:
        return max(k, DEFAULT_DEPTH)
    RERANK_DEPTH.check(option, depth, text=False)
    if depth < k:
        raise EngineError(f"{opt(option)} {depth} is below -k {k}: the reranker can only order what the "
                          "first stage fetched; give a depth of at least k")
    return depth


def reranker_help() -> str:
    served = " or ".join(f"{e.prefix}:" for e in RERANKERS if e.arg == "served")
    return ("Reranker spec: " + "; ".join(f"{e.syntax} ({e.candidates})" for e in RERANKERS) + f". {served} also "
            "take http://HOST:PORT/v1#MODEL (a model an OpenAI-compatible server serves).")


def reranker_table() -> tuple[list[str], list[list[str]]]:
    return ["spec", "what", "candidates"], [[f"`{e.syntax}`", e.what, e.candidates] for e in RERANKERS]
