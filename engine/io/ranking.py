"""What a ranking is, and the one way to take the top k of a score array.

A `Ranking` is one system's answer to one query: ids best first with strictly decreasing scores, plus the
per-item fields a later stage needs (its text, image file, parent id). Every stage of a pipeline
(`engine.core.ranking.pipeline`) takes and returns rankings; writers, fusion and submissions accept a `Ranking`
or the plain forms a user hands in ({docid: score} or (docid, score) pairs: `RankingLike`), which
`as_pairs` reads in their given order.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Iterator, Mapping, Sequence, Union

import numpy as np

from engine.errors import EngineError


class Ranking:
    """One query's ranked items: `ids` best first, `scores` strictly decreasing, `fields` per item.

    Built with `Ranking.of(pairs)`, which orders by score (ties keep the given order, a repeated id keeps its
    best score) and nudges tied scores apart by the smallest float step, so the order a ranking holds is the
    order every writer and scorer reads back (trec_eval sorts by score). `fields` maps an item id to a dict
    of what a later stage reads (``text``, ``image``, ``parent``); items without any are left out of it.
    """

    __slots__ = ("ids", "scores", "fields")

    def __init__(self, ids: Sequence[str] = (), scores: Sequence[float] = (),
                 fields: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.ids: tuple[str, ...] = tuple(str(i) for i in ids)
        self.scores: tuple[float, ...] = tuple(strictly_below(scores))
        if len(self.ids) != len(self.scores):
            raise EngineError(f"a ranking needs one score per id ({len(self.ids)} ids, {len(self.scores)} scores)")
        self.fields: dict[str, dict[str, Any]] = {d: dict(f) for d, f in (fields or {}).items() if f}

    @classmethod
    def of(cls, ranking: "RankingLike", fields: Mapping[str, Mapping[str, Any]] | None = None) -> "Ranking":
        """Any ranking form, ordered by score (ties in the given order), a repeated id kept once at its best."""
        if isinstance(ranking, Ranking) and fields is None:
            return ranking
        best: dict[str, float] = {}
        for doc, score in as_pairs(ranking):
            if doc not in best or score > best[doc]:
                best[doc] = score
        pairs = sorted(best.items(), key=lambda kv: -kv[1])  # sorted() is stable
        if fields is None and isinstance(ranking, Ranking):
            fields = ranking.fields
        return cls([d for d, _ in pairs], [s for _, s in pairs], fields)

    @classmethod
    def in_order(cls, ids: Sequence[str], fields: Mapping[str, Mapping[str, Any]] | None = None,
                 start: float = 0.0) -> "Ranking":
        """Ids in the given order with scores start, start - 1, …: a ranking that carries order alone."""
        return cls(ids, [start - n for n in range(len(ids))], fields)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[tuple[str, float]]:
        return iter(zip(self.ids, self.scores))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ranking) and self.ids == other.ids and self.scores == other.scores

    def __repr__(self) -> str:
        head = ", ".join(f"{d}:{s:.4g}" for d, s in list(self)[:5])
        return f"Ranking([{head}{', …' if len(self) > 5 else ''}], n={len(self)})"

    def pairs(self) -> list[tuple[str, float]]:
        return list(zip(self.ids, self.scores))

    def field(self, doc: str, name: str, default: Any = None) -> Any:
        return self.fields.get(doc, {}).get(name, default)

    def cut(self, k: int) -> "Ranking":
        """The top k."""
        return Ranking(self.ids[:k], self.scores[:k], {d: self.fields[d] for d in self.ids[:k] if d in self.fields})

    def then(self, other: "RankingLike", k: int | None = None) -> "Ranking":
        """These items, then `other`'s items not among them in `other`'s order, scored below the last of these
        (each one step lower), up to k items: the one way a ranking is filled from another."""
        other = Ranking.of(other)
        ids, scores = list(self.ids[:k]), list(self.scores[:k])
        fields = {d: self.fields[d] for d in ids if d in self.fields}
        seen = set(ids)
        floor = scores[-1] if scores else 0.0
        for doc in other.ids:
            if k is not None and len(ids) >= k:
                break
            if doc not in seen:
                seen.add(doc)
                floor -= 1.0
                ids.append(doc)
                scores.append(floor)
                if doc in other.fields:
                    fields[doc] = other.fields[doc]
        return Ranking(ids, scores, fields)

    def rescored(self, order: Sequence[int], scores: Sequence[float]) -> "Ranking":
        """Items at positions `order` with new `scores` (best first), fields kept."""
        ids = [self.ids[i] for i in order]
        return Ranking(ids, scores, {d: self.fields[d] for d in ids if d in self.fields})

    def to_json(self) -> dict:
        return {"ids": list(self.ids), "scores": list(self.scores), "fields": self.fields}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Ranking":
        return cls(data["ids"], data["scores"], data.get("fields"))


def strictly_below(scores: Iterable[float]) -> list[float]:
    """Scores as given, each tie or inversion moved just below the one before it (the next float down)."""
    out: list[float] = []
    for s in scores:
        try:
            v = float(s)
        except (TypeError, ValueError):
            raise EngineError(f"score {s!r} is not a number") from None
        if math.isnan(v):
            raise EngineError("a score is NaN; a ranking needs numbers")
        if out and v >= out[-1]:
            v = math.nextafter(out[-1], -math.inf)
        out.append(v)
    return out


RankingLike = Union[Ranking, Mapping[str, float], Sequence[tuple[str, float]]]


def as_pairs(ranking: RankingLike) -> list[tuple[str, float]]:
    """(docid, score) pairs in the ranking's given order, ids as strings and scores as floats."""
    if isinstance(ranking, Ranking):
        return ranking.pairs()
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
