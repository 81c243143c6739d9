"""Scores for many queries' candidates at once, through the kept scores (`score_cache`) where there are any:
only the pairs (or, for a listwise kind, the lists) not seen before are scored, and the model is loaded only
then. What could not be read is counted and never kept; a query none of whose answers could be read is
refused (nothing to order it by)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from engine.core.ranking.rerankers.base import Item, Reranker
from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.score_cache import ScoreCache
    from engine.core.ranking.rerankers.spec import RerankerSpec


@dataclass
class Scored:
    """Each item's scores (NaN: an answer that could not be read) and what producing them took."""
    scores: list[np.ndarray] = field(default_factory=list)
    scored: int = 0    # pairs the reranker scored now
    cached: int = 0    # pairs read from the kept scores
    unread: int = 0    # answers that could not be read (pairs, or listwise windows kept in input order)
    asked: int = 0     # answers asked (pairs, or windows)

    def degraded(self, spec: "RerankerSpec") -> str | None:
        """The line that says what could not be read, or None when everything was."""
        if not self.unread:
            return None
        if spec.entry.prefix == "llm-list":
            return (f"{self.unread} of {self.asked} windows of {spec}'s answers could not be read (no candidate "
                    "named): they kept their input order")
        return f"{self.unread} of {self.asked} answers of {spec} could not be read: those candidates were ranked last"


def meter_label(spec: "RerankerSpec") -> str:
    """What a reranking progress meter is called (one per stage: the chunks of a stage count on the same)."""
    return f"reranking ({spec})"


def pair_count(spec: "RerankerSpec", items: Sequence[Item]) -> tuple[int, str]:
    """(units, unit) a reranking of `items` counts: windows for a listwise kind, pairs otherwise."""
    if spec.entry.prefix == "llm-list":
        from engine.core.ranking.rerankers.listwise import window_count
        return sum(window_count(len(d), spec.kwargs.get("rounds")) for _, d, _ in items), "windows"
    return sum(len(d) for _, d, _ in items), "pairs"


def score_items(spec: "RerankerSpec", load: Callable[[], Reranker], items: Sequence[Item],
                cache: "ScoreCache | None" = None) -> Scored:
    """The scores of each (query, candidates, kind); `load` is called only when something must be scored."""
    if spec.entry.prefix == "llm-list":
        return _lists(spec, load, items, cache)
    return _pairs(spec, load, items, cache)


def _pairs(spec: "RerankerSpec", load: Callable[[], Reranker], items: Sequence[Item],
           cache: "ScoreCache | None") -> Scored:
    from engine.core.ranking.rerankers.score_cache import content_key
    out = Scored()
    contents = [[content_key(d, kind) for d in docs] for _, docs, kind in items]
    todo: list[tuple[int, list[int]]] = []   # (item, positions to score)
    for n, ((query, docs, _), keys) in enumerate(zip(items, contents)):
        kept = cache.pairs(query, keys) if cache is not None else {}
        scores = np.full(len(docs), np.nan)
        for i, s in kept.items():
            scores[i] = s
        out.scores.append(scores)
        out.cached += len(kept)
        missing = [i for i in range(len(docs)) if i not in kept]
        if missing:
            todo.append((n, missing))
    from engine.progress import meter
    with meter(meter_label(spec), sum(len(d) for _, d, _ in items), "pairs") as m:
        m.advance(out.cached)
        if todo:
            before, count = m.done, sum(len(missing) for _, missing in todo)
            fresh = load().score_batch([(items[n][0], [items[n][1][i] for i in missing], items[n][2])
                                        for n, missing in todo])
            m.advance(count - (m.done - before))  # what the reranker did not count itself
    if todo:
        new = []
        for (n, missing), scores in zip(todo, fresh):
            out.scores[n][missing] = scores
            out.scored += len(missing)
            out.unread += int(np.isnan(scores).sum())
            new += [(items[n][0], contents[n][i], s) for i, s in zip(missing, scores.tolist())]
        out.asked = out.scored
        if cache is not None:
            cache.put_pairs(new)   # NaN ones left out
    from engine.core.ranking.rerankers.stage import check_readable
    for (query, _, _), scores in zip(items, out.scores):
        check_readable(spec, query, scores)
    return out


def _lists(spec: "RerankerSpec", load: Callable[[], Reranker], items: Sequence[Item],
           cache: "ScoreCache | None") -> Scored:
    """Each query's list read from the kept scores, or ranked: every list not kept goes to the reranker at
    once (its windows of a step batched across the queries). A query none of whose windows named a candidate
    is refused, in query order (the lists before it kept)."""
    from engine.core.ranking.rerankers.listwise import window_count
    from engine.core.ranking.rerankers.score_cache import content_key
    from engine.progress import meter
    out = Scored(scores=[np.zeros(0)] * len(items))
    counts = [window_count(len(docs), spec.kwargs.get("rounds")) for _, docs, _ in items]
    keys = [[content_key(d, kind) for d in docs] for _, docs, kind in items]
    todo = []
    with meter(meter_label(spec), sum(counts), "windows") as m:
        for n, (query, docs, _) in enumerate(items):
            kept = cache.scores_of_list(query, keys[n]) if cache is not None and len(docs) else None
            if kept is not None:
                out.scores[n] = kept
                out.cached += len(docs)
                m.advance(counts[n])
            elif len(docs):
                todo.append(n)
        listed = load().rank([(items[n][0], items[n][1]) for n in todo]) if todo else []
        m.advance(sum(counts) - m.done)  # any window the model skipped
    for n, got in zip(todo, listed):
        if got.windows and got.unread == got.windows:
            raise EngineError(f"reranker {spec}: no answer about the query {items[n][0][:60]!r} named a candidate "
                              f"({got.unread} windows); is the model answering a ranking such as [2] > [1]?")
        out.scores[n] = got.scores
        out.scored += len(items[n][1])
        out.unread += got.unread
        out.asked += got.windows
        if cache is not None and not got.unread:
            cache.put_list(items[n][0], keys[n], got.scores)
    return out
