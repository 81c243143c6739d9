"""Late interaction (ColBERT and its kin) through sentence-transformers' `MultiVectorEncoder`:
`multivector:NAME_OR_DIR` (PyLate and Stanford ColBERT checkpoints load through it too).

A text becomes one vector per token; a query scores a document by MaxSim: for each query token its best
document token, summed. The query and document sides go through the model's `encode_query` /
`encode_document` (their prefixes, lengths and masks), and `maxsim` here is the same sum
sentence-transformers' `similarity` computes, so a ranking equals the library's own brute force.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import EngineError

PREFIX = "multivector"
SYNTAX = "multivector:NAME_OR_DIR"


def model_name(spec_or_arg: str, prefix: str = PREFIX) -> str:
    """The model a `multivector:` (or `maxsim:`) spec names, or the bare argument; a local path must exist."""
    head, sep, rest = spec_or_arg.strip().partition(":")
    name = rest.strip() if sep and head.lower() == prefix else spec_or_arg.strip()
    if not name:
        raise EngineError(f"{prefix}: spec {spec_or_arg!r} names no model; write {prefix}:NAME_OR_DIR")
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().exists():
        raise EngineError(f"{prefix}:{name}: no such folder")
    return name


def load_multivector_model(name: str):
    """One loaded MultiVectorEncoder per name and device per process, on the device set (`--device`)."""
    from engine.core.encoders.device import resolve_device
    return _load_multivector(name, resolve_device())


@functools.lru_cache(maxsize=2)
def _load_multivector(name: str, device: str):
    from engine.core.encoders.hub import cache_only, out_of_reach
    if why := out_of_reach(name):
        raise EngineError(f"multi-vector model {name!r} could not be loaded ({why}); give a local folder")
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import MultiVectorEncoder
    try:
        model = MultiVectorEncoder(name, device=device, local_files_only=cache_only(name) or None)
    except Exception as exc:  # noqa: BLE001  (a folder that is no MultiVectorEncoder: one line)
        raise EngineError(f"multi-vector model {name!r} could not be loaded: {type(exc).__name__}: "
                          f"{str(exc)[:200]}") from None
    if str(model.similarity_fn_name) != "maxsim":
        raise EngineError(f"multi-vector model {name!r} scores by {model.similarity_fn_name}; the engine scores "
                          "late interaction by MaxSim")
    return model


def encode_tokens(name: str, texts: Sequence[str], query: bool, batch_size: int = 32) -> list[np.ndarray]:
    """Each text's token vectors (float32, tokens × dim), from the model's query or document side, in the
    precision set (`engine.core.encoders.device.autocast`: fp16 on CUDA unless `--dtype` says otherwise)."""
    if len(texts) == 0:
        return []
    from engine.core.encoders.device import autocast
    model = load_multivector_model(name)
    encode = model.encode_query if query else model.encode_document
    with autocast(str(model.device)):
        out = encode(list(texts), batch_size=batch_size, show_progress_bar=False)  # tensors on the device
    return [x.float().cpu().numpy() for x in out]


def maxsim(query: np.ndarray, docs: Sequence[np.ndarray]) -> np.ndarray:
    """MaxSim of one query's token vectors against each document's: Σ over query tokens of the best dot
    product with a document token (float64 sums of float32 products)."""
    q = np.asarray(query, dtype=np.float32)
    out = np.zeros(len(docs), dtype=np.float64)
    for n, d in enumerate(docs):
        d = np.asarray(d, dtype=np.float32)
        out[n] = float((q @ d.T).max(axis=1).sum()) if len(d) and len(q) else 0.0
    return out
