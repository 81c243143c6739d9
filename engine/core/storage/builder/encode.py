"""Texts through a build's chunked encoder for task pipelines that store more than one vector per record
(`engine dse build`): the same chunks as `engine build`, so `--ray` and resuming a killed run work alike."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.storage.builder.chunks import encode_chunked, encode_local
from engine.core.storage.builder.options import BuildOptions, BuildReport
from engine.core.sources import Item


def encode_texts_chunked(folder: Path, encoder, texts: Sequence[str], o: BuildOptions) -> np.ndarray:
    """(len(texts), dim) float32 embeddings in order, encoded in chunks flushed to `folder/.partial/` (on the Ray
    actor pool when `o.ray` is set: the caller holds the Ray session, `engine.core.cluster.ray_or_here`)."""
    if not texts:
        return np.zeros((0, encoder.dim), np.float32)
    encode = encode_local
    if o.ray is not None:
        from engine.core.storage.builder.ray_encode import encode_on_ray
        encode = encode_on_ray
    items = [Item(str(i), t) for i, t in enumerate(texts)]
    rows, _, _ = encode_chunked(folder, encoder, "text", items, o, BuildReport(), encode)
    return np.asarray(rows)
