"""First stages: `retrieve` searches a collection's index (dense, BM25 or hybrid, filtered, optionally
grouped by a metadata field), `score` ranks a whole collection by a query's text or by its example items."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.pipeline.stage import Context, Run, Stage, check_choice, check_range, keep_args
from engine.core.ranking.rerankers.candidates import item_fields
from engine.core.ranking.text_pooling import POOLINGS
from engine.io.options import K
from engine.io.ranking import Ranking, top_k
from engine.errors import EngineError

MODES = ("dense", "bm25", "hybrid")
FUSIONS = ("weighted", "rrf")


def _vectors(ctx: Context, col, texts: Sequence[str], pooling: str):
    """Sentence vectors of the texts under a pooling, computed once per encoder and query prompt in a run: the
    query prompt the collection was built with applies to every sentence, as `search_rows` applies it to whole
    queries (a VLM embedder's or e5's query instruction)."""
    from engine.core.encoders.prompts import query_prompted
    from engine.core.ranking.text_pooling import encode_queries
    prompt = (col.manifest.get("prompts") or {}).get("query") or ""
    key = (col.encoder.text_spec if hasattr(col.encoder, "text_spec") else col.encoder.spec, pooling, tuple(texts),
           prompt)
    if key not in ctx.state.query_vectors:
        ctx.state.query_vectors[key] = encode_queries(query_prompted(col.encoder, col.manifest), list(texts), pooling)
    return ctx.state.query_vectors[key]


class Retrieve(Stage):
    """Top k of a collection for each query's text: `mode` dense, bm25 or hybrid (default: hybrid where the
    collection stores BM25 of its items, else dense), `where` a metadata filter, `fusion` the hybrid's.
    `pooling` (mean, max, full, auto) encodes long queries sentence by sentence as the tasks do; `group` ranks the
    values of a metadata field instead of items (each by its best item among the top `fetch` rows: MaxP,
    e.g. articles from their passages), with the text of each group's first item. `options`: `fetch` (the
    rows a group search reads); `texts=False` leaves out each hit's text (or image file), which only a later
    stage reads; `nprobe`, `ef`, `k_factor` override the index's stored operating point for this search
    (`engine search --nprobe …`).

    Queries that carry an image file, an item id or a vector (`Query.by_vector`) are searched by that vector
    (dense, filtered by `where`); every hit carries what a later stage reads (its text or image file) and
    the item's metadata (`meta`), which the search doors answer with."""
    name = "retrieve"

    def __init__(self, collection: str, mode: str | None = None, k: int = 100, where: str | None = None,
                 fusion: str = "weighted", pooling: str | None = None, group: str | None = None,
                 **options: int | float | None) -> None:
        super().__init__()
        if not isinstance(collection, str) or not collection.strip():
            raise EngineError("retrieve(…) needs a collection name first, e.g. retrieve(\"docs\")")
        if mode is not None:
            check_choice("retrieve", "mode", mode, MODES)
        check_range("retrieve", "k", k, K)
        check_choice("retrieve", "fusion", fusion, FUSIONS)
        if pooling is not None:
            check_choice("retrieve", "pooling", pooling, POOLINGS)
        fetch, texts, knobs = options.pop("fetch", None), options.pop("texts", True), options
        if not isinstance(texts, bool):
            raise EngineError(f"retrieve(…): texts must be true or false, not {texts!r}")
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
        self.knobs, self.texts = _knobs(knobs), texts
        keep_args(self, [collection], {"mode": (mode, None), "k": (k, 100), "where": (where, None),
                                       "fusion": (fusion, "weighted"), "pooling": (pooling, None),
                                       "group": (group, None), "fetch": (fetch, None), "texts": (texts, True),
                                       **{name: (v, None) for name, v in knobs.items()}})

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
        col.check_search(self.k, self.knobs)

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        col = ctx.collection(self.collection)
        asked = [q for q in queries if not q.by_vector and q.text.strip()]
        out: Run = {q.qid: Ranking() for q in queries}
        by_vector = [q for q in queries if q.by_vector]
        if by_vector:
            out.update(zip([q.qid for q in by_vector], self._by_vectors(ctx, col, by_vector)))
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
        found = search_rows(col, self.k, texts, None, self.mode, self.fusion, self.where, self.knobs)
        out.update(zip([q.qid for q in asked], _rankings(col, *found, texts=self.texts)))
        return out

    def _by_vectors(self, ctx: Context, col, queries: Sequence[Query]) -> list[Ranking]:
        """Image, item and vector queries: one dense (or filtered) search over their vectors."""
        if self.pooling is not None or self.group is not None:
            raise EngineError(f"{self}: pooling and group rank text queries; an image, id or vector query "
                              "searches the items themselves")
        from engine.core.ranking.hybrid import search_rows
        vectors = np.zeros((len(queries), col.dim), dtype=np.float32)
        images = [n for n, q in enumerate(queries) if q.image is not None]
        if images:
            vectors[images] = col.encode_queries(images=[queries[n].image for n in images],
                                                 batch_size=max(1, len(images)))
        live = col.live_mask()
        for n, q in enumerate(queries):
            if q.item is not None:
                row = ctx.positions(self.collection).get(q.item)
                if row is None or (live is not None and not live[row]):
                    raise EngineError(f"no item {q.item!r} in collection {self.collection!r}")
                vectors[n] = np.asarray(col.embeddings[row], dtype=np.float32)
            elif q.vector is not None:
                if len(q.vector) != col.dim:
                    raise EngineError(f"query vectors are {len(q.vector)}-d, collection {self.collection!r} is "
                                      f"{col.dim}-d")
                vectors[n] = np.asarray(q.vector, dtype=np.float32)
        found = search_rows(col, self.k, None, vectors, self.mode, self.fusion, self.where, self.knobs)
        return _rankings(col, *found, texts=self.texts)

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


def _knobs(knobs: dict):
    """`nprobe`, `ef`, `k_factor` as the index's query-time knobs (None: none given)."""
    unknown = [name for name in knobs if name not in ("nprobe", "ef", "k_factor")]
    if unknown:
        raise EngineError(f"retrieve(): no argument {unknown[0]!r}; it takes collection, mode, k, where, fusion, "
                          "pooling, group, fetch, texts, nprobe, ef, k_factor")
    given = {name: v for name, v in knobs.items() if v is not None}
    for name, v in given.items():
        check_range("retrieve", name, v, 1, None, integer=name != "k_factor")
    if not given:
        return None
    from engine.core.storage.index.faiss_index import SearchKnobs
    return SearchKnobs(**given)


def _rankings(col, scores: np.ndarray, rows: np.ndarray, texts: bool = True) -> list[Ranking]:
    """FAISS's (scores, rows) as rankings whose items carry their metadata and (with `texts`) what later
    stages read."""
    out = []
    for hits in col.hits(scores, rows):
        fields = item_fields(col, [{"id": h.id, **h.meta} for h in hits]) if texts else [{} for _ in hits]
        out.append(Ranking([h.id for h in hits], [h.score for h in hits],
                           {h.id: {**f, "meta": h.meta} for h, f in zip(hits, fields)}))
    return out


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
