"""Style statistics of EfficientNet-Lite0's intermediate feature maps, taken in the same forward pass as
its pooled embedding.

A style LoRA changes colour, texture and stroke far more than what the picture shows. The pooled
embedding mostly encodes the content; the per-channel means and standard deviations of early and
middle feature maps (the statistics AdaIN transfers, Huang & Belongie 2017) and their Gram matrices
(Gatys et al. 2016) are the classic descriptors of exactly what a style changes.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import numpy as np

from engine.core.encoders.efficientnet import load_efficientnet_lite0, pooled_and_logits

# model.blocks indices → channels 16, 24, 40, 80, 112, 192 at strides 2…32 (928 values of mean and std)
MEANVAR_STAGES = (0, 1, 2, 3, 4, 5)
# Gram matrices of the 24- and 40-channel stages: 300 + 820 upper-triangle values
GRAM_STAGES = (1, 2)
FEATURES = ("pooled", "meanvar", "gram")


@contextlib.contextmanager
def _capture(model, stages: tuple[int, ...]) -> Iterator[dict]:
    """Forward hooks that keep the chosen blocks' outputs and the pooled vector of the next forward."""
    store: dict = {}

    def keep(key):
        return lambda _module, _inputs, output: store.__setitem__(key, output)

    handles = [model.blocks[i].register_forward_hook(keep(i)) for i in stages]
    handles.append(model.global_pool.register_forward_hook(keep("pooled")))
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


def channel_meanvar(fmap) -> np.ndarray:
    """(B, 2C): each channel's spatial mean and standard deviation."""
    flat = fmap.flatten(2).float()
    return np.concatenate([flat.mean(2).numpy(), flat.std(2, unbiased=False).numpy()], axis=1)


def gram_upper(fmap) -> np.ndarray:
    """(B, C(C+1)/2): the upper triangle of the channel Gram matrix F Fᵀ / HW."""
    flat = fmap.flatten(2).float()
    gram = flat @ flat.transpose(1, 2) / flat.shape[2]
    rows, cols = np.triu_indices(gram.shape[1])
    return gram[:, rows, cols].numpy()


def effnet_style_features(batch, joint_fn: Callable | None = None) -> dict[str, np.ndarray]:
    """`pooled` (1280-d), `meanvar` and `gram` of an EfficientNet-preprocessed batch, in ONE forward pass.

    `joint_fn` (e.g. the conse encoder's `encode_image_batch`, which runs this same network) is the
    forward that is run; its output is returned as `joint`. Without it the plain network runs.
    """
    import torch
    model = load_efficientnet_lite0()
    stages = tuple(sorted(set(MEANVAR_STAGES) | set(GRAM_STAGES)))
    with torch.inference_mode(), _capture(model, stages) as store:
        joint = joint_fn(batch) if joint_fn is not None else None
        if "pooled" not in store:  # joint_fn did not run EfficientNet-Lite0
            pooled_and_logits(batch)
    out = {"pooled": store["pooled"].flatten(1).float().numpy().astype(np.float32),
           "meanvar": np.concatenate([channel_meanvar(store[i]) for i in MEANVAR_STAGES], 1).astype(np.float32),
           "gram": np.concatenate([gram_upper(store[i]) for i in GRAM_STAGES], 1).astype(np.float32)}
    if joint is not None:
        out["joint"] = np.asarray(joint, dtype=np.float32)
    return out
