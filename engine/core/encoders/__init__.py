"""Encoders behind one interface (`base.Encoder`), chosen by a spec string stored in manifests; the specs
that exist are listed in `registry`. Importing this package loads no model and no torch."""
from __future__ import annotations

from engine.core.encoders.base import IMAGE, TEXT, Encoder, configure_threads, l2_normalize
from engine.core.encoders.registry import DEFAULT_IMAGE_SPEC, DEFAULT_TEXT_SPEC, load_encoder

__all__ = ["Encoder", "TEXT", "IMAGE", "load_encoder", "l2_normalize", "configure_threads",
           "DEFAULT_TEXT_SPEC", "DEFAULT_IMAGE_SPEC"]
