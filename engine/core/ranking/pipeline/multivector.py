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

from engine.core.ranking.pipeline.learned_index import LearnedIndexStage
from engine.core.ranking.pipeline.stage import Context, check_choice, check_range, keep_args
from engine.core.storage.index.multivector import DEFAULT_EXACT, DEFAULT_NPROBE, NPROBE, ROLE, MultiVectorIndex
from engine.errors import EngineError
from engine.io.options import K

DEFAULT_CANDIDATES = 1000
VIAS = ("centroids", "tokens", "fde")
DEFAULT_PROBE = 512  # the probe benchmarks/multivector.py measured above 0.9 recall@10 (docs/models.md)


class MultiVector(LearnedIndexStage):
    """Top k of a collection's multi-vector index by exact MaxSim over the candidates its tokens or its
    encodings propose."""
    name = "multivector"
    role, load, build_flag = ROLE, MultiVectorIndex.load, "--multivector multivector:NAME_OR_DIR"

    def __init__(self, collection: str, k: int = 100, via: str | None = None, candidates: int | None = None,
                 nprobe: int | None = None) -> None:
        super().__init__(collection, k)
        if via is not None:
            check_choice("multivector", "via", via, VIAS)
        if candidates is not None:
            check_range("multivector", "candidates", candidates, K)
        if nprobe is not None:
            check_range("multivector", "nprobe", nprobe, NPROBE)
            if via not in (None, "centroids"):
                raise EngineError(f"multivector(…): nprobe is for via=\"centroids\", not via={via!r}")
        self.asked_via = via
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

    def check(self, ctx: Context) -> None:
        super().check(ctx)
        self.settings(self._index(ctx))

    def search(self, index: MultiVectorIndex, texts, live):
        from engine.core.encoders.multivector import encode_tokens, model_name
        via, candidates = self.settings(index)
        for vectors in encode_tokens(model_name(index.meta["spec"]), texts, query=True):
            yield index.search(vectors, self.k, candidates, live, via, self.nprobe)
