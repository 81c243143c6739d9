"""Applying the adapter `engine adapt` fits by default on text,image pairs over `conse`: centring, test-time views, and a
memory of the fitted photos.

Measured on coco-mini (benchmarks/adapter_coco.py; 10 splits by photo, knobs chosen by cross-validation inside
the training photos), where two linear maps trained contrastively did not beat conse:
- each side minus its mean over the fitted pairs (ConSE vectors share a large common direction),
- the image side averaged over 10 views (centre, flip, squashed, its flip, four corners at 224 px; centre and
  flip at 288 px) in probability space, over all 1000 classes,
- the image vector blended (`alpha`) with the mean caption of its `k` most similar fitted photos by
  EfficientNet pooled features (softmax weights at `tau`): a fitted photo itself is its own nearest one, which
  only ever favours it, so scores on unseen photos are not flattered.
`alpha`, `k`, `tau` are chosen by 5-fold cross-validation by photo on the pairs themselves (`alpha` 0 keeps only
the centring and views), so the choice never reads the photos a user will search.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.core.encoders.base import l2_normalize

FORM = "conse-neighbours"
VERSION = 2
TEMPERATURE = 2.0           # softmax temperature of the class logits (conse's default)
SMALL, LARGE = 224, 288     # view sizes: eight views of the 256-resized image, two of the 320-resized
N_SMALL, N_LARGE = 8, 2
ARRAYS = ("text_mean", "image_mean", "feature_mean", "features", "captions")


def views_transform() -> Callable:
    """PIL image → one flat uint8 tensor holding its 10 views (one tensor per image, so batches stack; bytes,
    not floats, keep the decode workers' read-ahead at 1.7 MB an image)."""
    import torch
    from PIL import Image
    from torchvision import transforms as T
    bicubic = T.InterpolationMode.BICUBIC
    norm = T.PILToTensor()

    def views(img):
        r256 = T.Resize(256, interpolation=bicubic)(img)
        centre = T.CenterCrop(SMALL)(r256)
        squashed = img.resize((SMALL, SMALL), Image.BICUBIC)
        small = [centre, T.functional.hflip(centre), squashed, T.functional.hflip(squashed),
                 *T.FiveCrop(SMALL)(r256)[:4]]
        big = T.CenterCrop(LARGE)(T.Resize(320, interpolation=bicubic)(img))
        large = [big, T.functional.hflip(big)]
        return torch.cat([torch.stack([norm(v) for v in small]).flatten(),
                          torch.stack([norm(v) for v in large]).flatten()])
    return views


def view_features(batch, device: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(class probabilities averaged over the views, pooled features averaged over the views) of a batch of
    `views_transform` tensors."""
    from engine.core.encoders.conse import class_probabilities
    from engine.core.encoders.efficientnet import pooled_and_logits
    b = batch.shape[0]
    batch = batch.float() / 127.5 - 1.0  # ToTensor then Normalize(0.5, 0.5), the weights' recipe
    cut = N_SMALL * 3 * SMALL * SMALL
    small = batch[:, :cut].reshape(b * N_SMALL, 3, SMALL, SMALL)
    large = batch[:, cut:].reshape(b * N_LARGE, 3, LARGE, LARGE)
    probs, pooled = [], []
    for group, n in ((small, N_SMALL), (large, N_LARGE)):
        p, logits = pooled_and_logits(group, device)
        probs.append(class_probabilities(logits, TEMPERATURE).reshape(b, n, -1))
        pooled.append(p.reshape(b, n, -1))
    return np.concatenate(probs, 1).mean(1), np.concatenate(pooled, 1).mean(1)


@dataclass(frozen=True)
class Neighbours:
    """The fitted form: means to centre on, the memory of fitted photos (features, mean caption), knobs."""
    text_mean: np.ndarray      # (d,)
    image_mean: np.ndarray     # (d,)
    feature_mean: np.ndarray   # (1280,)
    features: np.ndarray       # (n, 1280) fitted photos, centred and unit
    captions: np.ndarray       # (n, d) their mean caption, centred and unit
    alpha: float
    k: int
    tau: float

    def texts(self, emb: np.ndarray) -> np.ndarray:
        return l2_normalize(l2_normalize(emb) - self.text_mean)

    def images(self, conse: np.ndarray, pooled: np.ndarray, exclude: np.ndarray | None = None) -> np.ndarray:
        """Image vectors from ConSE vectors and pooled features (`exclude[i]`: a memory row photo i may not use,
        -1 none: only for measuring fitted photos as if unseen)."""
        g = l2_normalize(l2_normalize(conse) - self.image_mean)
        if self.alpha == 0 or not len(self.features):
            return g
        sims = l2_normalize(l2_normalize(pooled) - self.feature_mean) @ self.features.T
        if exclude is not None:
            sims[np.arange(len(sims))[exclude >= 0], exclude[exclude >= 0]] = -np.inf
        k = min(self.k, sims.shape[1] - (exclude is not None))
        idx = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        s = np.take_along_axis(sims, idx, 1)
        w = np.exp((s - s.max(axis=1, keepdims=True)) / self.tau)
        w /= w.sum(axis=1, keepdims=True)
        t = l2_normalize(np.einsum("nk,nkd->nd", w, self.captions[idx]))
        return l2_normalize((1 - self.alpha) * g + self.alpha * t)

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: np.asarray(getattr(self, name), np.float32) for name in ARRAYS}

    def params(self) -> dict:
        return {"alpha": self.alpha, "k": self.k, "tau": self.tau, "temperature": TEMPERATURE,
                "views": N_SMALL + N_LARGE}


def load_neighbours(arrays, params: dict) -> Neighbours:
    return Neighbours(*(np.asarray(arrays[name], np.float32) for name in ARRAYS), float(params["alpha"]),
                      int(params["k"]), float(params["tau"]))
