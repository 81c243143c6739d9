"""FAISS indexes over L2-normalized vectors (inner product = cosine), named by factory strings."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from engine.errors import EngineError

EXACT = "Flat"


def is_exact(factory: str) -> bool:
    return factory.replace(" ", "") in ("Flat", "IDMap,Flat")


def default_search_params(factory: str) -> dict[str, int]:
    """Search-time knobs worth setting: nprobe for IVF, efSearch for HNSW (FAISS's defaults are too low)."""
    params: dict[str, int] = {}
    m = re.search(r"IVF(\d+)", factory)
    if m:
        params["nprobe"] = max(1, min(int(m.group(1)), 32))
    if "HNSW" in factory:
        params["efSearch"] = 128
    return params


def apply_search_params(index, params: dict[str, int]) -> None:
    import faiss
    if params:
        faiss.ParameterSpace().set_index_parameters(index, ",".join(f"{k}={v}" for k, v in params.items()))


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
    """Rows a factory is trained on: all of them (None), or 256 per centroid when a big collection has more."""
    need = _min_training_points(factory)
    if n > 256 * max(need, 1) and n > 200_000:  # FAISS samples anyway; keep memory bounded
        return np.random.default_rng(0).choice(n, 256 * need, replace=False)
    return None


def build_index(vectors: np.ndarray, factory: str = EXACT, fill: bool = True):
    """A trained index, filled with `vectors` unless `fill` is False (then they are only its training set).
    A factory that needs more training points than there are vectors is refused."""
    import faiss
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
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
        index.train(vectors if rows is None else vectors[rows])
    if n and fill:
        index.add(vectors)
    apply_search_params(index, default_search_params(factory))
    return index


def _pq_hint(dim: int) -> int:
    for m in (64, 48, 32, 16, 8, 4):
        if dim % m == 0:
            return m
    return 1


def save_index(index, path) -> None:
    import faiss
    faiss.write_index(index, str(path))


def load_index(path, params: dict[str, int] | None = None):
    import faiss
    if Path(path).is_dir():  # sharded or on-disk (engine.core.shards)
        from engine.core.shards import load_index_folder
        return load_index_folder(Path(path), params or {})
    index = faiss.read_index(str(path))
    apply_search_params(index, params or {})
    return index


def recall_at_k(index, vectors: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    """Share of the exact top-k that the index also returns in its top-k (ties at the cut tolerated)."""
    import faiss
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(k, vectors.shape[0])
    if k == 0 or len(queries) == 0:
        return 1.0
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(np.ascontiguousarray(vectors, dtype=np.float32))
    d_true, i_true = flat.search(queries, k)
    _, i_got = index.search(queries, k)
    hits = 0
    for q in range(len(queries)):
        got = set(i_got[q][i_got[q] >= 0].tolist())
        cut = d_true[q, -1]
        # a returned doc whose exact score ties the k-th exact score is as good as the one it displaced
        tied = set(np.nonzero(vectors @ queries[q] >= cut - 1e-6)[0].tolist()) if len(got - set(i_true[q])) else set()
        hits += sum(1 for i in i_true[q] if i in got) + len((got - set(i_true[q].tolist())) & tied)
    return hits / (len(queries) * k)


def index_memory_bytes(index) -> int:
    """Bytes the index takes when serialized: a close, portable proxy for its resident memory."""
    import faiss
    if hasattr(index, "memory_bytes"):  # sharded or on-disk (engine.core.shards)
        return int(index.memory_bytes())
    return int(faiss.serialize_index(index).nbytes)
