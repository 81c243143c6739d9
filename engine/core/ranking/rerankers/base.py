"""The one interface every reranker implements: score one query against a list of candidates."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

TEXT = "text"
IMAGE = "image"


@dataclass
class Reranker:
    """Scores (query text, candidate) pairs; `candidates` says what a candidate is ("text": its text;
    "image": an image file), so a collection whose items it cannot read is refused before any scoring."""

    spec: str
    candidates: frozenset[str]
    score_fn: Callable[[str, Sequence[str], str], np.ndarray]  # (query, candidates, their kind) → scores
    info: dict = field(default_factory=dict)

    def score(self, query: str, docs: Sequence[str], kind: str = TEXT) -> np.ndarray:
        """One float per candidate (texts, or image files for kind "image"), higher is better: the model's
        own scores, unchanged."""
        if len(docs) == 0:
            return np.zeros(0, dtype=np.float64)
        return np.asarray(self.score_fn(query, list(docs), kind), dtype=np.float64).reshape(-1)
