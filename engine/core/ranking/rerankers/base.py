"""The one interface every reranker implements: score one query against a list of candidates, or many queries
at once, and say what computes the scores (`fingerprint`, known without loading the model).

A pointwise reranker's score of a pair depends on that pair alone (cross, embed, llm, vlm), so its scores can
be kept per pair; a listwise one's (llm-list) depend on the whole list it was shown. A score that could not be
read from a served model's answer is NaN: the caller counts it, says so, and keeps it out of any cache.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec

TEXT = "text"
IMAGE = "image"

Item = tuple[str, Sequence[str], str]
"""(query, candidates, their kind): one query's share of a batch."""


class Reranker:
    """Scores (query text, candidate) pairs; `candidates` says what a candidate is ("text": its text;
    "image": an image file), so a collection whose items it cannot read is refused before any scoring.
    Subclasses implement `_score` (and `_score_batch` where a batch across queries is faster)."""

    candidates: frozenset[str] = frozenset({TEXT})
    pointwise: bool = True
    """Whether a pair's score depends on the pair alone (kept per pair), not on the list it came in."""

    def __init__(self, spec: "RerankerSpec", **info) -> None:
        self.spec = spec
        self.info = info

    def score(self, query: str, docs: Sequence[str], kind: str = TEXT) -> np.ndarray:
        """One float per candidate (texts, or image files for kind "image"), higher is better: the model's
        own scores, unchanged (NaN: a served answer that could not be read)."""
        if len(docs) == 0:
            return np.zeros(0, dtype=np.float64)
        return np.asarray(self._score(query, list(docs), kind), dtype=np.float64).reshape(-1)

    def score_batch(self, items: Sequence[Item]) -> list[np.ndarray]:
        """`score` for each (query, candidates, kind), in order; a kind that can batches across queries."""
        todo = [(q, list(d), k) for q, d, k in items if len(d)]
        done = iter(self._score_batch(todo) if todo else [])
        return [np.asarray(next(done), dtype=np.float64).reshape(-1) if len(d) else np.zeros(0, dtype=np.float64)
                for _, d, _ in items]

    def _score(self, query: str, docs: list[str], kind: str) -> np.ndarray:
        raise NotImplementedError

    def _score_batch(self, items: list[Item]) -> list[np.ndarray]:
        return [self._score(q, list(d), k) for q, d, k in items]

    def unread(self) -> tuple[int, int]:
        """(answers that could not be read, answers asked) so far, for a reranker whose unreadable answers
        are not NaN scores (a listwise window kept in its input order); (0, 0) for the others."""
        return 0, 0

    def fingerprint(self) -> str:
        """What computes the scores (`engine.core.ranking.rerankers.fingerprint`)."""
        from engine.core.ranking.rerankers.fingerprint import fingerprint
        return fingerprint(self.spec)


def split(scores: np.ndarray, items: Sequence[Item]) -> list[np.ndarray]:
    """One flat array of a batch's scores cut back into one array per item."""
    out, at = [], 0
    for _, docs, _ in items:
        out.append(scores[at:at + len(docs)])
        at += len(docs)
    return out
