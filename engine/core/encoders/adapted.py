"""`adapted:DIR`: a base encoder with what `engine adapt` fitted, so a collection, a search, the service or a task
takes it wherever a spec is taken. Two folder formats: version 2 form `conse-neighbours` (text,image pairs over
conse: `engine.core.encoders.neighbours`), and the linear maps (one for texts, one for the other side; folders
without a version, as the first `engine adapt` wrote them)."""
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


def adapted_encoder(folder: str, load_encoder: Callable[[str], Any]):
    """The base encoder named in DIR/adapter.json (loaded by the registry's `load_encoder`, handed in), its
    outputs mapped by DIR/adapter.npz (then normalized)."""
    path = Path(folder).expanduser().resolve()
    config = read_config(path)
    if config.get("form", "linear") != "linear":
        return neighbours_encoder(path, config, load_encoder)
    try:
        with np.load(path / ADAPTER_FILE) as z:
            w_text, w_other = np.asarray(z["text"], np.float32), np.asarray(z["other"], np.float32)
    except (OSError, KeyError, ValueError) as exc:
        raise EngineError(f"{path / ADAPTER_FILE}: cannot be read ({exc}); make the adapter again") from None
    base = load_encoder(config["base"])
    if w_text.shape != (base.dim, base.dim) or w_other.shape != (base.dim, base.dim):
        raise EngineError(f"{path}: the adapter is {w_text.shape[0]}-d, its base {base.spec} is {base.dim}-d")
    text_fn = base.text_fn
    image_fn = base.image_batch_fn
    w_docs = w_text if config.get("kind") == "text" else w_other
    return replace(
        base, spec=f"adapted:{path}", text_spec=f"adapted:{path}", info={**base.info, "base": base.spec},
        text_fn=None if text_fn is None else (lambda texts, batch_size: text_fn(texts, batch_size) @ w_text),
        image_batch_fn=None if image_fn is None else (lambda batch: np.asarray(image_fn(batch)) @ w_docs))


def neighbours_encoder(path: Path, config: dict, load_encoder: Callable[[str], Any]):
    """Version 2, `conse-neighbours`: captions centred; images over 10 views, centred, blended with the
    captions of their nearest fitted photos."""
    from engine.core.encoders import neighbours as nb
    from engine.core.encoders.conse import class_embeddings
    if config.get("form") != nb.FORM or int(config.get("version", 0)) > nb.VERSION:
        raise EngineError(f"{path / CONFIG_FILE}: adapter form {config.get('form')!r} version "
                          f"{config.get('version')} is not one this engine reads; make the adapter again")
    try:
        with np.load(path / ADAPTER_FILE) as z:
            form = nb.load_neighbours(z, config["params"])
    except (OSError, KeyError, ValueError) as exc:
        raise EngineError(f"{path / ADAPTER_FILE}: cannot be read ({exc}); make the adapter again") from None
    base = load_encoder(config["base"])
    if form.text_mean.shape != (base.dim,):
        raise EngineError(f"{path}: the adapter is {form.text_mean.shape[0]}-d, its base {base.spec} is {base.dim}-d")
    classes = class_embeddings(base)
    text_fn, device = base.text_fn, base.device

    def embed_images(batch) -> np.ndarray:
        probs, pooled = nb.view_features(batch, device)
        return form.images(probs.astype(np.float32) @ classes, pooled)

    return replace(
        base, spec=f"adapted:{path}", text_spec=f"adapted:{path}", info={**base.info, "base": base.spec},
        text_fn=lambda texts, batch_size: form.texts(text_fn(texts, batch_size)),
        preprocess=nb.views_transform(), image_batch_fn=embed_images)
