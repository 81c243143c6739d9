"""FAISS indexes over L2-normalized vectors (inner product = cosine), named by factory strings.

Exact search of a large collection goes through BLAS for any batch of queries: FAISS (1.15) switches to its
matrix product only when queries × dim reach 128,000, so a batch of 64 at 512-d would scan as slowly as
64 single queries (`use_blas_for`); a single query keeps FAISS's own one-thread scan. Query-time knobs (nprobe, efSearch, k_factor) can be overridden per call.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.core.storage.store.structure import VECTORS_IN, flat_ip_header
from engine.io.ranking import merge_top_k
from engine.errors import EngineError, opt

EXACT = "Flat"
STORES = {"float32": "Flat", "float16": "SQfp16", "sq8": "SQ8"}
"""`--store` for exact search: how the scanned vectors are kept (SQfp16: half the bytes, recall@10 ≈ 0.998)."""
TRAIN_CAP = 100_000
"""Most points an index trains on (at least 40 per IVF list): training cost and memory stay flat at 1M+."""
DEFAULT_K_FACTOR = 8
"""Candidates a refine stage re-ranks exactly, per result (`…,RFlat`): 1 leaves recall at the PQ's."""
_KNOBS = {"nprobe": "nprobe", "ef": "efSearch", "k_factor": "k_factor_rf"}
_KNOB_INDEX = {"nprobe": "an IVF index", "efSearch": "an HNSW index", "k_factor_rf": "a refined index (…,RFlat)"}
_lock = threading.Lock()
_FAISS_BLAS: dict[str, int] = {}
BLAS_MIN_BYTES = 32 << 20
"""Collections of at least this many bytes of vectors are scanned with BLAS at every batch size."""


def faiss_module():
    """faiss, its BLAS threshold remembered before the engine changes it (see `use_blas_for`)."""
    import faiss
    _FAISS_BLAS.setdefault("threshold", int(faiss.cvar.distance_compute_blas_threshold))
    return faiss


def use_blas_for(index, n_queries: int) -> None:
    """Exact scans of a collection bigger than the CPU caches go through BLAS for every batch of queries:
    FAISS's own path scans all the vectors once per query below its threshold (batch 64 at 1M × 512 then reads
    128 GB), while BLAS reads them once per block of queries. A single query stays on FAISS's own scan, which
    reads the vectors once too, on one thread (`use_threads_for`): BLAS would wake all its threads for a
    matrix-vector product (200k × 384 on 2 busy cores: 54 CPU ms a query against 22, benchmarks/peers.py
    --only vectors). Small collections stay on FAISS's default, which is faster while they sit in cache.
    (A process-wide FAISS setting: it only changes speed, never results.)"""
    faiss = faiss_module()
    big = int(getattr(index, "ntotal", 0)) * int(getattr(index, "d", 0)) * 4 >= BLAS_MIN_BYTES
    faiss.cvar.distance_compute_blas_threshold = 1 if big and n_queries > 1 else _FAISS_BLAS["threshold"]


def is_exact(factory: str) -> bool:
    return factory.replace(" ", "") in ("Flat", "IDMap,Flat")


def store_factory(store: str) -> str:
    """The exact-search factory string for a `--store` choice."""
    if store not in STORES:
        raise EngineError(f"{opt('store')} must be one of {', '.join(STORES)}, not {store!r}")
    return STORES[store]


def default_search_params(factory: str) -> dict[str, int]:
    """Search-time knobs worth setting: nprobe for IVF, efSearch for HNSW, k_factor for a refine stage
    (FAISS's defaults are too low)."""
    params: dict[str, int] = {}
    m = re.search(r"IVF(\d+)", factory)
    if m:
        params["nprobe"] = max(1, min(int(m.group(1)), 32))
    if "HNSW" in factory:
        params["efSearch"] = 128
    if "RFlat" in factory or "Refine" in factory:
        params["k_factor_rf"] = DEFAULT_K_FACTOR
    return params


def apply_search_params(index, params: dict) -> None:
    faiss = faiss_module()
    space = faiss.ParameterSpace()
    for name, value in params.items():
        try:
            space.set_index_parameter(index, name, float(value))
        except RuntimeError:
            user = next((u for u, f in _KNOBS.items() if f == name), name)
            raise EngineError(f"{opt(user)} applies to {_KNOB_INDEX.get(name, 'another index')}; "
                              f"this index is {type(faiss.downcast_index(index)).__name__}") from None


@dataclass(frozen=True)
class SearchKnobs:
    """Query-time overrides of an approximate index's operating point (None: the stored value)."""
    nprobe: int | None = None      # IVF lists visited
    ef: int | None = None          # HNSW efSearch
    k_factor: float | None = None  # refine stage: candidates per result re-ranked exactly

    def params(self) -> dict[str, float]:
        out = {}
        for user, name in _KNOBS.items():
            value = getattr(self, user)
            if value is not None:
                if value < 1:
                    raise EngineError(f"{opt(user)} must be at least 1, not {value}")
                out[name] = value
        return out


def check_knobs(factory: str, params: dict) -> None:
    """Knobs that the index a factory string names has, checked before any query is encoded."""
    has = {"nprobe": "IVF" in factory, "efSearch": "HNSW" in factory,
           "k_factor_rf": "RFlat" in factory or "Refine" in factory}
    for name in params:
        if not has.get(name, False):
            user = next((u for u, f in _KNOBS.items() if f == name), name)
            raise EngineError(f"{opt(user)} applies to {_KNOB_INDEX.get(name, 'another index')}; this collection's "
                              f"index is {factory}")


SINGLE_THREAD_WORK = 2 << 30
"""Searches of fewer multiply-adds than this (queries × vectors × dim) run on one FAISS thread. Measured on
2 shared cores (benchmarks/serve_threads.py): one thread was as fast or faster at every size the service
forms (1–32 queries over 20k–100k × 384); two threads after an onnxruntime call took 1.5–2× as long on 20k,
and 20–40× as long (9–10 s) on 100k with batches of 8 and 32, where BLAS's and OpenMP's threads wait on
each other. Only bigger searches (`search --queries` files over large collections) use every core."""


def use_threads_for(index, n_queries: int) -> None:
    """One OpenMP thread for small searches, every core for big ones (per calling thread in libgomp)."""
    faiss = faiss_module()
    _FAISS_BLAS.setdefault("threads", int(faiss.omp_get_max_threads()))
    work = n_queries * int(getattr(index, "ntotal", 0)) * int(getattr(index, "d", 0))
    faiss.omp_set_num_threads(1 if work < SINGLE_THREAD_WORK else _FAISS_BLAS["threads"])


def search_index(index, queries: np.ndarray, k: int, stored: dict | None = None, override: dict | None = None):
    """index.search with `override` knobs for this call; the stored ones are put back afterwards."""
    use_blas_for(index, len(queries))
    use_threads_for(index, len(queries))
    if not override:
        return index.search(queries, k)
    parts = getattr(index, "shards", None) or [getattr(index, "index", index)]  # a folder index: its FAISS parts
    with _lock:
        for part in parts:
            apply_search_params(part, override)
        try:
            return index.search(queries, k)
        finally:
            back = {name: (stored or {}).get(name) for name in override}
            for part in parts:
                apply_search_params(part, {n: v for n, v in back.items() if v is not None})


def _min_training_points(factory: str) -> int:
    need = 1
    m = re.search(r"IVF(\d+)", factory)
    if m:
        need = max(need, int(m.group(1)))
    m = re.search(r"PQ(\d+)(?:x(\d+))?", factory)
    if m:
        need = max(need, 2 ** int(m.group(2) or 8))
    return need


def training_rows(n: int, factory: str) -> np.ndarray | None:
    """Rows a factory is trained on: all of them (None), or a sorted sample of `TRAIN_CAP` (at least 40 per
    centroid) when there are more: FAISS samples anyway, and the sample bounds memory."""
    cap = max(TRAIN_CAP, 40 * _min_training_points(factory))
    return np.sort(np.random.default_rng(0).choice(n, cap, replace=False)) if n > cap else None


def build_index(vectors: np.ndarray, factory: str = EXACT, normalize: bool = False, block: int = 65536,
                fill: bool = True):
    """A trained index, filled with `vectors` unless `fill` is False (then they are only its training set).
    A factory that needs more training points than there are vectors is refused. Vectors are added block by
    block (`normalize`: each block L2-normalized on the way), training uses at most `TRAIN_CAP` points:
    beside the index itself, memory stays at one block."""
    from engine.core.encoders.base import l2_normalize
    faiss = faiss_module()
    prep = l2_normalize if normalize else (lambda x: np.ascontiguousarray(x, dtype=np.float32))
    n, dim = vectors.shape
    try:
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise EngineError(f"FAISS cannot make index {factory!r} for {dim}-d vectors ({msg}); "
                          f"try Flat, HNSW32, IVF1024,Flat or IVF1024,PQ{_pq_hint(dim)}") from None
    if not index.is_trained:
        need = _min_training_points(factory)
        if n < need:
            raise EngineError(f"index {factory!r} needs at least {need} vectors to train, the collection has {n}; "
                              f"use a smaller index (e.g. IVF{max(1, n // 39)},Flat, HNSW32) or Flat")
        rows = training_rows(n, factory)
        index.train(prep(vectors if rows is None else vectors[rows]))
    for lo in range(0, n if fill else 0, block):
        index.add(prep(vectors[lo:lo + block]))
    apply_search_params(index, default_search_params(factory))
    return index


def _pq_hint(dim: int) -> int:
    for m in (64, 48, 32, 16, 8, 4):
        if dim % m == 0:
            return m
    return 1


@dataclass(frozen=True)
class FlatFile:
    """An exact (Flat, inner product) index that is only ever written: its file is streamed block by block from
    the vectors, so building a Flat collection holds no second copy of them (build memory ≈ the vectors)."""
    vectors: np.ndarray
    normalize: bool = False
    block: int = 65536

    @property
    def ntotal(self) -> int:
        return len(self.vectors)

    def write(self, path) -> None:
        """FAISS's own layout: the header of an empty IndexFlatIP with ntotal and the code count filled in, then
        the float32 rows (tests/core/test_query_path_and_stores.py checks it byte for byte against faiss.write_index)."""
        from engine.core.encoders.base import l2_normalize
        faiss = faiss_module()
        n, dim = self.vectors.shape
        header = bytearray(faiss.serialize_index(faiss.IndexFlatIP(dim)).tobytes())
        if len(header) != 45 or header[:4] != b"IxFI":  # a layout this writer does not know: let FAISS write
            index = faiss.IndexFlatIP(dim)
            for lo in range(0, n, self.block):
                part = self.vectors[lo:lo + self.block]
                index.add(l2_normalize(part) if self.normalize else np.ascontiguousarray(part, np.float32))
            faiss.write_index(index, str(path))
            return
        header[8:16] = np.int64(n).tobytes()
        header[37:45] = np.uint64(n * dim).tobytes()
        with open(path, "wb") as fh:
            fh.write(header)
            for lo in range(0, n, self.block):
                part = np.asarray(self.vectors[lo:lo + self.block], dtype=np.float32)
                fh.write(np.ascontiguousarray(l2_normalize(part) if self.normalize else part).tobytes())

    def write_header(self, path) -> None:
        """Only the header of the index `write` writes (its count and width, no rows): the collection's
        embeddings role holds the rows (`read_flat_over`), so each vector is written once. Made without
        importing FAISS (`flat_ip_header`, the layout the store checks on open)."""
        n, dim = self.vectors.shape
        with open(path, "wb") as fh:
            fh.write(flat_ip_header(n, dim))


def save_collection_index(index, path, manifest: dict, header_only: bool) -> None:
    """A collection's `index` role: a Flat index as a header over the embeddings role (`header_only`: the
    embeddings written are the index's rows), any other index whole; `manifest` records which and the
    index's resident bytes."""
    if header_only and isinstance(index, FlatFile):
        index.write_header(path)
        manifest[VECTORS_IN] = "embeddings"
        manifest["index_bytes"] = int(index.vectors.shape[0]) * int(index.vectors.shape[1]) * 4
        return
    manifest.pop(VECTORS_IN, None)
    save_index(index, path)
    manifest["index_bytes"] = Path(path).stat().st_size  # serialized size: a close proxy for resident memory


def read_flat_over(embeddings, params: dict[str, int] | None = None):
    """The exact index of a collection whose index file is a header (`VECTORS_IN`): an `IndexFlatIP` whose
    rows are read from the embeddings `.npy` straight into FAISS's own buffer (one read, as FAISS reads its
    Flat file: no memory map beside it, no second copy), so the same rows give the same results as the
    Flat file an older collection holds."""
    faiss = faiss_module()
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    with open(embeddings, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        (n, dim), fortran, dtype = readers[version](fh) if version in readers else ((0, 0), True, None)
        index = faiss.IndexFlatIP(int(dim)) if not fortran and dtype == np.dtype("<f4") else None
        if index is None or not hasattr(index.codes, "resize"):
            return _flat_by_blocks(embeddings, params)
        size = int(n) * int(dim) * 4
        index.codes.resize(size)
        view = memoryview(faiss.rev_swig_ptr(index.codes.data(), size)) if size else memoryview(b"")
        got = 0
        while got < size:
            read = fh.readinto(view[got:])
            if not read:
                raise EngineError(f"{embeddings} ends before its {n} × {dim} vectors")
            got += read
        index.ntotal = int(n)
    apply_search_params(index, params or {})
    return index


def _flat_by_blocks(embeddings, params: dict[str, int] | None, block: int = 65536):
    """`read_flat_over` for an array it does not read whole (another dtype, order or header version): added
    block by block."""
    emb = np.load(embeddings, mmap_mode="r")
    index = faiss_module().IndexFlatIP(int(emb.shape[1]))
    for lo in range(0, len(emb), block):
        index.add(np.ascontiguousarray(emb[lo:lo + block], dtype=np.float32))
    apply_search_params(index, params or {})
    return index


def save_index(index, path) -> None:
    if isinstance(index, FlatFile):
        index.write(path)
        return
    faiss = faiss_module()
    faiss.write_index(index, str(path))


def read_index_file(path, params: dict[str, int] | None = None):
    """One `.faiss` file with its query-time knobs set (a folder index: `engine.core.storage.index.loading`)."""
    faiss = faiss_module()
    index = faiss.read_index(str(path))
    apply_search_params(index, params or {})
    return index


def exact_top_k(vectors, queries: np.ndarray, k: int, block: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k (scores, rows) of `queries` over `vectors` (an array or anything sliced by
    rows, such as `NpyRows`), block by block: memory is one block, never a copy of the vectors."""
    faiss = faiss_module()
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    best = (np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64))
    for lo in range(0, len(vectors), block):
        part = np.ascontiguousarray(vectors[lo:lo + block], dtype=np.float32)
        best = merge_top_k([best, faiss.knn(queries, part, min(k, len(part)), metric=faiss.METRIC_INNER_PRODUCT)],
                           [0, lo], k)
    return best


def recall_at_k(index, vectors, queries: np.ndarray, k: int = 10) -> float:
    """Share of the exact top-k that the index also returns in its top-k (ties at the cut tolerated). The
    truth is computed block by block; an index that maps its lists from disk (an on-disk IVF) is searched with
    `search_released`, so its lists never all stay resident."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(k, len(vectors))
    if k == 0 or len(queries) == 0:
        return 1.0
    d_true, i_true = exact_top_k(vectors, queries, k)
    _, i_got = (index.search_released if hasattr(index, "search_released") else index.search)(queries, k)
    hits = 0
    for q, got_row in enumerate(i_got):
        got, true = set(got_row[got_row >= 0].tolist()), set(i_true[q].tolist())
        extra = sorted(got - true)
        hits += len(got & true)
        if extra:  # a returned row whose exact score ties the k-th is as good as the one it displaced
            scores = np.asarray(vectors[np.asarray(extra)], dtype=np.float32) @ queries[q]
            hits += int((scores >= d_true[q, -1] - 1e-6).sum())
    return hits / (len(queries) * k)


def check_factory(factory: str) -> None:
    """Refuse a factory string FAISS cannot parse before anything is encoded: it is tried at the usual
    encoder widths, and only a string none of them takes is an error (a width it needs is checked at build)."""
    import faiss
    errors = []
    for dim in (384, 512, 768, 1024, 1280, 1536):
        try:
            faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
            return
        except RuntimeError as exc:
            errors.append(str(exc).strip().rsplit(": ", 1)[-1] if str(exc).strip() else type(exc).__name__)
    raise EngineError(f"FAISS cannot make index {factory!r} ({errors[0]}); try Flat, HNSW32, IVF1024,Flat "
                      "or IVF1024,PQ32")
