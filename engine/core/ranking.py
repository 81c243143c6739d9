"""What a ranking is, and the one way to take the top k of a score array.

A `Ranking` is one system's answer to one query: {docid: score} or (docid, score) pairs. Writers,
fusion and submissions all accept it; `as_pairs` reads either form in its given order.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence, Union

import numpy as np

from engine.errors import EngineError

Ranking = Union[Mapping[str, float], Sequence[tuple[str, float]]]


def as_pairs(ranking: Ranking) -> list[tuple[str, float]]:
    """(docid, score) pairs in the ranking's given order, ids as strings and scores as floats."""
    items = ranking.items() if isinstance(ranking, Mapping) else ranking
    out = []
    for doc, score in items:
        try:
            out.append((str(doc), float(score)))
        except (TypeError, ValueError):
            raise EngineError(f"score {score!r} is not a number (doc {doc!r})") from None
    return out


def top_k(scores: np.ndarray, k: int, exclude: Iterable[int] = ()) -> np.ndarray:
    """Positions of the k highest scores, best first; equal scores keep position order, also at the cut.

    Positions in `exclude`, NaN and -inf are never returned. Linear time in the array (a partition and a
    sort of the k chosen), so it serves a whole catalogue per query.
    """
    s = np.asarray(scores, dtype=np.float64)
    banned = list(exclude)
    if banned or np.isnan(s).any():
        s = np.where(np.isnan(s), -np.inf, s)
        s[banned] = -np.inf
    k = min(int(k), int((~np.isneginf(s)).sum()))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < len(s):
        cut = -np.partition(-s, k - 1)[k - 1]
        above = np.flatnonzero(s > cut)
        chosen = np.concatenate([above, np.flatnonzero(s == cut)[:k - len(above)]])
    else:
        chosen = np.arange(len(s))
    return chosen[np.lexsort((chosen, -s[chosen]))]


def top_k_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """Per row, the column positions of the k highest scores, best first, ties by position."""
    return np.argsort(-np.asarray(scores), axis=1, kind="stable")[:, :k]


def merge_top_k(results: Sequence[tuple[np.ndarray, np.ndarray]], offsets: Sequence[int], k: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The top-k over parts searched apart (shards, groups of lists) from each part's (scores, local rows):
    rows shifted by the part's offset, best first, ties by part order; -1 where fewer."""
    scores = np.concatenate([d for d, _ in results], axis=1).astype(np.float32)
    rows = np.concatenate([np.where(i >= 0, i + off, -1) for (_, i), off in zip(results, offsets)], axis=1)
    scores = np.where(rows >= 0, scores, -np.inf)
    pick = top_k_rows(scores, k)
    out_s, out_r = np.take_along_axis(scores, pick, 1), np.take_along_axis(rows, pick, 1)
    out_r[np.isneginf(out_s)] = -1
    return out_s, out_r
