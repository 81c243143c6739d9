"""Dense search restricted to some rows (a metadata filter's mask), inside the search so `k` results come back
whenever `k` rows match.

Few matching rows (at most `EXACT_ROWS`, or an index FAISS cannot restrict): exact inner products over those
rows alone, read from the stored embeddings (cheaper than any index scan, and exact). Many: the FAISS index
searched with an `IDSelectorBitmap` in its search parameters, the stored operating point kept; should an
approximate index return fewer than asked, the rows are searched exactly instead.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from engine.core.storage.index.faiss_index import faiss_module, use_blas_for

EXACT_ROWS = 100_000
"""Matching rows up to which a filtered search scans them exactly (≈ 1/10 of a 1M Flat scan at most)."""
GATHER_SHARE = 0.1
"""Share of an exact index's rows past which a filter searches the index with a selector (one pass over
its vectors, the others skipped) instead of gathering the rows: the gather copies them, and at 50 % of
200k × 384 it cost 90 CPU ms a query against the selector's 25 (25 % : 48 against 17; 5 %: 3.7 against
4.1; one query, 2 busy cores). Approximate indexes keep gathering up to `EXACT_ROWS` (exact results)."""
_BLOCK = 65536


SMALL_PRODUCT = 1 << 24
"""Multiply-adds up to which `inner_products` stays on one thread (≈ 3 ms of one core)."""


def inner_products(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(queries, rows) inner products. A small product runs on numpy's own loop, one thread: OpenBLAS wakes
    every thread for it, and on a busy machine that costs 10-50× the arithmetic (a 1 % filter at 200k × 384:
    5.5 ms of CPU per query against 0.18 ms, benchmarks/floor_paths.py); big ones go to BLAS."""
    if len(queries) * vectors.size <= SMALL_PRODUCT:
        return np.einsum("rd,qd->qr", vectors, queries)
    return queries @ vectors.T


def exact_rows(embeddings: np.ndarray, rows: np.ndarray, queries: np.ndarray, k: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k over `rows` of `embeddings` (scores, row numbers; -1 / -inf past the rows there are)."""
    nq = len(queries)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    labels = np.full((nq, k), -1, dtype=np.int64)
    if not len(rows):
        return scores, labels
    parts_s, parts_r = [], []
    for lo in range(0, len(rows), _BLOCK):
        block = rows[lo:lo + _BLOCK]
        sims = inner_products(np.asarray(embeddings[block], dtype=np.float32), queries)
        keep = min(k, len(block))
        best = np.argpartition(-sims, keep - 1, axis=1)[:, :keep] if keep < len(block) else \
            np.tile(np.arange(len(block)), (nq, 1))
        parts_s.append(np.take_along_axis(sims, best, axis=1))
        parts_r.append(block[best])
    s, r = np.concatenate(parts_s, axis=1), np.concatenate(parts_r, axis=1)
    for q in range(nq):
        order = np.lexsort((r[q], -s[q]))[:k]  # best first, ties by row (as an unfiltered exact search)
        scores[q, :len(order)], labels[q, :len(order)] = s[q][order], r[q][order]
    return scores, labels


def _selector_params(index, mask: np.ndarray, stored: dict):
    """FAISS search parameters restricting `index` to the rows of `mask`, with the stored knobs; None when
    this kind of index takes no parameters."""
    faiss = faiss_module()
    if not isinstance(index, faiss.Index):  # shards, an on-disk IVF: searched exactly over the rows
        return None
    bits = np.packbits(mask.astype(np.uint8), bitorder="little")
    sel = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))
    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexIVF):
        params = faiss.SearchParametersIVF(sel=sel, nprobe=int(stored.get("nprobe", inner.nprobe)))
    elif isinstance(inner, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW(sel=sel, efSearch=int(stored.get("efSearch", inner.hnsw.efSearch)))
    elif isinstance(inner, (faiss.IndexFlat, faiss.IndexScalarQuantizer)):
        params = faiss.SearchParameters(sel=sel)
    else:
        return None
    params._keep = (sel, bits)  # the selector reads `bits`: both must live as long as the parameters
    return params


def search_masked(index: "Any | Callable[[], Any]", embeddings: np.ndarray, queries: np.ndarray, k: int,
                  mask: np.ndarray, stored: dict | None = None, exact_index: bool = False
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Top-k among the rows where `mask` is true: (scores, rows), -1 past the matching rows. `index` may be
    a function that loads it: a selective filter scans its rows exactly and never loads the index; on an
    `exact_index` (Flat), a filter keeping more than `GATHER_SHARE` of the rows searches the index."""
    rows = np.flatnonzero(mask)
    want = min(k, len(rows))
    if len(rows) <= EXACT_ROWS and not (exact_index and len(rows) > GATHER_SHARE * len(mask)):
        return exact_rows(embeddings, rows, queries, k)
    if callable(index) and not hasattr(index, "search"):
        index = index()
    if not hasattr(index, "search"):
        return exact_rows(embeddings, rows, queries, k)
    params = _selector_params(index, mask, stored or {})
    if params is None:
        return exact_rows(embeddings, rows, queries, k)
    use_blas_for(index, len(queries))
    scores, labels = index.search(queries, k, params=params)
    if (labels[:, :want] < 0).any():  # an approximate index saw too few matching rows: be exact
        return exact_rows(embeddings, rows, queries, k)
    return scores, labels


def search_live(index: "Callable[[], Any]", embeddings: np.ndarray, queries: np.ndarray, k: int, live: np.ndarray,
                stored: dict, override: dict, exact_index: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Top-k among the rows not deleted (`live`): the index searched for a few more than k, the deleted rows
    dropped (a delete costs a search almost nothing); a query left with fewer than k is searched again
    restricted to the live rows (`search_masked`), so k come back whenever k rows live."""
    from engine.core.storage.index.faiss_index import search_index
    n, dead = len(live), len(live) - int(np.count_nonzero(live))
    fetch = min(n, k + min(dead, k + 32))
    scores, rows = search_index(index(), queries, fetch, stored, override)
    kept = (rows >= 0) & live[np.maximum(rows, 0)]
    out_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    out_r = np.full((len(queries), k), -1, dtype=np.int64)
    short = []
    for q in range(len(queries)):
        pick = np.flatnonzero(kept[q])[:k]
        out_s[q, :len(pick)], out_r[q, :len(pick)] = scores[q, pick], rows[q, pick]
        if len(pick) < k:
            short.append(q)
    if short:
        s, r = search_masked(index, embeddings, queries[short], k, live, {**stored, **override}, exact_index)
        out_s[short], out_r[short] = s[:, :k], r[:, :k]
    return out_s, out_r
