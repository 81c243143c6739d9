"""The light text side of `sbert:` specs: the ONNX query encoder of a plain text model (no torch at query time);
None where the whole model must answer (a truncated `#dim=` spec, an image–text model)."""
from __future__ import annotations

from engine.core.encoders.base import IMAGE, Encoder
from engine.core.encoders.sbert import spec_modalities, split_dim


def text_query_encoder(arg: str) -> Encoder | None:
    """The ONNX text side of a plain sentence model, or None for a truncated or an image–text model."""
    if split_dim(arg)[1] is not None or IMAGE in (spec_modalities(arg) or ()):
        return None
    from engine.core.encoders.onnx_text import text_encoder
    return text_encoder(arg)
