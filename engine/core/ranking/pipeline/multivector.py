"""`multivector(collection, k, via, candidates, nprobe)`: late interaction as a first stage. Candidates come
from the query's token vectors (the MultiVectorEncoder's query side), then are ranked by exact MaxSim over
their stored token vectors:
- `via="centroids"` (the default where the index has its inverted file): PLAID/ColBERTv2's candidate
  generation: the rows owning a token in the `nprobe` (default 8) centroids nearest each query token, the
  `candidates` (default 1024) of best centroid MaxSim among them scored exactly;
- `via="tokens"` (the default of indexes built without the inverted file): the rows owning the `candidates`
  (default 512) stored tokens nearest each query token (an exact scan of the token vectors);
- `via="fde"`: the `candidates` (default 1000) rows whose fixed-dimensional encodings (MUVERA) score highest
  against the query's, one matrix–vector product over one vector a row.
Their recall of the exact top 10 is measured in benchmarks/multivector.py (docs/models.md). Fuses like any
stage."""
from __future__ import annotations

from typing import Sequence

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.rerankers.candidates import item_fields
from engine.io.options import K
from engine.core.ranking.pipeline.stage import Context, Run, Stage, check_choice, check_range, keep_args
from engine.core.storage.index.multivector import DEFAULT_EXACT, DEFAULT_NPROBE, NPROBE, ROLE, MultiVectorIndex
from engine.errors import EngineError
from engine.io.ranking import Ranking

DEFAULT_CANDIDATES = 1000
VIAS = ("centroids", "tokens", "fde")
DEFAULT_PROBE = 512  # the probe benchmarks/multivector.py measured above 0.9 recall@10 (docs/models.md)


class MultiVector(Stage):
    """Top k of a collection's multi-vector index by exact MaxSim over the candidates its tokens or its
    encodings propose."""
    name = "multivector"

    def __init__(self, collection: str, k: int = 100, via: str | None = None, candidates: int | None = None,
                 nprobe: int | None = None) -> None:
        super().__init__()
        if not isinstance(collection, str) or not collection.strip():
            raise EngineError("multivector(…) needs a collection name first, e.g. multivector(\"docs\")")
        check_range("multivector", "k", k, K)
        if via is not None:
            check_choice("multivector", "via", via, VIAS)
        if candidates is not None:
            check_range("multivector", "candidates", candidates, K)
        if nprobe is not None:
            check_range("multivector", "nprobe", nprobe, NPROBE)
            if via not in (None, "centroids"):
                raise EngineError(f"multivector(…): nprobe is for via=\"centroids\", not via={via!r}")
        self.collection, self.k, self.asked_via = collection, int(k), via
        self.asked_candidates, self.nprobe = candidates, int(nprobe) if nprobe is not None else DEFAULT_NPROBE
        keep_args(self, [collection], {"k": (k, 100), "via": (via, None), "candidates": (candidates, None),
                                       "nprobe": (nprobe, None)})

    def settings(self, index: MultiVectorIndex) -> tuple[str, int]:
        """(via, candidates): an index with its inverted file defaults to it, an older one to the token scan."""
        via = self.asked_via or ("centroids" if index.ivf is not None else "tokens")
        if via == "centroids" and index.ivf is None:
            raise EngineError(f"multivector(\"{self.collection}\"): via=\"centroids\" needs the inverted file this "
                              "collection's multi-vector index lacks (built before it existed); rebuild it with "
                              "--force --multivector SPEC, or use via=\"tokens\"")
        default = {"centroids": DEFAULT_EXACT, "tokens": DEFAULT_PROBE, "fde": DEFAULT_CANDIDATES}[via]
        return via, int(self.asked_candidates) if self.asked_candidates is not None else default

    def collections(self) -> list[str]:
        return [self.collection]

    def _index(self, ctx: Context) -> MultiVectorIndex:
        return ctx.stored_index(self.collection, ROLE, MultiVectorIndex.load, f'multivector("{self.collection}")', "--multivector multivector:NAME_OR_DIR")

    def check(self, ctx: Context) -> None:
        super().check(ctx)
        self.settings(self._index(ctx))

    def fingerprint(self, ctx: Context) -> str:
        """The query model's files: a replaced model is never served from the cache."""
        from engine.core.ranking.rerankers.fingerprint import spec_files
        return spec_files(str(self._index(ctx).meta.get("spec", "")))

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
        via, candidates = self.settings(index)
        for q, vectors in zip(asked, tokens):
            rows, scores = index.search(vectors, self.k, candidates, live, via, self.nprobe)
            hits = col.hits(scores[None, :], rows[None, :])[0]
            items = [{"id": h.id, **h.meta} for h in hits]
            out[q.qid] = Ranking([h.id for h in hits], [h.score for h in hits],
                                 dict(zip([h.id for h in hits], item_fields(col, items))))
        return out
