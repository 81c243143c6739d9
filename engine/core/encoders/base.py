"""The one interface every encoder implements, so collections never care which model is behind them."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

TEXT = "text"
IMAGE = "image"


def cache_dir() -> Path:
    """Where encoders cache what they compute once (conse's class vectors, ONNX exports): $ENGINE_CACHE."""
    return Path(os.environ.get("ENGINE_CACHE", Path.home() / ".cache" / "engine"))


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length as float32 (all-zero rows stay zero): inner product = cosine."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", under="ignore"):
        norms = np.linalg.norm(x, axis=1, keepdims=True)
    odd = ~((norms > 1e-18) & (norms < 1e18)).ravel()  # near float32's ends (~1e30 squares to inf, ~1e-30 to 0)
    out = (x / np.where(odd[:, None], 1.0, norms)).astype(np.float32, copy=False)
    if odd.any():  # those rows in float64, which holds their squares; an all-zero row stays zero
        wide = x[odd].astype(np.float64)
        wide_norms = np.linalg.norm(wide, axis=1, keepdims=True)
        out[odd] = wide / np.where(wide_norms > 0, wide_norms, 1.0)
    return out


@dataclass
class Encoder:
    """An embedding model. `spec` is canonical: stored in manifests, it loads the same model again.

    `modalities` says what it can embed; a collection can be queried in any of them, since
    they share one space (a text-only model cannot take an image query).
    """

    spec: str
    dim: int
    modalities: frozenset[str]
    text_fn: Callable[[Sequence[str], int], np.ndarray] | None = None
    preprocess: Callable | None = None  # PIL.Image (RGB) -> tensor, run in decode workers
    image_batch_fn: Callable | None = None  # stacked tensor -> np.ndarray
    info: dict = field(default_factory=dict)
    text_spec: str | None = None  # the model behind its text side (conse: its sentence model), to share query vectors

    def __post_init__(self) -> None:
        if self.text_spec is None and self.text_fn is not None:
            self.text_spec = self.spec

    @property
    def device(self) -> str:
        return str(self.info.get("device", "cpu"))

    def encode_texts(self, texts: Sequence[str], batch_size: int | str = 64) -> np.ndarray:
        """L2-normalized float32 rows, one per text (`batch_size` "auto": the device's size)."""
        from engine.core.encoders.device import batch_size_for
        batch_size = batch_size_for(batch_size, "text", self.device)
        from engine.errors import EngineError
        if self.text_fn is None:
            raise EngineError(f"encoder {self.spec} embeds images only; it cannot take a text query "
                              f"(query with an image, or build the collection with an image–text model)")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalize(self.text_fn(list(texts), batch_size))

    def encode_image_batch(self, batch) -> np.ndarray:
        from engine.errors import EngineError
        if self.image_batch_fn is None:
            raise EngineError(f"encoder {self.spec} embeds text only; it cannot take an image "
                              f"(query with text, or build the collection with an image model)")
        return l2_normalize(self.image_batch_fn(batch))

    def encode_images(self, paths: Sequence[str], batch_size: int | str = 32, workers: int = 2,
                      max_pixels: int | None = None):
        """Embed image files, `batch_size` images a forward pass at most and, with `max_pixels`, batches cut by
        that pixel budget; unreadable ones are skipped and reported (see `engine.core.images`)."""
        from engine.core.encoders.device import batch_size_for
        from engine.core.images import encode_image_files
        return encode_image_files(self, paths, batch_size=batch_size_for(batch_size, "image", self.device),
                                  workers=workers, max_pixels=max_pixels)


def configure_threads(threads: int | None) -> None:
    """Cap torch's intra-op threads (0 or None: leave torch's default)."""
    if threads:
        import torch
        torch.set_num_threads(int(threads))
