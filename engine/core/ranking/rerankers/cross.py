"""Cross-encoders: sentence-transformers `CrossEncoder` reads query and document together, so it orders a short
candidate list far better than a bi-encoder's dot product, at one forward pass per pair."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from typing import TYPE_CHECKING

from engine.core.ranking.rerankers.base import Item, Reranker, split
from engine.errors import EngineError, opt

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec

BATCH_SIZE = 32


@functools.lru_cache(maxsize=2)
def load_cross_encoder(name: str, device: str, max_length: int | None = None, identity: str = ""):
    """One loaded CrossEncoder per name, device, max length and `identity` (`fingerprint.model_key`: a model replaced
    on disk is loaded again) per process."""
    from engine.core.encoders.hub import cache_only, out_of_reach, unreachable_hint
    if why := out_of_reach(name):
        raise EngineError(f"cross-encoder {name!r} could not be loaded ({why}). Without a network, give a local "
                          f"folder ({opt('rerank')} cross:/path/to/model)")
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import CrossEncoder
    local = Path(name).exists()
    try:
        return cap_positions(CrossEncoder(name, device=device, max_length=max_length,
                                          local_files_only=cache_only(name) or None))
    except Exception as exc:
        if local:
            raise EngineError(f"cross-encoder folder {name} could not be loaded: {str(exc)[:200]}") from None
        why = unreachable_hint(name) or f"{type(exc).__name__}: {str(exc)[:200]}"
        raise EngineError(f"cross-encoder {name!r} could not be loaded ({why}). Without a network, give a local "
                          f"folder ({opt('rerank')} cross:/path/to/model)") from None


def model_positions(config) -> int | None:
    """Tokens the model's position table holds (RoBERTa-style tables start after the padding index)."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions <= 0:
        return None
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert", "longformer"):
        positions -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    return positions


def cap_positions(model):
    """A CrossEncoder whose max length (its own, else its tokenizer's) is at most what the model's position
    table holds: a tokenizer that allows 512 tokens over a 128-position model would index past the table."""
    most = model_positions(model.model.config)
    length = getattr(model, "max_length", None) or getattr(model.tokenizer, "model_max_length", None)
    if most is not None and (length is None or length > most):
        model.max_length = most
    return model


PROGRESS_BATCHES = 8
"""Batches given to the model in one call between two progress counts."""


def relevance(model, pairs: list[tuple[str, str]], batch_size: int) -> np.ndarray:
    """The model's raw logit for each (query, document) pair (float64): `CrossEncoder.predict` with an identity
    activation. Its default sigmoid maps large logits to exactly 0.0 or 1.0 in float32, so candidates would tie
    and fall back to the first stage's order; the logit keeps the model's own order (sigmoid is monotone)."""
    if not hasattr(model, "predict"):  # the ONNX scorer (`cross_onnx.OnnxCross`)
        return model(pairs, batch_size)
    import torch

    from engine.progress import advance
    parts, step = [], batch_size * PROGRESS_BATCHES
    for at in range(0, len(pairs), step):  # a few batches at a time: a progress meter sees them done
        part = np.asarray(model.predict(pairs[at:at + step], batch_size=batch_size,
                                        activation_fn=torch.nn.Identity(), apply_softmax=False,
                                        convert_to_numpy=True, show_progress_bar=False), dtype=np.float64)
        parts.append(part if part.ndim == 1 else part[:, -1])  # a 2-label model: the "relevant" logit
        advance(len(pairs[at:at + step]))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)


class CrossReranker(Reranker):
    """`cross:NAME_OR_DIR`; scores are the model's raw logits (no activation), batched, fp16 autocast on CUDA;
    on a CPU on onnxruntime where it can be exported (`cross_onnx`), float32 or (option `dtype`) int8.
    A batch across queries is one list of pairs (the model's batches fill across query boundaries)."""

    def __init__(self, spec: "RerankerSpec") -> None:
        from engine.core.encoders.device import on_cpu, resolve_device
        from engine.core.ranking.rerankers.cross_onnx import onnx_cross, runtime
        from engine.core.ranking.rerankers.fingerprint import model_key
        options = spec.kwargs
        identity, max_length, dtype = model_key(spec), options.get("max_length"), options.get("dtype", "float32")
        where = runtime(identity, max_length, dtype, spec.arg)  # int8 on torch: refused before anything loads
        device = "cpu" if on_cpu() else resolve_device()  # a CPU is known without importing torch
        load = lambda: load_cross_encoder(spec.arg, device, max_length, identity)  # noqa: E731
        onnx = None
        if where == "onnx":
            onnx = onnx_cross(spec.arg, identity, max_length, load, dtype)
            if onnx is None:  # its export failed just now: int8 is refused, float32 goes on on torch
                runtime(identity, max_length, dtype, spec.arg)
        self.model = onnx if onnx is not None else load()
        self.batch_size = options.get("batch_size", BATCH_SIZE)
        super().__init__(spec, device=device, runtime="torch" if onnx is None else "onnx", dtype=dtype,
                         max_length=onnx.config["max_length"] if onnx is not None else
                         getattr(self.model, "max_length", None))

    def _score(self, query: str, docs: list[str], kind: str) -> np.ndarray:
        return self._score_batch([(query, docs, kind)])[0]

    def _score_batch(self, items: list[Item]) -> list[np.ndarray]:
        pairs = [(q, d) for q, docs, _ in items for d in docs]
        if self.info["runtime"] == "onnx":
            return split(relevance(self.model, pairs, self.batch_size), items)
        from engine.core.encoders.device import autocast
        with autocast(self.info["device"]):
            scores = relevance(self.model, pairs, self.batch_size)
        return split(scores, items)


def cross_reranker(spec: "RerankerSpec") -> Reranker:
    return CrossReranker(spec)
