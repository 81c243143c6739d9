"""The texts of the model-ranking tasks (Million LLMs' questions, ModelRetrieval A's task samples) embedded by the
encoder `engine build` encodes texts with, and that encoder's identity for the caches that remember them.

One construction for every text these tasks embed (`build_encoder`: on the CPU the model's onnxruntime sessions,
one slice of texts per core, longest first, where the model exports; else, and on a GPU, the whole torch model),
so a stored training side, a discovery cache and a new query's rows come from the same runtime, and each cache's
key names that runtime.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.progress import info


def text_encoder(model: str):
    """The encoder `engine build` encodes texts with here (`build_encoder`): on the CPU the model's onnxruntime
    sessions, one slice of texts per core, where it exports; else the whole (torch) model."""
    from engine.core.storage.builder.from_source import build_encoder
    from engine.core.storage.builder.options import BuildOptions
    return build_encoder(model, "text", BuildOptions(model=model))


def embed(texts: Sequence[str], model: str, encoder=None, what: str = "questions") -> np.ndarray:
    """The texts' rows (float32, in order), encoded by `encoder` (default: `text_encoder(model)`) as a build
    encodes texts."""
    from engine.core.storage.builder.chunks import encode_texts
    from engine.core.storage.builder.options import BuildOptions
    encoder = encoder if encoder is not None else text_encoder(model)
    info(f"embedding {len(texts)} {what} with {encoder.spec} ({encoder.info.get('runtime', 'torch')})")
    return encode_texts(encoder, texts, BuildOptions(), what)


def encoder_identity(encoder, model: str) -> list:
    """What computes the embeddings: the spec, the runtime (onnx or torch) and the model's files where the spec
    names local ones (`fingerprint.model_identity`): another model, its files replaced, or the other runtime is
    another key."""
    from engine.core.ranking.rerankers.fingerprint import model_identity
    return [encoder.spec, encoder.info.get("runtime", "torch"), model_identity("embed", model)]
