"""A generation's core files (embeddings, items, item offsets, index) written and published with its
manifest: the last step of every build path (from a source, from vectors)."""
from __future__ import annotations

import os
import shutil
from array import array
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from engine.core.encoders.base import l2_normalize
from engine.core.storage.index.faiss_index import FlatFile, default_search_params, save_collection_index
from engine.core.storage.store import generations
from engine.core.storage.store.columns import ROLE as COLUMNS
from engine.core.storage.store.columns import ColumnCollector
from engine.core.storage.store.id_index import ROLE as ID_INDEX, IdCollector
from engine.core.storage.store.npy_rows import NpyRows
from engine.core.storage.store.stored import PARTIAL, Extras, now
from engine.core.storage.store.structure import VECTORS_IN
from engine.version import __version__


def new_manifest(name: str, kind: str, encoder_spec: str | None, dim: int, index: str, sources: list[str],
                 **fields: Any) -> dict:
    stamp = now()
    return {"name": name, "kind": kind, "encoder": encoder_spec, "dim": dim, "metric": "inner_product",
            "normalized": True, "count": 0, "index_factory": index, "search_params": default_search_params(index),
            "engine_version": __version__, "created": stamp, "updated": stamp, "text_fields": None,
            "sources": sources, "skipped": [], "recall_at_10": None, **fields}


def commit_collection(path: Path, manifest: dict, embeddings: np.ndarray, items: Iterable[dict], faiss_index,
                      extras: Extras = Extras(), count: int | None = None, normalize: bool = False) -> None:
    """Write a whole generation (core files + stored extras) and publish its manifest; drops `.partial/`.
    `items` may be a generator (then give `count`); `normalize` L2-normalizes the embeddings block by block
    as they are written, so no full-size copy is made."""
    offsets = array("q")  # 8 bytes a row, not a list of ints
    manifest = {**manifest, "count": len(items) if count is None else count,  # type: ignore[arg-type]
                **({"extra": dict(extras.extra)} if extras.extra else {})}

    def write_index(p: Path) -> None:  # a Flat index over exactly the embeddings written: a header over them
        header_only = isinstance(faiss_index, FlatFile) and faiss_index.vectors is embeddings \
            and faiss_index.normalize == normalize
        save_collection_index(faiss_index, p, manifest, header_only)

    if hasattr(faiss_index, "writer"):  # a folder of shards or an on-disk IVF (engine.core.storage.index.shards / ondisk)
        index_writer = faiss_index.writer()
        manifest["index_bytes"] = int(faiss_index.memory_bytes())
        manifest.pop(VECTORS_IN, None)
    else:
        index_writer = generations.FileWriter(".faiss", write_index)
    collector = ColumnCollector()  # the metadata filters read (engine.core.storage.store.columns), gathered as items stream
    id_hashes = IdCollector()  # the id → row index a delete reads (engine.core.storage.store.id_index)
    writers = {"embeddings": embeddings_writer(embeddings, normalize, path / PARTIAL),
               "items": generations.jsonl(id_hashes.rows(collector.rows(items)), offsets),
               "item_offsets": generations.offsets_npy(offsets), "index": index_writer,
               COLUMNS: collector.writer(), ID_INDEX: id_hashes.writer(), **extras.writers()}
    generations.commit(path, manifest, writers)
    shutil.rmtree(path / PARTIAL, ignore_errors=True)


def embeddings_writer(embeddings, normalize: bool, partial: Path) -> generations.FileWriter:
    """The embeddings role: a float32 `.npy` the build assembled in `partial` (`NpyRows` over one whole file)
    is linked into the generation, not copied; anything else is written block by block (`normalize`:
    L2-normalized on the way)."""
    src = _whole_file(embeddings) if not normalize else None
    if src is not None and Path(src).parent.resolve() != partial.resolve():
        src = None  # a user's own file is copied: the collection must not change when it does
    if src is None:
        return generations.npy_blocks(embeddings, l2_normalize if normalize else None)

    def link(target: Path) -> None:
        os.unlink(target)
        try:
            os.link(src, target)
        except OSError:  # another file system or no hard links: copy
            shutil.copyfile(src, target)
    return generations.FileWriter(".npy", link)


def _whole_file(embeddings) -> str | None:
    if not isinstance(embeddings, NpyRows) or len(embeddings.parts) != 1:
        return None
    part = embeddings.parts[0]
    whole = embeddings.lo == 0 and embeddings.hi == part.rows and part.dtype == np.dtype(np.float32).str
    return part.path if whole else None
