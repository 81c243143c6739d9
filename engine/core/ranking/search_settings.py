"""How a collection is searched, beside the query itself: `Collection.search`, `search_many` and
`search_to_run` take these as keywords (`col.search("q", k=5, mode="hybrid")`) or as one object."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from engine.core.storage.index.faiss_index import SearchKnobs
    from engine.core.ranking.rerankers.base import Reranker


@dataclass(frozen=True)
class SearchSettings:
    """`k` hits per query; `knobs` override the stored nprobe / efSearch / k_factor for this search; `mode`
    dense, bm25 or hybrid (default: hybrid where the collection stores BM25) fused by `fusion`; `where` a
    metadata filter (`engine.core.ranking.filters`); `rerank` a reranker spec or object (text queries only) that
    reorders the first stage's top `rerank_depth` hits, loaded with `rerank_options` (e.g. template=,
    instruction=); `batch_size` queries encoded together by `search_many`."""
    k: int = 10
    knobs: "SearchKnobs | None" = None
    mode: str | None = None
    fusion: str = "weighted"
    where: str | None = None
    rerank: "str | Reranker | None" = None
    rerank_depth: int | None = None
    rerank_options: Mapping[str, Any] | None = None
    batch_size: int = 64

    @classmethod
    def of(cls, settings: "SearchSettings | None", options: Mapping[str, Any],
           **defaults: Any) -> "SearchSettings":
        """`settings` (or the defaults) with the keyword `options` a caller gave on top; an unknown keyword is a
        TypeError naming it, as a misspelt keyword argument is."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unexpected search option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        base = settings if settings is not None else cls(**defaults)
        return replace(base, **options) if options else base
