"""A second bi-encoder as a reranker: re-embed only the top candidates with a larger (slower) model than the
collection's, or score an image collection's candidates with a text–image model."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.core.ranking.rerankers.base import IMAGE, TEXT, Item, Reranker

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec
from engine.errors import EngineError


def embed_candidates(spec: str) -> frozenset[str] | None:
    """What `embed:SPEC` can score, read from the encoder registry without loading it (`modalities_of`: an
    sbert: model's own files say whether it embeds images): a text–image encoder texts and images, a text one
    texts, an image-only one nothing (it cannot embed the query); None where the registry cannot tell."""
    from engine.core.encoders.registry import modalities_of
    try:
        modalities = modalities_of(spec)
    except Exception:  # noqa: BLE001  a wrapped spec whose folder is unreadable: loading tells (and says why)
        return None
    if "text" not in modalities:
        return frozenset() if modalities else None
    return frozenset({TEXT, IMAGE}) if "image" in modalities else frozenset({TEXT})


class EmbedReranker(Reranker):
    """`embed:SPEC`: cosine of the query and each candidate under encoder SPEC (texts, or image files when
    the encoder embeds images and text; an unreadable image scores -inf). A batch embeds its queries at once.
    A text-only encoder runs on its light text side where it has one (sbert: on onnxruntime on a CPU, the
    embeddings within 1e-4 of torch's), the same the collection's text queries use."""

    def __init__(self, spec: "RerankerSpec") -> None:
        from engine.core.encoders.registry import load_encoder, load_text_query_encoder
        # a text-only encoder scores texts alone: its light text side (ONNX on a CPU: no torch) where it has one
        text_only = embed_candidates(spec.arg) == frozenset({TEXT})
        self.encoder = load_text_query_encoder(spec.arg) if text_only else load_encoder(spec.arg)
        if TEXT not in self.encoder.modalities:
            raise EngineError(f"reranker {spec} cannot embed a text query; give a text or text–image encoder")
        self.candidates = frozenset(m for m in (TEXT, IMAGE) if m in self.encoder.modalities)
        super().__init__(spec, device=self.encoder.device, runtime=self.encoder.info.get("runtime", "torch"))

    def _score(self, query: str, docs: list[str], kind: str) -> np.ndarray:
        return self._score_batch([(query, docs, kind)])[0]

    def _score_batch(self, items: list[Item]) -> list[np.ndarray]:
        queries = self.encoder.encode_texts([q for q, _, _ in items])
        return [self._against(q, list(docs), kind) for q, (_, docs, kind) in zip(queries, items)]

    def _against(self, q: np.ndarray, docs: list[str], kind: str) -> np.ndarray:
        if kind != IMAGE:
            return self.encoder.encode_texts(docs) @ q
        res = self.encoder.encode_images(docs)
        out = np.full(len(docs), -np.inf)
        if res.ok:
            out[np.asarray(res.ok, dtype=int)] = res.embeddings @ q
        return out


def embed_reranker(spec: "RerankerSpec") -> Reranker:
    return EmbedReranker(spec)
