"""A second bi-encoder as a reranker: re-embed only the top candidates with a larger (slower) model than the
collection's, or score an image collection's candidates with a text–image model."""
from __future__ import annotations

import numpy as np

from engine.core.ranking.rerankers.base import IMAGE, TEXT, Reranker
from engine.errors import EngineError


def embed_candidates(spec: str) -> frozenset[str] | None:
    """What `embed:SPEC` can score, read from the encoder registry without loading it: a text–image encoder
    (clip:, conse) texts and images, a text one texts, an image-only one nothing (it cannot embed the query);
    None where only loading tells (an adapted: folder)."""
    from engine.core.encoders.registry import entry_for
    modalities = entry_for(spec)[0].modalities
    if "↔" in modalities:
        return frozenset({TEXT, IMAGE})
    if modalities.startswith("text"):
        return frozenset({TEXT})
    if modalities.startswith("image"):
        return frozenset()
    return None


def embed_reranker(spec: str) -> Reranker:
    """`embed:SPEC`: cosine of the query and each candidate under encoder SPEC (texts, or image files when
    the encoder embeds images and text; an unreadable image scores -inf)."""
    from engine.core.encoders.registry import load_encoder
    encoder = load_encoder(spec)
    if TEXT not in encoder.modalities:
        raise EngineError(f"reranker embed:{spec} cannot embed a text query; give a text or text–image encoder")

    def score(query: str, docs: list[str], kind: str) -> np.ndarray:
        q = encoder.encode_texts([query])[0]
        if kind != IMAGE:
            return encoder.encode_texts(docs) @ q
        res = encoder.encode_images(docs)
        out = np.full(len(docs), -np.inf)
        if res.ok:
            out[np.asarray(res.ok, dtype=int)] = res.embeddings @ q
        return out

    return Reranker(spec=f"embed:{encoder.spec}", candidates=frozenset(m for m in (TEXT, IMAGE)
                                                                        if m in encoder.modalities),
                    score_fn=score, info={"device": encoder.device})
