"""Sharded collections: the rows split into N contiguous shards, one FAISS index each (trained once, on the
sample a single index would train on), searched side by side (threads here, or Ray actors) and merged
into the exact top-k of one index over all rows.

    index-G/index.json        {"layout": "shards", "rows": [n_0, n_1, …]}
    index-G/shard-0000.faiss  rows 0 … n_0-1, then the next shard, …

Also the one place a folder `index` role is opened: sharded, or an IVF merged on disk (`engine.core.storage.index.ondisk`).
Exactness: a shard returns its own top-k; the best k of all shards' lists (ties by row, as in one index) is
the top-k of the union. With a shared IVF quantizer each query probes the same lists in every shard, so an
IVF collection's sharded results are its unsharded ones too.
"""
from __future__ import annotations

import json
from itertools import pairwise
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.storage.index.faiss_index import build_index, read_index_file
from engine.core.storage.index.ondisk import LAYOUT_FILE, OnDiskIVF, build_ivf_on_disk, fill_shards, is_ivf, trained_empty
from engine.io.ranking import merge_top_k
from engine.core.storage.store.generations import FileWriter
from engine.core.storage.store.npy_rows import NpyRows
from engine.errors import EngineError, opt


def split_rows(n: int, shards: int) -> list[tuple[int, int]]:
    """(lo, hi) of each of `shards` contiguous, near-equal shards of n rows."""
    edges = np.linspace(0, n, shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in pairwise(edges)]


class ShardedIndex:
    """N FAISS indexes over consecutive rows, searched as one."""

    def __init__(self, shards: list, folder: Path | None = None):
        self.shards, self.folder = shards, folder
        self.rows = [int(s.ntotal) for s in shards]
        self.offsets = np.concatenate([[0], np.cumsum(self.rows)[:-1]]).astype(int).tolist()
        self._actors: list | None = None

    @classmethod
    def load(cls, folder: Path, rows: Sequence[int], params: dict[str, int]) -> "ShardedIndex":
        shards = [read_index_file(folder / f"shard-{s:04d}.faiss", params) for s in range(len(rows))]
        if [int(x.ntotal) for x in shards] != list(rows):
            raise EngineError(f"{folder}: shard sizes do not match {folder / LAYOUT_FILE}")
        return cls(shards, folder)

    @property
    def ntotal(self) -> int:
        return sum(self.rows)

    @property
    def d(self) -> int:
        return int(self.shards[0].d)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self._actors is not None:
            import ray
            results = ray.get([a.search.remote(queries, k) for a in self._actors])
        else:
            with ThreadPoolExecutor(max_workers=len(self.shards)) as pool:  # FAISS releases the GIL
                results = list(pool.map(lambda s: s.search(queries, k), self.shards))
        return merge_top_k(results, self.offsets, k)

    def on_ray(self) -> "ShardedIndex":
        """Search from now on fans out to one Ray actor per shard (each loads its shard file once)."""
        if self.folder is None:
            raise EngineError("only a stored sharded collection can be searched on Ray")
        from engine.core.cluster import import_ray
        ray = import_ray()
        actor = ray.remote(_ShardSearcher)
        self._actors = [actor.remote(str(self.folder / f"shard-{n:04d}.faiss"), _params(s))
                        for n, s in enumerate(self.shards)]
        return self

    def memory_bytes(self) -> int:
        import faiss
        return sum(int(faiss.serialize_index(s).nbytes) for s in self.shards)

    def writer(self) -> FileWriter:
        def write(target: Path) -> None:
            import faiss
            target.mkdir(parents=True, exist_ok=True)
            for n, shard in enumerate(self.shards):
                faiss.write_index(shard, str(target / f"shard-{n:04d}.faiss"))
            (target / LAYOUT_FILE).write_text(json.dumps({"layout": "shards", "rows": self.rows}))
        return FileWriter("", write)


def _params(index) -> dict[str, int]:
    import faiss
    ivf = faiss.try_extract_index_ivf(index)
    return {"nprobe": int(ivf.nprobe)} if ivf is not None else {}


class _ShardSearcher:
    """A Ray actor holding one shard."""

    def __init__(self, path: str, params: dict[str, int]):
        self.index = read_index_file(path, params)

    def search(self, queries: np.ndarray, k: int):
        return self.index.search(queries, k)


def row_range(emb, lo: int, hi: int):
    """Rows [lo, hi): a view (rows on disk stay unread until the shard is filled, in a Ray task or here)."""
    return emb.view(lo, hi) if isinstance(emb, NpyRows) else emb[lo:hi]


def build_sharded(emb: np.ndarray, factory: str, shards: int, on_ray: bool) -> ShardedIndex:
    """Train once (untrained factories: nothing to train), then fill each shard (in Ray tasks if asked)."""
    import faiss
    bounds = split_rows(len(emb), min(shards, max(1, len(emb))))
    sources = [row_range(emb, lo, hi) for lo, hi in bounds]
    trained = trained_empty(factory, sources)
    filled = dict(fill_shards(trained, sources, on_ray, global_ids=False))
    return ShardedIndex([faiss.deserialize_index(filled[s]) for s in range(len(sources))])


def build_scaled_index(emb: np.ndarray, factory: str, shards: int, on_ray: bool, workdir: Path):
    """The index of a sharded or distributed build: N shards; on Ray, an IVF merged on disk (the shards the
    workers fill, as many as the cluster has CPUs); exact and SQ indexes are the shards concatenated, which
    for them is the index over all rows (`build_index`)."""
    if shards > 1:
        return build_sharded(emb, factory, shards, on_ray)
    if on_ray and is_ivf(factory):
        from engine.core.cluster import cluster_resources
        n = max(1, min(cluster_resources()[0], len(emb)))
        return build_ivf_on_disk([row_range(emb, lo, hi) for lo, hi in split_rows(len(emb), n)], factory, workdir / "ivf",
                                 on_ray=True)
    return build_index(emb, factory)


def search_on_ray(col) -> None:
    """A sharded collection's search fans out to Ray actors from now on (Ray must be running)."""
    index = col.index
    if not isinstance(index, ShardedIndex):
        raise EngineError(f"collection {col.name!r} is not sharded; searching on Ray needs a collection built "
                          f"with {opt('shards')} N")
    index.on_ray()


def load_index_folder(folder: Path, params: dict[str, int]):
    """A folder `index` role: shards or an on-disk IVF, as its index.json says."""
    try:
        layout = json.loads((folder / LAYOUT_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"{folder / LAYOUT_FILE}: unreadable ({exc})") from None
    if layout.get("layout") == "shards":
        return ShardedIndex.load(folder, layout["rows"], params)
    if layout.get("layout") == "ondisk-ivf":
        return OnDiskIVF.load(folder, params)
    raise EngineError(f"{folder / LAYOUT_FILE}: unknown index layout {layout.get('layout')!r}")

