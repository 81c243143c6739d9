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
    """PIL image → one flat uint8 array holding its 10 views (one array per image, so batches stack; bytes, not
    floats, keep the decode workers' read-ahead at 1.7 MB an image). torchvision's Resize (bicubic, short side),
    CenterCrop, FiveCrop and hflip done with PIL alone, so the torch and the onnxruntime paths read the same
    pixels (tests/core/test_adapt.py checks them against torchvision)."""
    from PIL import Image

    from engine.core.encoders.onnx_image import resize_short, centre_crop

    def views(img):
        r256 = resize_short(img, 256)
        w, h = r256.size
        centre = centre_crop(r256, SMALL)
        squashed = img.resize((SMALL, SMALL), Image.BICUBIC)
        corners = [r256.crop((x, y, x + SMALL, y + SMALL)) for x, y in
                   ((0, 0), (w - SMALL, 0), (0, h - SMALL), (w - SMALL, h - SMALL))]
        big = centre_crop(resize_short(img, 320), LARGE)
        flip = Image.Transpose.FLIP_LEFT_RIGHT
        small = [centre, centre.transpose(flip), squashed, squashed.transpose(flip), *corners]
        large = [big, big.transpose(flip)]
        return np.concatenate([np.stack([np.asarray(v, np.uint8).transpose(2, 0, 1) for v in group]).ravel()
                               for group in (small, large)])
    return views


def view_features(batch, forward: Callable) -> tuple[np.ndarray, np.ndarray]:
    """(class probabilities averaged over the views, pooled features averaged over the views) of a batch of
    `views_transform` arrays; `forward`: float32 (n, 3, H, W) pixels → (pooled, logits) of EfficientNet-Lite0
    (torch's `pooled_and_logits` or the ONNX session: `engine.core.encoders.adapted.effnet_forward`)."""
    from engine.core.encoders.conse import class_probabilities
    batch = np.asarray(batch)
    b = batch.shape[0]
    cut = N_SMALL * 3 * SMALL * SMALL
    probs, pooled = [], []
    for group, n, size in ((batch[:, :cut], N_SMALL, SMALL), (batch[:, cut:], N_LARGE, LARGE)):
        pixels = group.reshape(b * n, 3, size, size).astype(np.float32) / 127.5 - 1.0  # ToTensor, Normalize(0.5, 0.5)
        p, logits = forward(pixels)
        probs.append(class_probabilities(np.asarray(logits), TEMPERATURE).reshape(b, n, -1))
        pooled.append(np.asarray(p).reshape(b, n, -1))
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
