"""DSE's candidate reranking stage: each case's fused top candidates reordered by a reranker reading the
case's query against each dataset's whole record (what BM25 and `all` embed)."""
from __future__ import annotations

from typing import Mapping, Sequence

from engine.tasks.dse.data import Case, record_text
from engine.tasks.dse.index import DseIndex


def rerank_cases(index: DseIndex, cases: Mapping[str, Case], queries: Mapping[str, str],
                 rankings: Mapping[str, Sequence[tuple[str, float]]], spec: str, depth: int
                 ) -> dict[str, list[tuple[str, float]]]:
    """{case: ranking} with each case's top `depth` reranked by its query text; a case without one keeps its
    ranking (its examples alone decided it)."""
    from engine.core.rerankers.registry import cached_reranker
    from engine.core.rerankers.stage import rerank_ranking
    reranker = cached_reranker(spec)
    out = {}
    for cid, ranking in rankings.items():
        text = queries.get(cases[cid].query_id, "")
        if not text:
            out[cid] = list(ranking)
            continue
        docs = {d: record_text(index.records[index.pos[d]]) for d, _ in list(ranking)[:depth]}
        out[cid] = rerank_ranking(reranker, text, ranking, docs, depth)
    return out
