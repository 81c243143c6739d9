"""Late interaction (ColBERT and its kin) through sentence-transformers' `MultiVectorEncoder`:
`multivector:NAME_OR_DIR` (PyLate and Stanford ColBERT checkpoints load through it too).

A text becomes one vector per token; a query scores a document by MaxSim: for each query token its best
document token, summed. The query and document sides go through the model's `encode_query` /
`encode_document` (their prefixes, lengths and masks), and `maxsim` here is the same sum
sentence-transformers' `similarity` computes, so a ranking equals the library's own brute force.

Page retrievers (ColPali, ColQwen2, ColModernVBert: transformers' `*ForRetrieval` checkpoints) load the same
way with text and image modalities: a page image becomes one vector per token of its image input (its patches
and the model's visual prompt), a text query one per token, scored by the same MaxSim. Which modalities a
model has is read from its files before it loads (`model_modalities`).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.encoders.base import IMAGE, TEXT
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
    from engine.core.encoders.hub import check_holds_model
    check_holds_model(name, f"{prefix}:{name}")
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


def model_modalities(name: str) -> frozenset[str] | None:
    """What the MultiVectorEncoder `name` embeds, read from its files (no model loads), as sentence-transformers
    decides it: a saved model's first module's `modality_config` (modules.json), else a transformers checkpoint
    whose architecture is a `*ForRetrieval` page retriever (ColPali, ColQwen2: text and image), else text; None
    where the files are not here (a hub name not in the cache: judged once it loads)."""
    import json

    from engine.core.encoders.sbert import model_file, spec_modalities
    found = spec_modalities(name)
    if found is not None:
        return found
    config = model_file(name, "config.json")
    if config is None:
        return None
    try:
        architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures")
    except (OSError, ValueError, AttributeError):
        return None
    retriever = any(str(a).endswith("ForRetrieval") for a in architectures or [])
    return frozenset({TEXT, IMAGE}) if retriever else frozenset({TEXT})


def family(spec: str) -> str:
    """How `engine info` names a multi-vector index's model by what it embeds (read from its files)."""
    try:
        known = model_modalities(model_name(spec))
    except EngineError:  # the model's folder is gone: the index still opens, its queries will say so
        known = None
    what = "" if known is None else ", text → page images" if IMAGE in known else ", text"
    return f"late interaction (MultiVectorEncoder){what}"


def check_images(spec: str, modalities=None) -> None:
    """Refuse a multi-vector model that cannot embed page images, in one line: before it loads where its files
    say so (`modalities` None: read them), after, from the loaded model's own."""
    name = model_name(spec)
    known = model_modalities(name) if modalities is None else frozenset(modalities)
    if known is not None and IMAGE not in known:
        said = "its files say so" if modalities is None else "as loaded"
        raise EngineError(f"multi-vector model {spec} embeds texts only ({said}); image collections "
                          "need a page retriever whose modalities include images (ColPali, ColQwen2: a "
                          "transformers *ForRetrieval checkpoint)")


def encode_image_tokens(name: str, files: Sequence[str], batch_size: int = 8,
                        unreadable_ok: bool = False) -> list[np.ndarray | None]:
    """Each image file's token vectors (float32, tokens × dim) from the model's document side, read
    `batch_size` images at a time (the engine's robust reader: upright, RGB); an unreadable file is refused
    naming it, or with `unreadable_ok` gets None (a reranker's candidate whose file went away)."""
    from engine.core.images import ImageReadError, load_image
    if not files:
        return []
    model = load_multivector_model(name)
    check_images(name, getattr(model, "modalities", None) or ())
    out: list[np.ndarray | None] = []
    for start in range(0, len(files), batch_size):
        batch: list = []
        for f in files[start:start + batch_size]:
            try:
                batch.append(load_image(f))
            except ImageReadError as exc:
                if not unreadable_ok:
                    raise EngineError(f"{f}: {exc}") from None
                batch.append(None)
        images = [b for b in batch if b is not None]
        got = iter(_on_device(model, model.encode_document, images, batch_size) if images else [])
        out.extend(None if b is None else next(got) for b in batch)
    return out


def _on_device(model, encode, inputs: list, batch_size: int) -> list[np.ndarray]:
    """`encode` (the model's query or document side) over `inputs` in the precision set
    (`engine.core.encoders.device.autocast`: fp16 on CUDA unless `--dtype` says otherwise): each input's token
    vectors as float32 arrays."""
    from engine.core.encoders.device import autocast
    with autocast(str(model.device)):
        out = encode(inputs, batch_size=batch_size, show_progress_bar=False)  # tensors on the device
    return [x.float().cpu().numpy() for x in out]


def encode_tokens(name: str, texts: Sequence[str], query: bool, batch_size: int = 32) -> list[np.ndarray]:
    """Each text's token vectors (float32, tokens × dim), from the model's query or document side, in the
    precision set (`_on_device`)."""
    if len(texts) == 0:
        return []
    model = load_multivector_model(name)
    return _on_device(model, model.encode_query if query else model.encode_document, list(texts), batch_size)


def maxsim(query: np.ndarray, docs: Sequence[np.ndarray]) -> np.ndarray:
    """MaxSim of one query's token vectors against each document's: Σ over query tokens of the best dot
    product with a document token (float64 sums of float32 products)."""
    q = np.asarray(query, dtype=np.float32)
    out = np.zeros(len(docs), dtype=np.float64)
    for n, d in enumerate(docs):
        d = np.asarray(d, dtype=np.float32)
        out[n] = float((q @ d.T).max(axis=1).sum()) if len(d) and len(q) else 0.0
    return out
