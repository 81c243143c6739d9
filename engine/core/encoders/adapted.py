"""`adapted:DIR`: a base encoder with what `engine adapt` fitted, so a collection, a search, the service or a task
takes it wherever a spec is taken. Two folder formats: version 2 form `conse-neighbours` (text,image pairs over
conse: `engine.core.encoders.neighbours`), and the linear maps (one for texts, one for the other side; folders
without a version, as the first `engine adapt` wrote them).

The adapter is applied after the base's outputs, so it wraps either the whole (torch) base (`adapted_encoder`) or
the base's light query sides on onnxruntime (`text_query_encoder`, `image_query_encoder`): an `adapted:DIR`
query then imports no torch, as a query of its base does (tests/core/test_adapt.py checks both give the same
vectors)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from engine.errors import EngineError

ADAPTER_FILE = "adapter.npz"
CONFIG_FILE = "adapter.json"


def read_config(folder: Path) -> dict:
    path = folder / CONFIG_FILE
    try:
        return json.loads(path.read_text())
    except OSError:
        raise EngineError(f"{folder}: no adapter here ({CONFIG_FILE} missing); make one with `engine adapt`") from None
    except ValueError:
        raise EngineError(f"{path}: not valid JSON; make the adapter again with `engine adapt`") from None


def base_spec(folder: str) -> str:
    """The spec of the base encoder DIR's adapter wraps (the registry reads a wrapped spec's modalities here)."""
    return str(read_config(Path(folder).expanduser().resolve())["base"])


def adapted_encoder(folder: str, load_encoder: Callable[[str], Any]):
    """The base encoder named in DIR/adapter.json (loaded by the registry's `load_encoder`, handed in), its
    outputs mapped by DIR/adapter.npz (then normalized)."""
    path, config, arrays = _read(folder)
    return _adapted(path, config, arrays, load_encoder(config["base"]))


def text_query_encoder(folder: str, light: Callable[[str], Any]):
    """The text side alone over the base's light text side (`light(spec)`: the registry's, handed in), or None
    where the base has none here."""
    return _light(folder, light)


def image_query_encoder(folder: str, light: Callable[[str], Any]):
    """The image side alone over the base's light image side (ONNX EfficientNet-Lite0 for conse: the 10 views
    through the same session), or None where the base has none here."""
    return _light(folder, light)


def _light(folder: str, light: Callable[[str], Any]):
    path, config, arrays = _read(folder)
    base = light(config["base"])
    return None if base is None else _adapted(path, config, arrays, base)


def _read(folder: str) -> tuple[Path, dict, dict]:
    """DIR resolved, its config and its arrays, with the one-line refusals of a folder this engine cannot apply
    (before any model loads)."""
    path = Path(folder).expanduser().resolve()
    config = read_config(path)
    if config.get("form", "linear") != "linear":
        from engine.core.encoders import neighbours as nb
        if config.get("form") != nb.FORM or int(config.get("version", 0)) > nb.VERSION:
            raise EngineError(f"{path / CONFIG_FILE}: adapter form {config.get('form')!r} version "
                              f"{config.get('version')} is not one this engine reads; make the adapter again")
    try:
        with np.load(path / ADAPTER_FILE) as z:
            return path, config, {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise EngineError(f"{path / ADAPTER_FILE}: cannot be read ({exc}); make the adapter again") from None


def effnet_forward(encoder) -> Callable:
    """float32 (n, 3, H, W) pixels → EfficientNet-Lite0's (pooled, logits), where `encoder` runs it: its ONNX
    session for a light (onnxruntime) side, else torch on the encoder's device."""
    if encoder.info.get("runtime") == "onnx":
        from engine.core.encoders import onnx_image
        session = onnx_image.runner()

        def one_by_one(pixels: np.ndarray):  # as fast per view as a batch, with a tenth of the activations:
            outs = [session(pixels[i:i + 1]) for i in range(len(pixels))]  # a query's 10 views take 0.05 s less
            return tuple(np.concatenate(parts) for parts in zip(*outs))   # system time and 90 MiB less
        return one_by_one
    device = encoder.device

    def forward(pixels: np.ndarray):
        import torch

        from engine.core.encoders.efficientnet import pooled_and_logits
        return pooled_and_logits(torch.from_numpy(pixels), device)
    return forward


def _adapted(path: Path, config: dict, arrays: dict, base):
    """`base` (whole, or one light side) with the adapter applied to the sides it has."""
    spec = f"adapted:{path}"
    info = {**base.info, "base": base.spec}
    if config.get("form", "linear") != "linear":
        return _neighbours(path, config, arrays, base, spec, info)
    try:
        w_text, w_other = np.asarray(arrays["text"], np.float32), np.asarray(arrays["other"], np.float32)
    except KeyError as exc:
        raise EngineError(f"{path / ADAPTER_FILE}: cannot be read (no array {exc}); make the adapter again") from None
    if w_text.shape != (base.dim, base.dim) or w_other.shape != (base.dim, base.dim):
        raise EngineError(f"{path}: the adapter is {w_text.shape[0]}-d, its base {base.spec} is {base.dim}-d")
    text_fn = base.text_fn
    image_fn = base.image_batch_fn
    w_docs = w_text if config.get("kind") == "text" else w_other
    return replace(
        base, spec=spec, text_spec=spec, info=info,
        text_fn=None if text_fn is None else (lambda texts, batch_size: text_fn(texts, batch_size) @ w_text),
        image_batch_fn=None if image_fn is None else (lambda batch: np.asarray(image_fn(batch)) @ w_docs))


def _neighbours(path: Path, config: dict, arrays: dict, base, spec: str, info: dict):
    """Version 2, `conse-neighbours`: captions centred; images over 10 views, centred, blended with the
    captions of their nearest fitted photos."""
    from engine.core.encoders import neighbours as nb
    from engine.core.encoders.conse import class_embeddings
    try:
        form = nb.load_neighbours(arrays, config["params"])
    except (KeyError, ValueError) as exc:
        raise EngineError(f"{path / ADAPTER_FILE}: cannot be read ({exc}); make the adapter again") from None
    if form.text_mean.shape != (base.dim,):
        raise EngineError(f"{path}: the adapter is {form.text_mean.shape[0]}-d, its base {base.spec} is {base.dim}-d")
    text_fn = base.text_fn
    image_fn = None
    if base.image_batch_fn is not None:
        classes = class_embeddings(base)  # the ONNX side stored them when it loaded: read, not computed
        forward = effnet_forward(base)

        def image_fn(batch) -> np.ndarray:
            probs, pooled = nb.view_features(batch, forward)
            return form.images(probs.astype(np.float32) @ classes, pooled)

    return replace(
        base, spec=spec, text_spec=spec, info=info,
        text_fn=None if text_fn is None else (lambda texts, batch_size: form.texts(text_fn(texts, batch_size))),
        preprocess=nb.views_transform() if image_fn is not None else base.preprocess, image_batch_fn=image_fn)
