"""EVENTA's article reranking stage (as the 2025 winner did it): each caption's top fused articles reordered by a
reranker reading the article's own stored text (its first passage: title and opening)."""
from __future__ import annotations

from typing import Any, Sequence

from engine.errors import EngineError

Ranked = list[tuple[str, float]]


def article_texts(index: Any) -> dict[str, str]:
    """Article id → the text of its first passage, from the passage collection's stored text."""
    cached = getattr(index, "_article_texts", None)
    if cached is not None:
        return cached
    from engine.core.sources import STORED_TEXT
    out: dict[str, str] = {}
    for item in index.passages.items:
        if STORED_TEXT not in item:
            raise EngineError(f"the EVENTA index in {index.folder} stores no passage text (built before reranking "
                              "existed); rebuild it with `engine eventa build --force` to rerank articles")
        out.setdefault(item["article"], item[STORED_TEXT])
    index._article_texts = out
    return out


def rerank_articles(index: Any, texts: Sequence[str], fused: list[Ranked],
                    params: Any) -> list[Ranked]:
    """Per caption: the top `rerank_depth` fused articles by the reranker's scores, the rest below in their
    order. A caption with no informative articles keeps none (the image stage decides)."""
    from engine.core.rerankers.registry import cached_reranker
    from engine.core.rerankers.stage import rerank_ranking
    if not any(fused):
        return fused
    reranker, docs = cached_reranker(params.rerank), article_texts(index)
    return [rerank_ranking(reranker, text, arts, docs, params.rerank_depth) if arts else arts
            for text, arts in zip(texts, fused)]
