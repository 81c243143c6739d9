"""First stages: `retrieve` searches a collection's index (dense, BM25 or hybrid, filtered, optionally
grouped by a metadata field), `score` ranks a whole collection by a query's text or by its example items."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.pipeline.stage import Context, Run, Stage, check_choice, check_range, keep_args
from engine.core.ranking.rerankers.candidates import item_fields
from engine.io.options import K
from engine.io.ranking import Ranking, top_k
from engine.errors import EngineError

MODES = ("dense", "bm25", "hybrid")
FUSIONS = ("weighted", "rrf")
POOLINGS = ("mean", "max", "full")


def _vectors(ctx: Context, col, texts: Sequence[str], pooling: str):
    """Sentence vectors of the texts under a pooling, computed once per encoder in a run."""
    from engine.core.ranking.text_pooling import encode_queries
    key = (col.encoder.text_spec if hasattr(col.encoder, "text_spec") else col.encoder.spec, pooling, tuple(texts))
    if key not in ctx.state.query_vectors:
        ctx.state.query_vectors[key] = encode_queries(col.encoder, list(texts), pooling)
    return ctx.state.query_vectors[key]


class Retrieve(Stage):
    """Top k of a collection for each query's text: `mode` dense, bm25 or hybrid (default: hybrid where the
    collection stores BM25 of its items, else dense), `where` a metadata filter, `fusion` the hybrid's.
    `pooling` (mean, max, full) encodes long queries sentence by sentence as the tasks do; `group` ranks the
    values of a metadata field instead of items (each by its best item among the top `fetch` rows: MaxP,
    e.g. articles from their passages), with the text of each group's first item."""
    name = "retrieve"

    def __init__(self, collection: str, mode: str | None = None, k: int = 100, where: str | None = None,
                 fusion: str = "weighted", pooling: str | None = None, group: str | None = None,
                 fetch: int | None = None) -> None:
        super().__init__()
        if not isinstance(collection, str) or not collection.strip():
            raise EngineError("retrieve(…) needs a collection name first, e.g. retrieve(\"docs\")")
        if mode is not None:
            check_choice("retrieve", "mode", mode, MODES)
        check_range("retrieve", "k", k, K)
        check_choice("retrieve", "fusion", fusion, FUSIONS)
        if pooling is not None:
            check_choice("retrieve", "pooling", pooling, POOLINGS)
        if fetch is not None:
            check_range("retrieve", "fetch", fetch, K)
        if where is not None:
            from engine.core.ranking.filters import parse_where
            parse_where(where)
        if (pooling is not None or group is not None) and mode not in (None, "dense", "bm25"):
            raise EngineError("retrieve(…): pooling and group rank by dense vectors (mode \"dense\") or by a "
                              "BM25 index of the groups (mode \"bm25\")")
        self.collection, self.mode, self.k, self.where, self.fusion = collection, mode, int(k), where, fusion
        self.pooling, self.group, self.fetch = pooling, group, fetch
        keep_args(self, [collection], {"mode": (mode, None), "k": (k, 100), "where": (where, None),
                                       "fusion": (fusion, "weighted"), "pooling": (pooling, None),
                                       "group": (group, None), "fetch": (fetch, None)})

    def collections(self) -> list[str]:
        return [self.collection]

    def check(self, ctx: Context) -> None:
        super().check(ctx)
        col = ctx.collection(self.collection)
        if self.mode == "bm25" and not _own_bm25(col) and "bm25" not in col.stored:
            raise EngineError(f"retrieve(\"{self.collection}\", mode=\"bm25\"): the collection stores no BM25 "
                              f"index; build it with --bm25")
        if self.pooling is None and self.group is None and self.mode != "bm25" or self.mode == "hybrid":
            from engine.core.ranking.hybrid import check_search_mode
            check_search_mode(col, self.mode, self.fusion, self.where, True)

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        col = ctx.collection(self.collection)
        asked = [q for q in queries if q.text.strip()]
        out: Run = {q.qid: Ranking() for q in queries}
        if not asked:
            return out
        texts = [q.text for q in asked]
        if self.mode == "bm25" and not _own_bm25(col):
            from engine.core.ranking.hybrid import bm25_index
            bm25 = bm25_index(col)
            for q in asked:
                out[q.qid] = Ranking.of(bm25.search(q.text, self.k))
            return out
        if self.pooling is not None or self.group is not None:
            for q, ranking in zip(asked, self._pooled(ctx, col, texts)):
                out[q.qid] = ranking
            return out
        from engine.core.ranking.hybrid import search_rows
        scores, rows = search_rows(col, self.k, texts, None, self.mode, self.fusion, self.where)
        for q, hits in zip(asked, col.hits(scores, rows)):
            items = [{"id": h.id, **h.meta} for h in hits]
            out[q.qid] = Ranking([h.id for h in hits], [h.score for h in hits],
                                 dict(zip([h.id for h in hits], item_fields(col, items))))
        return out

    def _pooled(self, ctx: Context, col, texts: Sequence[str]) -> list[Ranking]:
        """Dense MaxP: each query's sentence vectors (or their mean) searched, rows mapped to their key
        (the item's id, or its `group` value), each key kept at its best score."""
        pooling = self.pooling or "full"
        sv = _vectors(ctx, col, texts, pooling)
        vectors, owner = (sv.pooled(), np.arange(sv.n_texts)) if pooling == "mean" else (sv.vectors, sv.owner)
        fetch = self.fetch or (self.k * 3 if self.group else self.k)
        scores, rows = col.search_vectors(vectors, fetch)
        keys = self._keys(ctx, col)
        best: list[dict[str, float]] = [{} for _ in range(sv.n_texts)]
        for q, srow, irow in zip(owner, scores, rows):
            b = best[int(q)]
            for s, i in zip(srow.tolist(), irow.tolist()):
                if i >= 0 and s > b.get(keys[i], -np.inf):
                    b[keys[i]] = s
        firsts = self._group_fields(ctx, col) if self.group else None
        out = []
        for b in best:
            r = Ranking.of(b).cut(self.k)
            if firsts is not None:
                r = Ranking(r.ids, r.scores, {d: firsts[d] for d in r.ids if d in firsts})
            out.append(r)
        return out

    def _keys(self, ctx: Context, col) -> list[str]:
        key = (self.collection, self.group)
        if key not in ctx.state.keys:
            ctx.state.keys[key] = [str(it.get(self.group, "")) for it in col.items] if self.group else col.ids
        return ctx.state.keys[key]

    def _group_fields(self, ctx: Context, col) -> dict[str, dict]:
        key = (self.collection, self.group)
        if key not in ctx.state.group_fields:
            firsts: dict[str, dict] = {}
            items = col.items
            for it, f in zip(items, item_fields(col, items)):
                firsts.setdefault(str(it.get(self.group, "")), f)
            ctx.state.group_fields[key] = firsts
        return ctx.state.group_fields[key]


def _own_bm25(col) -> bool:
    from engine.core.ranking.hybrid import has_bm25
    return has_bm25(col)


class Score(Stage):
    """Every item of a collection scored for each query, the top k kept: `by` the query's text or its
    example items (`examples`, mean or max over them with `agg`), `mode` dense (cosine to the vectors, or to
    the stored array `array`) or bm25 (an example is read as its `fields` joined). The examples themselves
    are never returned; a query that gives no input (no text, no known example) or matches nothing gets
    an empty ranking, so fusion leaves it out."""
    name = "score"

    def __init__(self, collection: str, by: str = "query", mode: str = "dense", array: str | None = None,
                 agg: str = "mean", k: int = 1000, fields: Sequence[str] | None = None) -> None:
        super().__init__()
        if not isinstance(collection, str) or not collection.strip():
            raise EngineError("score(…) needs a collection name first, e.g. score(\"datasets\", by=\"examples\")")
        check_choice("score", "by", by, ("query", "examples"))
        check_choice("score", "mode", mode, ("dense", "bm25"))
        check_choice("score", "agg", agg, ("mean", "max"))
        check_range("score", "k", k, K)
        if fields is not None and (not isinstance(fields, (list, tuple)) or not all(isinstance(f, str) for f in fields)):
            raise EngineError("score(…): fields must be a list of metadata field names")
        self.collection, self.by, self.mode, self.array, self.agg, self.k = collection, by, mode, array, agg, int(k)
        self.fields = list(fields) if fields is not None else None
        keep_args(self, [collection], {"by": (by, "query"), "mode": (mode, "dense"), "array": (array, None),
                                       "agg": (agg, "mean"), "k": (k, 1000), "fields": (self.fields, None)})

    def collections(self) -> list[str]:
        return [self.collection]

    def check(self, ctx: Context) -> None:
        super().check(ctx)
        col = ctx.collection(self.collection)
        if self.array is not None and self.array not in col.stored:
            raise EngineError(f"score(\"{self.collection}\"): the collection stores no array {self.array!r}")
        if self.mode == "bm25" and "bm25" not in col.stored:
            raise EngineError(f"score(\"{self.collection}\", mode=\"bm25\"): the collection stores no BM25 index")

    def _matrix(self, ctx: Context, col) -> np.ndarray:
        key = (self.collection, self.array)
        if key not in ctx.state.matrix:
            m = col.array(self.array) if self.array is not None else col.embeddings
            ctx.state.matrix[key] = np.asarray(m).astype(np.float32)
        return ctx.state.matrix[key]

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        col = ctx.collection(self.collection)
        ids = col.ids
        pos = ctx.positions(self.collection)
        out: Run = {}
        vecs: dict[str, np.ndarray] = {}
        if self.by == "query" and self.mode == "dense":
            asked = [q for q in queries if q.text]
            if asked:
                vecs = dict(zip([q.qid for q in asked], col.encoder.encode_texts([q.text for q in asked])))
        for q in queries:
            ex = [pos[e] for e in q.examples if e in pos]
            s = self._scores(ctx, col, q, ex, vecs.get(q.qid))
            live = col.live_mask()
            if s is not None and live is not None:
                s = np.where(live, s, -np.inf)  # rows a delete marked are never scored
            if s is None or not np.any(np.isfinite(s) & (s != 0)):
                out[q.qid] = Ranking()
                continue
            out[q.qid] = Ranking.of([(ids[i], float(s[i])) for i in top_k(s, self.k, ex)])
        return out

    def _scores(self, ctx: Context, col, q: Query, ex: list[int], vec) -> np.ndarray | None:
        if self.mode == "bm25":
            from engine.core.ranking.hybrid import bm25_index
            bm25 = bm25_index(col)
            if self.by == "query":
                return bm25.scores(q.text) if q.text else None
            if not ex:
                return None
            texts = self._texts(ctx, col)
            return np.mean([bm25.scores(texts[i]) for i in ex], axis=0)
        m = self._matrix(ctx, col)
        if self.by == "query":
            return m @ vec if vec is not None else None
        if not ex:
            return None
        sims = m @ m[ex].T
        return sims.mean(axis=1) if self.agg == "mean" else sims.max(axis=1)

    def _texts(self, ctx: Context, col) -> list[str]:
        key = (self.collection, tuple(self.fields or ()))
        if key not in ctx.state.texts:
            from engine.core.sources import stored_text
            fields = self.fields or col.manifest.get("text_fields")
            ctx.state.texts[key] = [stored_text(it, fields) for it in col.items]
        return ctx.state.texts[key]
