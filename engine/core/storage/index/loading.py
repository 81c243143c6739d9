"""An index role as it lies on disk: one `.faiss` file, or a folder whose layout file names shards or an
on-disk IVF. The one place that tells them apart, above the modules that read each."""
from __future__ import annotations

from pathlib import Path

from engine.core.storage.index.faiss_index import read_index_file


def load_index(path, params: dict[str, int] | None = None):
    """The index at `path` (file or folder), searching with `params` (nprobe, efSearch, k_factor_rf)."""
    if Path(path).is_dir():  # shards or an on-disk IVF: their modules load only for such a collection
        from engine.core.storage.index.shards import load_index_folder
        return load_index_folder(Path(path), params or {})
    return read_index_file(path, params)
