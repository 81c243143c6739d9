"""Encoders behind one interface, chosen by a spec string (the form stored in manifests).

    sbert:NAME_OR_FOLDER     text (default for text collections: sbert:all-MiniLM-L6-v2)
    conse[:top=20,...]       offline image+text bridge (default for image collections)
    clip:ARCH:WEIGHTS        open_clip image+text (WEIGHTS: tag, checkpoint file, or `random`)
    effnet                   image→image, EfficientNet-Lite0 pooled features (1280-d)
"""
from __future__ import annotations

import engine._compat  # noqa: F401  (before anything imports torchvision)
from engine.encoders.base import IMAGE, TEXT, Encoder, l2_normalize
from engine.errors import EngineError

DEFAULT_TEXT_SPEC = "sbert:all-MiniLM-L6-v2"
DEFAULT_IMAGE_SPEC = "conse"
ALIASES = {"minilm": DEFAULT_TEXT_SPEC, "effnet": "effnet:efficientnet-lite0", "efficientnet-lite0": "effnet:efficientnet-lite0"}

__all__ = ["Encoder", "TEXT", "IMAGE", "load_encoder", "l2_normalize", "configure_threads",
           "DEFAULT_TEXT_SPEC", "DEFAULT_IMAGE_SPEC"]


def load_encoder(spec: str) -> Encoder:
    """The encoder a spec names; bad or unavailable specs raise EngineError with the fix."""
    spec = ALIASES.get(spec.strip(), spec.strip())
    kind, _, arg = spec.partition(":")
    kind = kind.lower()
    if kind in ("sbert", "text", "st"):
        from engine.encoders.text import sentence_encoder
        return sentence_encoder(arg or "all-MiniLM-L6-v2")
    if kind == "conse":
        from engine.encoders.conse import conse_encoder
        return conse_encoder(arg)
    if kind in ("clip", "open_clip", "openclip"):
        from engine.encoders.clip import clip_encoder
        return clip_encoder(arg)
    if kind == "effnet":
        if arg not in ("", "efficientnet-lite0"):
            raise EngineError(f"effnet has one model, efficientnet-lite0, not {arg!r}")
        from engine.encoders.efficientnet import efficientnet_encoder
        return efficientnet_encoder()
    raise EngineError(f"unknown model spec {spec!r}; use sbert:NAME, conse, clip:ARCH:WEIGHTS or effnet")


def configure_threads(threads: int | None) -> None:
    """Cap torch's intra-op threads (0 or None: leave torch's default)."""
    if threads:
        import torch
        torch.set_num_threads(int(threads))
