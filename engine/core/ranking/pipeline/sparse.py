"""`sparse(collection, k)`: a first stage beside BM25 that ranks a text collection by a learned sparse model
(SPLADE and its kin, a sentence-transformers SparseEncoder): the query through the model's query side, scored
by dot product over the inverted index `engine build --sparse sparse:NAME_OR_DIR` stored (exactly the model's
own similarity, over the rows that share a term with the query). Fuses like any stage:
`sparse("docs") | retrieve("docs", mode="dense")`."""
from __future__ import annotations

from engine.core.ranking.pipeline.learned_index import LearnedIndexStage
from engine.core.ranking.pipeline.stage import keep_args
from engine.core.storage.index.sparse import ROLE, SparseIndex


class Sparse(LearnedIndexStage):
    """Top k of a collection's sparse index for each query's text (a first stage)."""
    name = "sparse"
    role, load, build_flag = ROLE, SparseIndex.load, "--sparse sparse:NAME_OR_DIR"

    def __init__(self, collection: str, k: int = 100) -> None:
        super().__init__(collection, k)
        keep_args(self, [collection], {"k": (k, 100)})

    def search(self, index: SparseIndex, texts, live):
        from engine.core.encoders.sparse import encode_sparse, sparse_model_name
        for terms, weights in encode_sparse(sparse_model_name(index.meta["spec"]), texts, query=True):
            yield index.search(terms, weights, self.k, live)
