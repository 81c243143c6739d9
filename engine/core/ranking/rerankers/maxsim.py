"""`maxsim:NAME_OR_DIR`: late interaction as a reranker over any first stage's candidates: the query and each
candidate through a MultiVectorEncoder's query and document sides, scored by MaxSim (the model's own
similarity), so a ColBERT-class model reorders what BM25 or a dense index fetched, and a page retriever
(ColPali, ColQwen2) an image collection's candidates, read from their stored files. A pair's score depends on
the pair alone: pointwise, kept per pair like the others."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.core.ranking.rerankers.base import IMAGE, TEXT, Reranker

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec


def maxsim_candidates(arg: str) -> frozenset[str] | None:
    """What `maxsim:NAME_OR_DIR` can score, read from the model's files (no model loads): texts, and images for
    a model whose modalities include them; None where its files are not here."""
    from engine.core.encoders.multivector import model_modalities, model_name
    known = model_modalities(model_name(arg, "maxsim"))
    return None if known is None else frozenset(m for m in (TEXT, IMAGE) if m in known)


class MaxSimReranker(Reranker):
    """MaxSim of the query's token vectors against each candidate's (the model loaded once per process); an
    image candidate that cannot be read scores -inf."""

    def __init__(self, spec: "RerankerSpec") -> None:
        from engine.core.encoders.multivector import load_multivector_model, model_name
        self.name = model_name(spec.arg, "maxsim")
        model = load_multivector_model(self.name)
        self.candidates = frozenset(m for m in (TEXT, IMAGE) if m in (getattr(model, "modalities", None) or [TEXT]))
        super().__init__(spec, device=str(getattr(model, "device", "cpu")))

    def _score(self, query: str, docs: list[str], kind: str) -> np.ndarray:
        from engine.core.encoders.multivector import encode_image_tokens, encode_tokens, maxsim
        q = encode_tokens(self.name, [query], query=True)[0]
        if kind != IMAGE:
            return maxsim(q, encode_tokens(self.name, docs, query=False))
        tokens = encode_image_tokens(self.name, docs, unreadable_ok=True)
        readable = [n for n, t in enumerate(tokens) if t is not None]
        out = np.full(len(docs), -np.inf)
        out[readable] = maxsim(q, [tokens[n] for n in readable])
        return out


def maxsim_reranker(spec: "RerankerSpec") -> Reranker:
    return MaxSimReranker(spec)
