"""Query and document prompts (instructions) of instruction-aware text encoders.

e5, bge, gte-Qwen, nomic and Qwen3-Embedding models were trained with a prefix on queries and/or documents
and lose much of their quality without it. A collection stores the prompts it was built with in its manifest
(`prompts`), so `engine search`, the service and the ONNX query path apply the query prompt untold.
Precedence: the `--query-prompt`/`--doc-prompt` given (an empty one switches a preset off) > the model's own
configured prompts (sentence-transformers `prompts` "query"/"document") > the preset its name matches.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Mapping

from engine.errors import EngineError, opt

WEB_QUERY = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: "
# (pattern over the model name, query prompt, document prompt): the model cards' own recommendations
PRESETS: tuple[tuple[str, str, str], ...] = (
    (r"qwen3-embedding", WEB_QUERY.rstrip(" "), ""),
    (r"gte-qwen", WEB_QUERY, ""),
    (r"multilingual-e5-.*instruct", WEB_QUERY, ""),
    (r"(^|[/_-])e5-", "query: ", "passage: "),
    (r"bge-.*-en(-v1\.5)?$|bge-.*-zh(-v1\.5)?$", "Represent this sentence for searching relevant passages: ", ""),
    (r"nomic-embed-text", "search_query: ", "search_document: "),
    (r"mxbai-embed", "Represent this sentence for searching relevant passages: ", ""),
)
MAX_PROMPT_CHARS = 1000


def preset_for(model_name: str) -> tuple[str, str] | None:
    """(query, document) prompts of the family the model name belongs to, or None."""
    name = model_name.strip().lower()
    for pattern, query, doc in PRESETS:
        if re.search(pattern, name):
            return query, doc
    return None


def check_prompt(value: str | None, option: str) -> None:
    if value is not None and (len(value) > MAX_PROMPT_CHARS or "\0" in value):
        raise EngineError(f"{opt(option)} must be text of at most {MAX_PROMPT_CHARS} characters without NUL bytes")


def resolve_prompts(encoder: Any, query_prompt: str | None, doc_prompt: str | None) -> dict[str, str]:
    """The prompts a build stores: given ones first, then the model's own configured prompts, then its
    family's preset; {} for a model that takes none (or a non-sbert encoder given none)."""
    check_prompt(query_prompt, "query_prompt")
    check_prompt(doc_prompt, "doc_prompt")
    own = {k: v for k, v in (encoder.info.get("prompts") or {}).items() if v}
    preset = preset_for(encoder.spec.partition(":")[2]) if encoder.spec.startswith("sbert:") else None
    query = query_prompt if query_prompt is not None else own.get("query", preset[0] if preset else "")
    doc = doc_prompt if doc_prompt is not None else own.get("document", own.get("passage", preset[1] if preset
                                                                                  else ""))
    return {k: v for k, v in (("query", query), ("doc", doc)) if v}


def prompted(encoder: Any, prompt: str | None) -> Any:
    """The encoder with `prompt` applied to every text: the model's own `encode(prompt=...)` where it has one
    (sentence-transformers), else the prompt prefixed (the ONNX query path: the same tokens)."""
    if not prompt or encoder.text_fn is None:
        return encoder
    prompt_fn, info = encoder.info.get("prompt_fn"), {**encoder.info, "prompt": prompt}  # (a Ray actor reapplies it)
    if prompt_fn is not None:
        return replace(encoder, info=info, text_fn=lambda texts, batch_size: prompt_fn(texts, batch_size, prompt))
    base = encoder.text_fn
    return replace(encoder, info=info, text_fn=lambda texts, batch_size: base([prompt + t for t in texts],
                                                                              batch_size))


def query_prompted(encoder: Any, manifest: Mapping[str, Any]) -> Any:
    """The encoder as a collection's text queries need it: with the query prompt it was built with."""
    return prompted(encoder, (manifest.get("prompts") or {}).get("query"))
