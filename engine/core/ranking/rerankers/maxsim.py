"""`maxsim:NAME_OR_DIR`: late interaction as a reranker over any first stage's candidates: the query and each
candidate text through a MultiVectorEncoder's query and document sides, scored by MaxSim (the model's own
similarity), so a ColBERT-class model reorders what BM25 or a dense index fetched. A pair's score depends on
the pair alone: pointwise, kept per pair like the others."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.core.ranking.rerankers.base import TEXT, Reranker

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec


class MaxSimReranker(Reranker):
    """MaxSim of the query's token vectors against each candidate's (the model loaded once per process)."""

    candidates = frozenset({TEXT})

    def __init__(self, spec: "RerankerSpec") -> None:
        from engine.core.encoders.multivector import load_multivector_model, model_name
        self.name = model_name(spec.arg, "maxsim")
        model = load_multivector_model(self.name)
        super().__init__(spec, device=str(getattr(model, "device", "cpu")))

    def _score(self, query: str, docs: list[str], kind: str) -> np.ndarray:
        from engine.core.encoders.multivector import encode_tokens, maxsim
        q = encode_tokens(self.name, [query], query=True)[0]
        return maxsim(q, encode_tokens(self.name, docs, query=False))


def maxsim_reranker(spec: "RerankerSpec") -> Reranker:
    return MaxSimReranker(spec)
