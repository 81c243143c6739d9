"""`multivector(collection, k, candidates)`: late interaction as a first stage that scales. A query's token
vectors (the MultiVectorEncoder's query side) become one fixed-dimensional encoding; its inner products with
the rows' encodings (one matrix product) propose `candidates` rows, which are then scored by exact MaxSim
over their stored token vectors. The encodings' recall of the exact top 10 is measured in
benchmarks/multivector.py; `candidates` trades it against time. Fuses like any stage."""
from __future__ import annotations

from typing import Sequence

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.pipeline.retrieve import MAX_K, item_fields
from engine.core.ranking.pipeline.stage import Context, Run, Stage, check_range, keep_args
from engine.core.storage.index.multivector import ROLE, MultiVectorIndex
from engine.errors import EngineError
from engine.io.ranking import Ranking

DEFAULT_CANDIDATES = 1000


class MultiVector(Stage):
    """Top k of a collection's multi-vector index by exact MaxSim over the candidates its encodings propose."""
    name = "multivector"

    def __init__(self, collection: str, k: int = 100, candidates: int = DEFAULT_CANDIDATES) -> None:
        super().__init__()
        if not isinstance(collection, str) or not collection.strip():
            raise EngineError("multivector(…) needs a collection name first, e.g. multivector(\"docs\")")
        check_range("multivector", "k", k, 1, MAX_K, integer=True)
        check_range("multivector", "candidates", candidates, 1, MAX_K, integer=True)
        self.collection, self.k, self.candidates = collection, int(k), int(candidates)
        keep_args(self, [collection], {"k": (k, 100), "candidates": (candidates, DEFAULT_CANDIDATES)})

    def collections(self) -> list[str]:
        return [self.collection]

    def _index(self, ctx: Context) -> MultiVectorIndex:
        key = ("multivector-index", self.collection)
        if key not in ctx.memo:
            col = ctx.collection(self.collection)
            if ROLE not in (col.manifest.get("roles") or {}):
                raise EngineError(f"multivector(\"{self.collection}\"): the collection stores no multi-vector "
                                  "index; build it with --multivector multivector:NAME_OR_DIR")
            index = MultiVectorIndex.load(col.file(ROLE))
            index.check_rows(col.ids, f"multivector(\"{self.collection}\")")
            ctx.memo[key] = index
        return ctx.memo[key]

    def check(self, ctx: Context) -> None:
        super().check(ctx)
        self._index(ctx)

    def fingerprint(self, ctx: Context) -> str:
        """The query model's files: a replaced model is never served from the cache."""
        from engine.core.ranking.pipeline.sparse import model_stamp
        return model_stamp(str(self._index(ctx).meta.get("spec", "")))

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.encoders.multivector import encode_tokens, model_name
        col = ctx.collection(self.collection)
        index = self._index(ctx)
        out: Run = {q.qid: Ranking() for q in queries}
        asked = [q for q in queries if q.text.strip()]
        if not asked:
            return out
        tokens = encode_tokens(model_name(index.meta["spec"]), [q.text for q in asked], query=True)
        live = col.live_mask()
        for q, vectors in zip(asked, tokens):
            rows, scores = index.search(vectors, self.k, self.candidates, live)
            hits = col.hits(scores[None, :], rows[None, :])[0]
            items = [{"id": h.id, **h.meta} for h in hits]
            out[q.qid] = Ranking([h.id for h in hits], [h.score for h in hits],
                                 dict(zip([h.id for h in hits], item_fields(col, items))))
        return out
