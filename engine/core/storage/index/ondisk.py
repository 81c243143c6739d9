"""IVF indexes that no one process holds: trained once on a sample, filled shard by shard (in Ray tasks
or here), and merged into one set of inverted lists on disk (FAISS's `merge_ondisk` and
`OnDiskInvertedLists`), memory-mapped at search.

    index-G/index.json       {"layout": "ondisk-ivf"}
    index-G/index.faiss      the quantizer and the list headers
    index-G/lists.ivfdata    every inverted list, read through mmap

A shard's vectors come as an array (a Ray object on a cluster) or as a `.npy` path that the worker
memory-maps (a shared disk); the driver sees one shard's lists at a time, never the whole index.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence, Union

import numpy as np

from engine.core.storage.store.generations import FileWriter
from engine.core.storage.store.npy_rows import BLOCK, NpyRows, pwrite_all

LAYOUT_FILE = "index.json"
INDEX_FILE = "index.faiss"
LISTS_FILE = "lists.ivfdata"
RELEASE_BYTES = 256 << 20
"""Most bytes of inverted lists `OnDiskIVF.search_released` maps before it lets them go (a larger list alone)."""
RELEASE_BATCH = 16
"""Queries per released batch when the index is not a plain IVF (a transform before it)."""
Source = Union[np.ndarray, NpyRows, str, Path]
"""A shard's rows: an array, rows of `.npy` files (`NpyRows`: read where the shard is filled, a Ray task
included), or a `.npy` file read with mmap where the shard is filled."""


@contextmanager
def faiss_notes_silenced() -> Iterator[None]:
    """FAISS's on-disk code prints notes ("resizing …", "updating ondisk filename …") on C stdout, which is
    kept for results (`--json`): they are dropped."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def is_ivf(factory: str) -> bool:
    return re.search(r"(^|,)IVF\d+", factory.replace(" ", "")) is not None


def rows_of(source: Source) -> np.ndarray:
    return np.load(source, mmap_mode="r") if isinstance(source, (str, Path)) else source


def source_lengths(sources: Sequence[Source]) -> list[int]:
    return [len(rows_of(s)) for s in sources]


def training_sample(sources: Sequence[Source], factory: str) -> np.ndarray:
    """The rows `build_index` would train on (a sorted sample: in row order), gathered shard by shard (so never
    the whole matrix); one source's sample is its only copy."""
    from engine.core.storage.index.faiss_index import training_rows
    lengths = source_lengths(sources)
    pick = training_rows(sum(lengths), factory)
    parts, start = [], 0
    for source, n in zip(sources, lengths):
        x = rows_of(source)
        if pick is None:
            parts.append(np.asarray(x, dtype=np.float32))
        else:
            parts.append(np.asarray(x[pick[(pick >= start) & (pick < start + n)] - start], dtype=np.float32))
        start += n
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def trained_empty(factory: str, sources: Sequence[Source]):
    """An empty index of `factory` trained once, on the sample, with the engine's search parameters."""
    import faiss
    from engine.core.storage.index.faiss_index import build_index
    d = int(rows_of(sources[0]).shape[1])
    try:
        untrained = not faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT).is_trained
    except RuntimeError:
        untrained = False  # build_index says what is wrong with the factory
    sample = training_sample(sources, factory) if untrained else np.zeros((0, d), np.float32)
    return build_index(sample, factory, fill=False)


def fill_shard(trained: np.ndarray, source: Source, first_id: int | None) -> np.ndarray:
    """A copy of the trained index holding one shard's rows (ids from `first_id` when given), serialized.
    Runs where the shard is filled: a Ray task or this process."""
    import faiss
    index = faiss.deserialize_index(trained)
    x = np.ascontiguousarray(rows_of(source), dtype=np.float32)
    if first_id is None:
        index.add(x)
    else:
        index.add_with_ids(x, np.arange(first_id, first_id + len(x), dtype=np.int64))
    return faiss.serialize_index(index)


def fill_shards(trained, sources: Sequence[Source], on_ray: bool, global_ids: bool):
    """(shard number, serialized filled shard) as each is done: Ray tasks in parallel, or one by one here."""
    import faiss
    blob = faiss.serialize_index(trained)
    lengths = source_lengths(sources)
    firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int).tolist() if lengths else []
    if not on_ray:
        for s, source in enumerate(sources):
            yield s, fill_shard(blob, source, firsts[s] if global_ids else None)
        return
    from engine.core.cluster import TASK_RETRIES, import_ray
    ray = import_ray()
    task = ray.remote(max_retries=TASK_RETRIES)(fill_shard)
    blob_ref = ray.put(blob)
    refs = {task.remote(blob_ref, s if isinstance(s, (str, Path, NpyRows)) else ray.put(np.asarray(s)),
                        f if global_ids else None): n for n, (s, f) in enumerate(zip(sources, firsts))}
    while refs:
        ready, _ = ray.wait(list(refs), num_returns=1)
        yield refs.pop(ready[0]), ray.get(ready[0])


class OnDiskIVF:
    """A merged on-disk IVF index (searchable) and the folder that holds it."""

    def __init__(self, folder: Path, index):
        self.folder, self.index = Path(folder), index

    @classmethod
    def load(cls, folder: Path, params: dict[str, int] | None = None) -> "OnDiskIVF":
        import faiss
        from engine.core.storage.index.faiss_index import apply_search_params
        with faiss_notes_silenced():
            index = faiss.read_index(str(Path(folder) / INDEX_FILE), faiss.IO_FLAG_ONDISK_SAME_DIR)
        apply_search_params(index, params or {})
        return cls(folder, index)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def d(self) -> int:
        return int(self.index.d)

    def search(self, queries: np.ndarray, k: int):
        return self.index.search(queries, k)

    def search_released(self, queries: np.ndarray, k: int, max_bytes: int = RELEASE_BYTES):
        """`search`'s results (ties at the k-th score aside) with at most `max_bytes` of lists mapped at once (or
        one larger list): the probed lists are taken in groups, each searched for every query probing it
        (`search_preassigned`), released, and the groups' top-k merged. Every list is read once. A build
        measures its recall so over an on-disk index far larger than its memory (mapped pages count as the
        process's own until released)."""
        import faiss
        from engine.io.ranking import merge_top_k
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if not isinstance(faiss.downcast_index(self.index), faiss.IndexIVF):  # a transform first: batches
            parts = []
            for lo in range(0, len(queries), RELEASE_BATCH):
                parts.append(self.search(queries[lo:lo + RELEASE_BATCH], k))
                self.release()
            return tuple(np.concatenate(p) if parts else np.zeros((0, k)) for p in zip(*parts))
        ivf = faiss_ivf(self.index)
        dq, iq = ivf.quantizer.search(queries, int(ivf.nprobe))
        sizes = np.array([ivf.invlists.list_size(i) for i in range(ivf.nlist)], np.int64) * (ivf.code_size + 8)
        best = (np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64))
        for group in list_groups(np.unique(iq[iq >= 0]), sizes, max_bytes):
            probes = np.isin(iq, group)
            rows = np.flatnonzero(probes.any(axis=1))
            d, i = faiss_ivf(self.index).search_preassigned(queries[rows], k, np.where(probes[rows], iq[rows], -1),
                                                            dq[rows])
            self.release()
            merged = merge_top_k([(best[0][rows], best[1][rows]), (d, i)], [0, 0], k)
            best[0][rows], best[1][rows] = merged
        return best

    def release(self) -> None:
        """Drop the mapped pages searches touched (the index is opened again): a build that searches a large
        on-disk index, to measure its recall, keeps its memory bounded."""
        params = {"nprobe": int(faiss_ivf(self.index).nprobe)}
        del self.index
        self.index = OnDiskIVF.load(self.folder, params).index

    def memory_bytes(self) -> int:
        """What search keeps resident besides the mapped lists: the quantizer and the list headers."""
        return (self.folder / INDEX_FILE).stat().st_size

    def writer(self) -> FileWriter:
        """The collection's `index` role: the folder's files moved (not copied) into the new generation."""
        def write(target: Path) -> None:
            target.mkdir(parents=True, exist_ok=True)
            for name in (INDEX_FILE, LISTS_FILE):
                os.replace(self.folder / name, target / name)
            (target / LAYOUT_FILE).write_text(json.dumps({"layout": "ondisk-ivf"}))
        return FileWriter("", write)


def list_groups(lists: np.ndarray, list_bytes: np.ndarray, max_bytes: int) -> list[np.ndarray]:
    """`lists` (in file order) cut into runs of at most `max_bytes` of `list_bytes` each; a larger list alone."""
    groups: list[np.ndarray] = []
    start, total = 0, 0
    for at, li in enumerate(lists):
        size = int(list_bytes[li])
        if at > start and total + size > max_bytes:
            groups.append(lists[start:at])
            start, total = at, 0
        total += size
    if len(lists) > start:
        groups.append(lists[start:])
    return groups


def build_ivf_on_disk(sources: Sequence[Source], factory: str, folder: str | Path, on_ray: bool) -> OnDiskIVF:
    """Train on a sample, fill one index per source (in parallel on Ray), merge their lists on disk."""
    import faiss
    from faiss.contrib.ondisk import merge_ondisk
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    trained = trained_empty(factory, sources)
    shard_files = []
    for s, blob in fill_shards(trained, sources, on_ray, global_ids=True):
        path = folder / f"shard-{s:04d}.faiss"
        blob.tofile(path)  # a serialized index is the file write_index writes
        shard_files.append((s, str(path)))
        del blob
    with faiss_notes_silenced():
        merge_ondisk(trained, [p for _, p in sorted(shard_files)], str(folder / LISTS_FILE))
    faiss.write_index(trained, str(folder / INDEX_FILE))
    del trained
    for _, path in shard_files:
        os.unlink(path)
    from engine.core.storage.index.faiss_index import default_search_params
    return OnDiskIVF.load(folder, default_search_params(factory))


def faiss_ivf(index):
    import faiss
    return faiss.extract_index_ivf(index)


def build_ivf_blocks(rows: NpyRows | np.ndarray, factory: str, folder: str | Path, trained_file: Path | None = None,
                     block: int = BLOCK) -> OnDiskIVF:
    """An on-disk IVF over rows read block by block, in this process, never holding its lists: trained on the
    capped sample (saved to `trained_file`, reused by a resumed build), every row's list found (pass 1), the
    lists' file laid out at their final sizes, then each block's codes and ids written in place (`pwrite`,
    pass 2). Memory: a block, the quantizer, 4 bytes a row for its list. Factories with a transform before
    the IVF (OPQ, PCA) take `build_ivf_on_disk`'s shard-and-merge way."""
    import faiss
    folder = Path(folder)
    trained = _trained(rows, factory, trained_file)
    if not isinstance(faiss.downcast_index(trained), faiss.IndexIVF):
        return build_ivf_on_disk([rows], factory, folder, on_ray=False)
    ivf = faiss.extract_index_ivf(trained)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    n, nlist, code_size = len(rows), int(ivf.nlist), int(ivf.code_size)
    lists = np.empty(n, np.int32)
    for lo in range(0, n, block):
        lists[lo:lo + block] = _assign(ivf, np.ascontiguousarray(rows[lo:lo + block], dtype=np.float32))
    sizes = np.bincount(lists, minlength=nlist).astype(np.uint64)
    starts = np.concatenate([[0], np.cumsum(sizes * (code_size + 8))[:-1]]).astype(np.int64)
    path = folder / LISTS_FILE
    invlists = faiss.OnDiskInvertedLists(nlist, code_size, str(path))
    with faiss_notes_silenced():
        invlists.update_totsize(int(max(1, sizes.sum() * (code_size + 8))))
    invlists.set_all_lists_sizes(faiss.swig_ptr(sizes))  # contiguous lists, capacity = size: `starts`
    fill = np.zeros(nlist, np.int64)
    fd = os.open(path, os.O_WRONLY)
    try:
        for lo in range(0, n, block):
            x = np.ascontiguousarray(rows[lo:lo + block], dtype=np.float32)
            own = lists[lo:lo + len(x)]
            codes = _codes(ivf, x, own)
            order = np.argsort(own, kind="stable")
            codes, ids, own = codes[order], (lo + order).astype(np.int64), own[order]
            heads = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
            for a, b in zip(heads, np.r_[heads[1:], len(own)]):
                li = int(own[a])
                pwrite_all(fd, codes[a:b], int(starts[li]) + int(fill[li]) * code_size)
                pwrite_all(fd, ids[a:b], int(starts[li]) + int(sizes[li]) * code_size + int(fill[li]) * 8)
                fill[li] += b - a
    finally:
        os.close(fd)
    ivf.replace_invlists(invlists, True)
    invlists.this.disown()
    ivf.ntotal = trained.ntotal = n
    faiss.write_index(trained, str(folder / INDEX_FILE))
    del trained, invlists
    from engine.core.storage.index.faiss_index import default_search_params
    return OnDiskIVF.load(folder, default_search_params(factory))


def _trained(rows, factory: str, trained_file: Path | None):
    import faiss
    if trained_file is not None and trained_file.is_file():
        return faiss.read_index(str(trained_file))
    trained = trained_empty(factory, [rows])
    if trained_file is not None:
        from engine.io.atomic import atomic_path
        with atomic_path(trained_file) as tmp:
            faiss.write_index(trained, str(tmp))
    return trained


def _assign(ivf, x: np.ndarray) -> np.ndarray:
    return ivf.quantizer.search(x, 1)[1][:, 0].astype(np.int32)


def _codes(ivf, x: np.ndarray, lists: np.ndarray) -> np.ndarray:
    """The codes an IVF stores for rows of `x` in `lists` (IVF-Flat: the floats themselves)."""
    import faiss
    codes = np.empty((len(x), int(ivf.code_size)), np.uint8)
    if len(x):
        ivf.encode_vectors(len(x), faiss.swig_ptr(x), faiss.swig_ptr(lists.astype(np.int64)), faiss.swig_ptr(codes))
    return codes
