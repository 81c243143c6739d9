"""The offline image–text encoder: ConSE (Norouzi et al., ICLR 2014) over EfficientNet-Lite0 and MiniLM.

No CLIP weights install without a hub, but an ImageNet classifier and a sentence model do.
An image becomes the probability-weighted mean of the sentence embeddings of its top
ImageNet classes; a caption is embedded by the same sentence model, so both share one
space with no training. Each class is the mean of prompts over all its synonyms.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from engine.core.encoders.base import IMAGE, TEXT, Encoder, cache_dir, l2_normalize
from engine.core.encoders.sbert import DEFAULT_TEXT_MODEL
from engine.errors import EngineError

# Measured on coco-mini (R@1 / MRR): "{}" 0.455/0.606, "a photo of a {}." 0.407/0.583,
# a three-prompt ensemble 0.422/0.593 (all at temperature 2, top-20).
PROMPTS = ("{}",)
N_CLASSES = 1000  # ImageNet-1k
DEFAULTS = {"top": 20, "temperature": 2.0, "text": DEFAULT_TEXT_MODEL}


def imagenet_synonyms() -> list[list[str]]:
    from engine.core.encoders import torchvision_patch  # noqa: F401  (timm imports torchvision)
    from timm.data import ImageNetInfo
    info = ImageNetInfo()
    return [[s.strip() for s in info.index_to_description(i).split(",") if s.strip()]
            for i in range(info.num_classes())]


def classes_path(text_spec: str) -> Path:
    """The cache file of the class vectors of one text model: keyed without importing timm (its installed
    version stands for its class names), so an image query reads it with numpy alone."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        names = version("timm")
    except PackageNotFoundError:
        names = "no-timm"
    key = hashlib.sha1(repr((text_spec, PROMPTS, names, N_CLASSES)).encode()).hexdigest()[:16]
    return cache_dir() / f"conse-classes-{key}.npy"


def cached_classes(path: Path, dim: int | None = None) -> np.ndarray | None:
    """The stored class vectors, or None when absent or not of the expected shape (`dim` None: any width)."""
    try:
        arr = np.load(path)
    except (OSError, ValueError):
        return None
    return arr if arr.ndim == 2 and arr.shape[0] == N_CLASSES and dim in (None, arr.shape[1]) else None


def class_probabilities(logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / temperature) per row: the class probabilities ConSE (and its adapter's views) mix."""
    z = logits / temperature
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def mix_classes(logits: np.ndarray, classes: np.ndarray, top: int, temperature: float) -> np.ndarray:
    """ConSE: the softmax(logits / temperature) over the `top` classes, renormalized, times the class vectors."""
    p = class_probabilities(logits, temperature)
    if top < p.shape[1]:
        cut = np.partition(p, -top, axis=1)[:, -top][:, None]
        p = np.where(p >= cut, p, 0.0)
    p /= p.sum(axis=1, keepdims=True)
    return p.astype(np.float32) @ classes


def class_embeddings(text: Encoder) -> np.ndarray:
    """(1000, dim) class vectors, cached on disk per text model and prompt set (≈10 s to compute)."""
    path = classes_path(text.text_spec or text.spec)
    arr = cached_classes(path, text.dim)
    if arr is not None:
        return arr
    synonyms = imagenet_synonyms()
    sentences, owner = [], []
    for c, names in enumerate(synonyms):
        for name in names:
            for prompt in PROMPTS:
                sentences.append(prompt.format(name))
                owner.append(c)
    emb = text.encode_texts(sentences, batch_size=256)
    sums = np.zeros((len(synonyms), text.dim), np.float64)
    np.add.at(sums, np.asarray(owner), emb)
    classes = l2_normalize(sums)
    try:
        from engine.io.atomic import write_npy
        write_npy(path, classes)
    except OSError:
        pass  # a read-only home only costs the recomputation
    return classes


def parse_params(arg: str) -> dict:
    params = dict(DEFAULTS)
    for part in filter(None, (arg or "").split(",")):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in DEFAULTS or not value:
            raise EngineError(f"conse option {part!r} not understood; options are "
                              f"{', '.join(f'{k}=' for k in DEFAULTS)} (e.g. conse:top=20,temperature=2)")
        params[key] = type(DEFAULTS[key])(value)
    return params


def text_query_encoder(arg: str = "") -> Encoder | None:
    """The text side alone, on onnxruntime (see `onnx_text`): what a text query needs, without torch."""
    from engine.core.encoders.onnx_text import text_encoder
    return text_encoder(parse_params(arg)["text"])


def image_query_encoder(arg: str = "") -> Encoder | None:
    """The image side alone: the ONNX EfficientNet-Lite0 logits mixed over the stored class vectors (numpy),
    importing neither torch nor sentence-transformers nor transformers. None where ONNX cannot run here."""
    from engine.core.encoders import onnx_image
    params = parse_params(arg)
    if not onnx_image.usable():
        return None
    text_spec = f"sbert:{params['text']}"
    path = classes_path(text_spec)
    classes = cached_classes(path)
    if classes is None:  # not stored yet (a collection built before): computed once, and said so
        text = text_query_encoder(arg)
        if text is None:
            return None
        from engine.progress import info
        info(f"computing conse's class vectors with {text_spec} (once, into {path})")
        classes = class_embeddings(text)
    run = onnx_image.runner()
    top, temperature = int(params["top"]), float(params["temperature"])
    spec = "conse:" + ",".join(f"{k}={params[k]}" for k in DEFAULTS)
    return Encoder(spec=spec, dim=int(classes.shape[1]), modalities=frozenset({IMAGE}),
                   preprocess=onnx_image.preprocess,
                   image_batch_fn=lambda b: mix_classes(run(b)[1], classes, top, temperature),
                   info={"runtime": "onnx"}, text_spec=text_spec)


def conse_encoder(arg: str = "") -> Encoder:
    from engine.core.encoders.efficientnet import efficientnet_transform, pooled_and_logits
    from engine.core.encoders.sbert import sentence_encoder
    params = parse_params(arg)
    text = sentence_encoder(params["text"])
    device = text.info["device"]
    classes = class_embeddings(text)
    top, temperature = int(params["top"]), float(params["temperature"])

    def embed_images(batch) -> np.ndarray:
        return mix_classes(pooled_and_logits(batch, device)[1], classes, top, temperature)

    spec = "conse:" + ",".join(f"{k}={params[k]}" for k in DEFAULTS)
    return Encoder(spec=spec, dim=text.dim, modalities=frozenset({TEXT, IMAGE}), text_fn=text.text_fn,
                   preprocess=efficientnet_transform(), image_batch_fn=embed_images,
                   info={"max_seq_length": text.info.get("max_seq_length", 0), "device": device}, text_spec=text.spec)
