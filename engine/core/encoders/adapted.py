"""`adapted:DIR`: a base encoder with the linear maps `engine adapt` fitted (one for texts, one for the other
side), so a collection, a search, the service or a task takes it wherever a spec is taken."""
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
