"""What the reranking stage (`engine.core.ranking.pipeline.rerank`) does to one ranking: its top `depth`
reordered by a reranker's scores, the rest kept below, and what is refused before a model loads. Ties in
the reranker's scores keep the first stage's order, and the scores written are strictly decreasing
(`distinct_scores`), whatever the reranker kind: a reader that re-sorts by score (trec_eval, a client) sees
the order chosen here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.core.ranking.rerankers.base import IMAGE, TEXT
from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.io.ranking import Ranking, RankingLike


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
    elif spec.entry.prefix == "maxsim":
        from engine.core.ranking.rerankers.maxsim import maxsim_candidates
        can = maxsim_candidates(spec.arg)
        if can is None or kind in can:
            return
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


def reordered(ranking: "RankingLike", scores: np.ndarray, depth: int) -> "Ranking":
    """One query's ranking: its top `depth` by `scores` (one per item of the top, in order), ties in the
    given order, then the rest in their order below them."""
    from engine.io.ranking import Ranking
    ranked = Ranking.of(ranking)
    head = ranked.cut(depth)
    pos = order(scores)
    return head.rescored(pos, distinct_scores(scores[pos])).then(Ranking(ranked.ids[depth:], ranked.scores[depth:],
                                                                         ranked.fields))
