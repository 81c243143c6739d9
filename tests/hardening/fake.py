"""A fake encoder for hardening tests: deterministic, model-free, optionally slow (to be killed mid-build)."""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np

from engine.core.encoders.base import Encoder

DIM = 16
CALLS = {"text": 0, "image": 0, "loads": 0}


def _text_fn(texts, batch_size):
    CALLS["text"] += 1
    time.sleep(float(os.environ.get("FAKE_ENCODER_DELAY", "0")))
    return np.stack([np.frombuffer(hashlib.sha256(t.encode()).digest()[:DIM], dtype=np.uint8).astype(np.float32) + 1
                     for t in texts])


def _preprocess(img):
    import torch
    return torch.tensor(np.asarray(img.resize((2, 2))).astype(np.float32).ravel() / 255 + 0.01)


def _image_batch(batch):
    CALLS["image"] += 1
    return batch.numpy()[:, :12].astype(np.float32)


def load(spec: str) -> Encoder:
    """Stands in for `engine.core.encoders.registry.load_encoder`: `fake-image` embeds images, anything else texts."""
    CALLS["loads"] += 1
    if spec.startswith("fake-image") or spec == "conse":
        return Encoder(spec="fake-image", dim=12, modalities=frozenset({"image"}), preprocess=_preprocess,
                       image_batch_fn=_image_batch)
    return Encoder(spec="fake", dim=DIM, modalities=frozenset({"text"}), text_fn=_text_fn,
                   info={"max_seq_length": 256})


def install(monkeypatch=None) -> None:
    """Route every encoder load to `load` (in a test with monkeypatch, or for good in a child process)."""
    from engine.core.encoders import registry
    if monkeypatch is not None:
        monkeypatch.setattr(registry, "load_encoder", load)
        monkeypatch.setattr(registry, "load_text_query_encoder", load)
    else:
        registry.load_encoder = registry.load_text_query_encoder = load
    for k in CALLS:
        CALLS[k] = 0
