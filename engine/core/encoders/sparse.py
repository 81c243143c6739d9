"""Learned sparse encoders (SPLADE and its kin) through sentence-transformers' `SparseEncoder`: `sparse:NAME_OR_DIR`.

A text becomes weights over the model's vocabulary, nearly all zero; a collection keeps them as an inverted
index (`engine.core.storage.index.sparse`) and the `sparse(…)` stage scores a query by the model's own
similarity (dot product) over the postings of its terms. The query and document sides go through the model's
`encode_query` / `encode_document`, so a model with separate query and document paths (inference-free SPLADE)
is used as it was trained.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from engine.errors import EngineError

PREFIX = "sparse"
SYNTAX = "sparse:NAME_OR_DIR"


def sparse_model_name(spec: str) -> str:
    """The model a `sparse:NAME_OR_DIR` spec names (checked: no model loads)."""
    prefix, sep, name = (spec or "").strip().partition(":")
    if prefix.lower() != PREFIX or not sep or not name.strip():
        raise EngineError(f"sparse model spec {spec!r}: write {SYNTAX} (a SparseEncoder: a Hugging Face id or "
                          "a local folder)")
    name = name.strip()
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().exists():
        raise EngineError(f"sparse model spec {spec!r}: no such folder {name}")
    from engine.core.encoders.hub import check_holds_model
    check_holds_model(name, f"sparse model spec {spec!r}")
    return name


def load_sparse_model(name: str):
    """One loaded SparseEncoder per name and device per process (a build and its queries share it), on the
    device set (`--device`)."""
    from engine.core.encoders.device import resolve_device
    return _load_sparse(name, resolve_device())


@functools.lru_cache(maxsize=2)
def _load_sparse(name: str, device: str):
    from engine.core.encoders.hub import cache_only, out_of_reach
    if why := out_of_reach(name):
        raise EngineError(f"sparse model {name!r} could not be loaded ({why}); give a local folder "
                          f"({SYNTAX} with a path)")
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import SparseEncoder
    try:
        return SparseEncoder(name, device=device, local_files_only=cache_only(name) or None)
    except Exception as exc:  # noqa: BLE001  (a folder that is no SparseEncoder: one line)
        raise EngineError(f"sparse model {name!r} could not be loaded: {type(exc).__name__}: "
                          f"{str(exc)[:200]}") from None


def encode_sparse(name: str, texts, query: bool, batch_size: int = 32) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each text's (term ids int32 ascending, weights float32) from the model's query or document side, in the
    precision set (`engine.core.encoders.device.autocast`: fp16 on CUDA unless `--dtype` says otherwise)."""
    from engine.core.encoders.device import autocast
    model = load_sparse_model(name)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    encode = model.encode_query if query else model.encode_document
    for lo in range(0, len(texts), batch_size):
        part = list(texts[lo:lo + batch_size])
        with autocast(str(model.device)):
            coo = encode(part, batch_size=batch_size, convert_to_sparse_tensor=True, show_progress_bar=False)
        coo = coo.coalesce().cpu()
        idx, val = coo.indices().numpy(), coo.values().float().numpy()
        rows = idx[0]
        for r in range(len(part)):
            sel = rows == r
            terms, weights = idx[1][sel].astype(np.int32), val[sel].astype(np.float32)
            order = np.argsort(terms, kind="stable")
            keep = weights[order] != 0
            out.append((terms[order][keep], weights[order][keep]))
    return out


def vocabulary_size(name: str) -> int:
    model = load_sparse_model(name)
    return int(model.get_embedding_dimension() or 0)


def similarity_name(name: str) -> str:
    """The model's own similarity; the inverted index computes dot products, so another one is refused."""
    fn = str(load_sparse_model(name).similarity_fn_name or "dot")
    if fn != "dot":
        raise EngineError(f"sparse model {name!r} scores by {fn}; the inverted index scores by dot product")
    return fn
