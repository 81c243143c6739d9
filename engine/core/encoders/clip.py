"""open_clip image–text encoders, named the way open_clip users already do: `clip:ARCH:WEIGHTS`.

WEIGHTS is a pretrained tag (`openai`, `laion2b_s34b_b79k`, …; fetched where there is a
network), a local checkpoint file, or `random` (plumbing tests only). ARCH may be a path
to a model-config JSON for architectures open_clip does not know.
"""
from __future__ import annotations

from engine.core.encoders import torchvision_patch  # noqa: F401  (before open_clip, timm, sentence-transformers)

import functools
from pathlib import Path

import numpy as np

from engine.core.encoders.base import IMAGE, TEXT, Encoder
from engine.errors import EngineError, missing_extra, opt

HOW_TO_SUPPLY = ("supply weights as a local checkpoint: " + opt("model") + " clip:{arch}:/path/to/open_clip_model.safetensors "
                 "(download it once where there is a network, e.g. from the model's hub page), "
                 "or use the offline default " + opt("model") + " conse")


def _open_clip():
    try:
        import open_clip
    except ImportError:
        raise missing_extra("open_clip", "clip") from None
    return open_clip


def _resolve_arch(arch: str) -> str:
    open_clip = _open_clip()
    if arch.endswith(".json"):
        path = Path(arch)
        if not path.is_file():
            raise EngineError(f"{arch}: no such model-config file")
        open_clip.add_model_config(path)
        return path.stem
    if arch not in open_clip.list_models():
        close = [m for m in open_clip.list_models() if arch.lower().replace("/", "-") in m.lower()][:5]
        raise EngineError(f"open_clip has no architecture {arch!r}" + (f"; did you mean {', '.join(close)}?" if close
                          else "; see open_clip.list_models()"))
    return arch


def load_open_clip(arch: str, weights: str, device: str | None = None):
    """Model, preprocess and tokenizer on `device` (default: the `--device` setting)."""
    from engine.core.encoders.device import resolve_device
    return _load(arch, weights, resolve_device(device))


@functools.lru_cache(maxsize=2)
def _load(arch: str, weights: str, device: str):
    open_clip = _open_clip()

    name = _resolve_arch(arch)
    is_file = Path(weights).expanduser().is_file()
    if weights == "random":
        pretrained = None
    elif is_file:
        pretrained = str(Path(weights).expanduser())
    else:
        if any(sep in weights for sep in ("/", "\\")) or weights.endswith((".pt", ".bin", ".safetensors", ".pth")):
            raise EngineError(f"checkpoint file {weights} not found; " + HOW_TO_SUPPLY.format(arch=arch))
        tags = open_clip.list_pretrained_tags_by_model(name)
        if weights not in tags:
            raise EngineError(f"open_clip has no weights {weights!r} for {name} (known: {', '.join(tags) or 'none'}); "
                              + HOW_TO_SUPPLY.format(arch=arch))
        pretrained = weights
    import logging
    logging.disable(logging.ERROR)  # open_clip and the hub log each failed attempt; we say it once below
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(name, pretrained=pretrained, device="cpu")
    except Exception as exc:
        if is_file:
            raise EngineError(f"checkpoint {weights} does not load into {name}: {str(exc)[:300]}") from None
        raise EngineError(f"could not fetch open_clip weights {weights!r} for {name} "
                          f"({type(exc).__name__}; offline?); " + HOW_TO_SUPPLY.format(arch=arch)) from None
    finally:
        logging.disable(logging.NOTSET)
    model.eval()
    return model.to(device), preprocess, open_clip.get_tokenizer(name)


def clip_encoder(arg: str) -> Encoder:
    arch, sep, weights = arg.partition(":")
    if not sep or not arch or not weights:
        raise EngineError(f"clip spec {arg!r} needs an architecture and weights, e.g. clip:ViT-B-32:openai "
                          f"or clip:ViT-B-32:/path/to/checkpoint.safetensors")
    from engine.core.encoders.device import autocast, resolve_device
    device = resolve_device()
    model, preprocess, tokenizer = load_open_clip(arch, weights, device)
    import torch

    def encode_texts(texts, batch_size: int) -> np.ndarray:
        out = []
        with torch.inference_mode(), autocast(device):
            for i in range(0, len(texts), batch_size):
                out.append(model.encode_text(tokenizer(texts[i:i + batch_size]).to(device)).float().cpu().numpy())
        return np.concatenate(out)

    def encode_images(batch) -> np.ndarray:
        with torch.inference_mode(), autocast(device):
            return model.encode_image(batch.to(device, non_blocking=True)).float().cpu().numpy()

    dim = int(getattr(model, "embed_dim", 0) or model.text_projection.shape[1])
    context = int(getattr(model, "context_length", 77) or 77)
    return Encoder(spec=f"clip:{arch}:{weights}", dim=dim, modalities=frozenset({TEXT, IMAGE}),
                   text_fn=encode_texts, preprocess=preprocess, image_batch_fn=encode_images,
                   info={"max_seq_length": context, "device": device})
