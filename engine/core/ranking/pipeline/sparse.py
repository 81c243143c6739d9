"""`sparse(collection, k)`: a first stage beside BM25 that ranks a text collection by a learned sparse model
(SPLADE and its kin, a sentence-transformers SparseEncoder): the query through the model's query side, scored
by dot product over the inverted index `engine build --sparse sparse:NAME_OR_DIR` stored (exactly the model's
own similarity, over the rows that share a term with the query). Fuses like any stage:
`sparse("docs") | retrieve("docs", mode="dense")`."""
from __future__ import annotations

from typing import Sequence

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.rerankers.candidates import item_fields
from engine.io.options import K
from engine.core.ranking.pipeline.stage import Context, Run, Stage, check_range, keep_args
from engine.core.storage.index.sparse import ROLE, SparseIndex
from engine.errors import EngineError
from engine.io.ranking import Ranking


class Sparse(Stage):
    """Top k of a collection's sparse index for each query's text (a first stage)."""
    name = "sparse"

    def __init__(self, collection: str, k: int = 100) -> None:
        super().__init__()
        if not isinstance(collection, str) or not collection.strip():
            raise EngineError("sparse(…) needs a collection name first, e.g. sparse(\"docs\")")
        check_range("sparse", "k", k, K)
        self.collection, self.k = collection, int(k)
        keep_args(self, [collection], {"k": (k, 100)})

    def collections(self) -> list[str]:
        return [self.collection]

    def _index(self, ctx: Context) -> SparseIndex:
        return ctx.stored_index(self.collection, ROLE, SparseIndex.load, f'sparse("{self.collection}")', "--sparse sparse:NAME_OR_DIR")

    def check(self, ctx: Context) -> None:
        super().check(ctx)
        self._index(ctx)

    def fingerprint(self, ctx: Context) -> str:
        """The query model's files: a replaced model is never served from the cache (the documents' side is
        the collection's generation)."""
        from engine.core.ranking.rerankers.fingerprint import spec_files
        return spec_files(str(self._index(ctx).meta.get("spec", "")))

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.encoders.sparse import encode_sparse, sparse_model_name
        col = ctx.collection(self.collection)
        index = self._index(ctx)
        out: Run = {q.qid: Ranking() for q in queries}
        asked = [q for q in queries if q.text.strip()]
        if not asked:
            return out
        vectors = encode_sparse(sparse_model_name(index.meta["spec"]), [q.text for q in asked], query=True)
        live = col.live_mask()
        for q, (terms, weights) in zip(asked, vectors):
            rows, scores = index.search(terms, weights, self.k, live)
            hits = col.hits(scores[None, :], rows[None, :])[0]
            items = [{"id": h.id, **h.meta} for h in hits]
            out[q.qid] = Ranking([h.id for h in hits], [h.score for h in hits],
                                 dict(zip([h.id for h in hits], item_fields(col, items))))
        return out
