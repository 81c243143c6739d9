"""`maxsim:NAME_OR_DIR`: late interaction as a reranker over any first stage's candidates: the query and each
candidate text through a MultiVectorEncoder's query and document sides, scored by MaxSim (the model's own
similarity), so a ColBERT-class model reorders what BM25 or a dense index fetched."""
from __future__ import annotations

import numpy as np

from engine.core.ranking.rerankers.base import TEXT, Reranker


def maxsim_reranker(arg: str) -> Reranker:
    from engine.core.encoders.multivector import encode_tokens, load_multivector_model, maxsim, model_name
    name = model_name(arg, "maxsim")
    model = load_multivector_model(name)

    def score(query: str, docs: list[str], kind: str) -> np.ndarray:
        q = encode_tokens(name, [query], query=True)[0]
        return maxsim(q, encode_tokens(name, docs, query=False))

    return Reranker(spec=f"maxsim:{name}", candidates=frozenset({TEXT}), score_fn=score,
                    info={"device": str(getattr(model, "device", "cpu"))})
