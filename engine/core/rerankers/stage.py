"""The reranking stage: the first stage's top `depth` hits reordered by a reranker's scores, cut to k.

Candidates are read from the collection itself: a text collection's stored text (`engine.core.sources.
stored_text`), an image collection's recorded files. Ties in the reranker's scores keep the first stage's order.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from engine.core.rerankers.base import IMAGE, TEXT, Reranker
from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.core.ranking import RankingLike


def as_reranker(rerank: "str | Reranker") -> Reranker:
    """A spec (loaded through the registry) or a ready reranker."""
    if isinstance(rerank, Reranker):
        return rerank
    from engine.core.rerankers.registry import load_reranker
    return load_reranker(rerank)


def check_candidates(spec: str, kind: str, name: str) -> None:
    """Refuse, before any model loads, a reranker that cannot read this collection's items."""
    from engine.core.rerankers.registry import entry_for
    entry, _ = entry_for(spec)
    if kind not in entry.candidates:
        raise EngineError(f"collection {name!r} holds images; reranker {spec} scores texts only: give one that "
                          "scores (text, image) pairs, e.g. embed:clip:ViT-B-32:openai, or leave out the reranker")


def candidate_docs(col: Any, hits: Sequence[Any]) -> list[str]:
    """What the reranker reads for each hit: its stored text, or its image file."""
    if col.kind == IMAGE:
        from engine.core.store.stored import IMAGE_FILES
        if IMAGE_FILES not in col.stored:
            raise EngineError(f"collection {col.name!r} records no image files; rebuild it to rerank its images")
        files = col.document(IMAGE_FILES)
        return [str(files.get(h.id, "")) for h in hits]
    from engine.core.sources import stored_text
    fields = col.manifest.get("text_fields")
    return [stored_text(h.meta, fields) for h in hits]


def order(scores: np.ndarray) -> np.ndarray:
    """Positions best first; equal scores keep their given (first-stage) order."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def rerank_hits(reranker: Reranker, query: str, hits: Sequence[Any], k: int, col: Any) -> list[Any]:
    """The hits reordered by the reranker's scores (which replace theirs), ranks renumbered, the top k kept."""
    if not hits:
        return []
    if col.kind not in reranker.candidates:
        check_candidates(reranker.spec, col.kind, col.name)
    scores = reranker.score(query, candidate_docs(col, hits), IMAGE if col.kind == IMAGE else TEXT)
    return [replace(hits[int(i)], score=float(scores[i]), rank=r)
            for r, i in enumerate(order(scores)[:k], 1)]


def rerank_pairs(reranker: Reranker, query: str, candidates: Sequence[tuple[str, str]], k: int
                 ) -> list[tuple[str, float]]:
    """(id, text) candidates in the first stage's order → (id, score) of the top k by the reranker."""
    scores = reranker.score(query, [t for _, t in candidates])
    return [(candidates[int(i)][0], float(scores[i])) for i in order(scores)[:k]]


def rerank_ranking(reranker: Reranker, query: str, ranking: "RankingLike", docs: Mapping[str, str],
                   depth: int) -> list[tuple[str, float]]:
    """One query's ranking: its top `depth` by the reranker's scores (`docs`: id → text; a missing one reads
    as ""), then the rest in their order, scored below them."""
    from engine.core.fusion import ranked
    pairs = ranked(ranking)
    head = rerank_pairs(reranker, query, [(d, docs.get(d, "")) for d, _ in pairs[:depth]], depth)
    floor = min((s for _, s in head), default=0.0)
    return head + [(d, floor - n) for n, (d, _) in enumerate(pairs[depth:], 1)]


def check_rerank(col: Any, rerank: "str | Reranker | None", depth: int | None, k: int, text: bool) -> int:
    """Candidates the first stage fetches: k without a reranker, else the checked depth (text queries only,
    a reranker that can read this collection's items)."""
    from engine.core.rerankers.options import RerankOptions
    from engine.core.rerankers.registry import check_depth
    from engine.errors import opt
    spec = rerank.spec if isinstance(rerank, Reranker) else rerank
    RerankOptions.checked(spec, depth, k)
    if spec is None:
        return k
    if not text:
        raise EngineError(f"{opt('rerank')} reorders the hits of a text query; an image query takes none")
    if isinstance(rerank, str):
        check_candidates(rerank, col.kind, col.name)
    return check_depth(depth, k)
