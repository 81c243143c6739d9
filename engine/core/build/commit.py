"""A generation's core files (embeddings, items, item offsets, index) written and published with its
manifest: the last step of every build path (from a source, from vectors)."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from engine.core.encoders.base import l2_normalize
from engine.core.index.faiss_index import default_search_params, save_index
from engine.core.store import generations
from engine.core.store.stored import PARTIAL, now, role_writers
from engine.version import __version__


def new_manifest(name: str, kind: str, encoder_spec: str | None, dim: int, index: str, sources: list[str],
                 **fields: Any) -> dict:
    stamp = now()
    return {"name": name, "kind": kind, "encoder": encoder_spec, "dim": dim, "metric": "inner_product",
            "normalized": True, "count": 0, "index_factory": index, "search_params": default_search_params(index),
            "engine_version": __version__, "created": stamp, "updated": stamp, "text_fields": None,
            "sources": sources, "skipped": [], "recall_at_10": None, **fields}


def commit_collection(path: Path, manifest: dict, embeddings: np.ndarray, items: Iterable[dict], faiss_index,
                      arrays: Mapping[str, np.ndarray] | None = None,
                      files: Mapping[str, generations.FileWriter] | None = None,
                      extra: Mapping[str, Any] | None = None,
                      documents: Mapping[str, Any] | None = None, count: int | None = None,
                      normalize: bool = False) -> None:
    """Write a whole generation (core files + stored extras) and publish its manifest; drops `.partial/`.
    `items` may be a generator (then give `count`); `normalize` L2-normalizes the embeddings block by block
    as they are written, so no full-size copy is made."""
    offsets: list = []
    manifest = {**manifest, "count": len(items) if count is None else count,  # type: ignore[arg-type]
                **({"extra": dict(extra)} if extra else {})}

    def write_index(p: Path) -> None:
        save_index(faiss_index, p)
        manifest["index_bytes"] = p.stat().st_size  # serialized size: a close proxy for resident memory

    if hasattr(faiss_index, "writer"):  # a folder of shards or an on-disk IVF (engine.core.index.shards / ondisk)
        index_writer = faiss_index.writer()
        manifest["index_bytes"] = int(faiss_index.memory_bytes())
    else:
        index_writer = generations.FileWriter(".faiss", write_index)
    writers = {"embeddings": generations.npy_blocks(embeddings, l2_normalize if normalize else None),
               "items": generations.jsonl(items, offsets), "item_offsets": generations.offsets_npy(offsets),
               "index": index_writer, **role_writers(arrays, files, documents)}
    generations.commit(path, manifest, writers)
    shutil.rmtree(path / PARTIAL, ignore_errors=True)
