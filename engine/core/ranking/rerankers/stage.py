"""The reranking stage: the first stage's top `depth` hits reordered by a reranker's scores, cut to k.

Candidates are read from the collection itself (`engine.core.ranking.rerankers.candidates`): a text
collection's stored text, an image collection's recorded files. Ties in the reranker's scores keep the first stage's order,
and the scores written are strictly decreasing (`distinct_scores`), whatever the reranker kind: a reader that
re-sorts by score (trec_eval, a client) sees the order chosen here.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from engine.core.ranking.rerankers.base import IMAGE, TEXT, Reranker
from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.io.ranking import Ranking, RankingLike


def as_reranker(rerank: "str | RerankerSpec | Reranker", **options: Any) -> Reranker:
    """A spec (parsed once, with its options, and loaded once per process) or a ready reranker."""
    if isinstance(rerank, Reranker):
        return rerank
    from engine.core.ranking.rerankers.spec import RerankerSpec
    return RerankerSpec.parse(rerank, **options).load()


def check_candidates(spec: "RerankerSpec", kind: str, where: str) -> None:
    """Refuse, before any model loads, a reranker that cannot read these items (`where`: "collection 'x'",
    a file, a task's candidates)."""
    if kind not in (IMAGE, TEXT):
        raise EngineError(f"{where} holds vectors made outside an encoder, with no texts or images for reranker "
                          f"{spec} to read; leave out the reranker")
    if spec.entry.arg == "encoder":
        from engine.core.ranking.rerankers.embed import embed_candidates
        can = embed_candidates(spec.arg)
        if can is None or kind in can:
            return
        if not can:
            raise EngineError(f"reranker {spec} embeds images only and cannot read the text query: give a text or "
                              "text–image encoder (e.g. embed:clip:ViT-B-32:openai)")
    elif kind in spec.entry.candidates:
        return
    if kind == IMAGE:
        raise EngineError(f"{where} holds images; reranker {spec} scores texts only: give one that "
                          "scores (text, image) pairs, e.g. vlm:DIR or embed:clip:ViT-B-32:openai, or leave out the "
                          "reranker")
    raise EngineError(f"{where} holds texts; reranker {spec} scores images only: give a text reranker (llm:, "
                      "llm-list:, cross:, embed:) or leave out the reranker")


def check_readable(spec: "RerankerSpec", query: str, scores: np.ndarray) -> None:
    """Refuse a query none of whose candidates' answers could be read (every score NaN): nothing to order by."""
    if len(scores) and np.isnan(scores).all():
        from engine.core.ranking.rerankers.endpoint import UNREADABLE
        raise EngineError(f"reranker {spec}: none of the {len(scores)} candidates of the query {query[:60]!r} could "
                          f"be scored: {UNREADABLE}")


def order(scores: np.ndarray) -> np.ndarray:
    """Positions best first; equal scores keep their given (first-stage) order."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def distinct_scores(scores: np.ndarray) -> list[float]:
    """Scores already in their final order (best first) made strictly decreasing as a `Ranking` makes them (a
    tie or an inversion nudged to the next float below the previous score), so two candidates never share a
    score and the order the stage chose is the order of the scores. A non-finite score (an unreadable image's
    -inf) becomes one below the lowest finite one: still last, and a number every writer can print."""
    from engine.io.ranking import strictly_below
    scores = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(scores)
    floor = (float(scores[finite].min()) if finite.any() else 0.0) - 1.0
    return strictly_below(np.where(finite, scores, floor))


def rerank_hits(reranker: Reranker, query: str, hits: Sequence[Any], k: int, col: Any) -> list[Any]:
    """The hits reordered by the reranker's scores (which replace theirs), ranks renumbered, the top k kept."""
    from engine.core.ranking.rerankers.candidates import candidate_docs
    if not hits:
        return []
    if col.kind not in reranker.candidates:
        check_candidates(reranker.spec, col.kind, f"collection {col.name!r}")
    scores = reranker.score(query, candidate_docs(col, hits), IMAGE if col.kind == IMAGE else TEXT)
    check_readable(reranker.spec, query, scores)
    best = order(scores)[:k]
    return [replace(hits[int(i)], score=s, rank=r)
            for r, (i, s) in enumerate(zip(best, distinct_scores(scores[best])), 1)]


def reordered(ranking: "RankingLike", scores: np.ndarray, depth: int) -> "Ranking":
    """One query's ranking: its top `depth` by `scores` (one per item of the top, in order), ties in the
    given order, then the rest in their order below them."""
    from engine.io.ranking import Ranking
    ranked = Ranking.of(ranking)
    head = ranked.cut(depth)
    pos = order(scores)
    return head.rescored(pos, distinct_scores(scores[pos])).then(Ranking(ranked.ids[depth:], ranked.scores[depth:],
                                                                         ranked.fields))


def rerank_ranking(reranker: Reranker, query: str, ranking: "RankingLike", docs: Mapping[str, str],
                   depth: int, kind: str = TEXT) -> "Ranking":
    """`reordered` by the reranker's scores (`docs`: id → text, or image file for kind "image"; a missing one
    reads as "")."""
    from engine.io.ranking import Ranking
    head = Ranking.of(ranking).cut(depth)
    scores = reranker.score(query, [docs.get(d, "") for d in head.ids], kind)
    check_readable(reranker.spec, query, scores)
    return reordered(ranking, scores, depth)


def check_rerank(col: Any, rerank: "str | RerankerSpec | Reranker | None", depth: int | None, k: int, text: bool,
                 options: Mapping[str, Any] | None = None) -> int:
    """Candidates the first stage fetches: k without a reranker, else the checked depth (text queries only,
    a reranker that can read this collection's items, options its kind takes)."""
    from engine.core.ranking.rerankers.options import RerankOptions
    from engine.core.ranking.rerankers.registry import check_depth
    from engine.errors import opt
    spec = rerank.spec if isinstance(rerank, Reranker) else rerank
    given = {} if isinstance(rerank, Reranker) else dict(options or {})  # a loaded one was shaped already
    checked = RerankOptions.checked(spec, depth, k, **given)
    if checked.spec is None:
        return k
    if not text:
        raise EngineError(f"{opt('rerank')} reorders the hits of a text query; an image query takes none")
    if not isinstance(rerank, Reranker):
        check_candidates(checked.spec, col.kind, f"collection {col.name!r}")
    return check_depth(depth, k)
