"""A collection over vectors computed elsewhere: normalized block by block as they are written, indexed by
any factory string or `--index auto` (measured on the queries users will send)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from engine.core.build.commit import commit_collection, new_manifest
from engine.core.encoders.base import l2_normalize
from engine.core.index.auto import choose, parse_bytes
from engine.core.index.faiss_index import FlatFile, build_index
from engine.core.store import generations
from engine.core.store.lock import writer_lock
from engine.core.store.stored import MANIFEST, collection_path
from engine.errors import EngineError, opt
from engine.io.ids import check_unique


def commit_vectors(name: str, ids: Sequence[str], vectors: np.ndarray, encoder_spec: str | None, kind: str,
                   root: str | Path | None = None, index: str = "Flat", meta: Sequence[dict] | None = None,
                   force: bool = False, arrays: Mapping[str, np.ndarray] | None = None,
                   files: Mapping[str, generations.FileWriter] | None = None, extra: Mapping[str, Any] | None = None,
                   documents: Mapping[str, Any] | None = None, queries: np.ndarray | None = None,
                   recall: float = 0.95, memory_budget: str | int | None = None) -> Path:
    """See `Collection.from_vectors`; returns the collection's folder."""
    path = collection_path(name, root)
    if (path / MANIFEST).exists() and not force:
        raise EngineError(f"collection {name!r} already exists in {path.parent}/; rebuild it with "
                          f"{opt('force')}")
    vectors = np.asarray(vectors)  # normalized block by block below: no full-size copy (build memory)
    if vectors.ndim != 2 or len(ids) != len(vectors) or (meta is not None and len(meta) != len(ids)):
        raise EngineError(f"{len(ids)} ids, {len(vectors)} vectors and {len(meta or ids)} metadata rows must match")
    check_unique([str(i) for i in ids], "id", name)
    items = ({"id": str(i), **(meta[n] if meta is not None else {})} for n, i in enumerate(ids))
    if index == "auto":
        label = "the vectors users send"
        if queries is None:
            rows = np.sort(np.random.default_rng(0).choice(len(vectors), min(500, len(vectors)), replace=False))
            queries, label = vectors[rows], f"{len(rows)} of the collection's own vectors"
        faiss_index, choice = choose(vectors, l2_normalize(np.atleast_2d(queries)), recall,
                                     parse_bytes(None if memory_budget is None else str(memory_budget)), label,
                                     normalize=True)
        manifest = new_manifest(name, kind, encoder_spec, int(vectors.shape[1]), choice.factory, ["vectors"],
                                recall_at_10=choice.recall, index_choice=choice.manifest())
        manifest["search_params"] = choice.params
    else:
        manifest = new_manifest(name, kind, encoder_spec, int(vectors.shape[1]), index, ["vectors"])
        faiss_index = FlatFile(vectors, normalize=True) if index == "Flat" else \
            build_index(vectors, index, normalize=True)
    with writer_lock(path):
        commit_collection(path, manifest, vectors, items, faiss_index, arrays, files, extra, documents,
                          count=len(ids), normalize=True)
    return path
