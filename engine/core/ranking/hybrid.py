"""Search modes of a collection (`--mode dense|bm25|hybrid`, `--fusion rrf|weighted`) and metadata filters
(`--where`), over the collection facade's parts: its dense index, the BM25 index it may store as the role
`bm25` (`engine build --texts F --bm25`), and its metadata columns (`engine.core.storage.store.columns`).

Hybrid takes each half's top `DEPTH` candidates, scores every candidate by both halves (dense by its stored
vector, BM25 from the query's score array), and fuses the two rankings of that union with the core's fusion
(`engine.io.fusion`, the code the task pipelines use): so a rare-token document BM25 ranks first keeps a
dense rank too, and is not tied with dense's first document that shares no query word.

A filter restricts both halves before ranking (the dense half inside the search:
`engine.core.storage.index.filtered`), so `k` results come back whenever `k` items match.
"""
from __future__ import annotations

import weakref
from typing import Any, Sequence

import numpy as np

from engine.io import fusion
from engine.errors import EngineError, opt

MODES = ("dense", "bm25", "hybrid")
FUSIONS = ("rrf", "weighted")
BM25_ROLE = "bm25"
DEPTH = 100
"""Candidates each half contributes to a hybrid ranking (at least k)."""
_parts: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def check_mode(mode: str | None, fusion_method: str) -> None:
    """The values of `--mode` and `--fusion`, before anything loads."""
    if mode is not None and mode not in MODES:
        raise EngineError(f"{opt('mode')} must be one of {', '.join(MODES)}, not {mode!r}")
    if fusion_method not in FUSIONS:
        raise EngineError(f"{opt('fusion')} must be one of {', '.join(FUSIONS)}, not {fusion_method!r}")


def has_bm25(col) -> bool:
    """Whether the collection stores a BM25 index over its own rows (a task's BM25 over other documents,
    as EVENTA's over articles beside its passages, does not count: such a collection searches dense)."""
    if BM25_ROLE not in col.stored:
        return False
    cache = _cache(col)
    if "aligned" not in cache:
        import json
        from engine.core.storage.index.bm25 import IDS_FILE, META_FILE
        folder = col.file(BM25_ROLE)
        try:
            docs = json.loads((folder / META_FILE).read_text(encoding="utf-8")).get("docs")
            ids = json.loads((folder / IDS_FILE).read_text(encoding="utf-8")) if docs == len(col) else []
        except (OSError, ValueError):
            ids = []
        n = len(col)
        probe = sorted({0, n // 2, n - 1}) if n and len(ids) == n else []
        cache["aligned"] = bool(probe) and [ids[r] for r in probe] == [it["id"] for it in col.items_at(probe)]
    return cache["aligned"]


def resolve_mode(col, mode: str | None, text_query: bool) -> str:
    """The mode a search runs in: the one asked for, else hybrid where the collection has BM25 and the query is
    text, else dense. A lexical mode without text or without a BM25 index is one line saying what to do."""
    if mode is None:
        return "hybrid" if text_query and has_bm25(col) else "dense"
    if mode != "dense" and not text_query:
        raise EngineError(f"{opt('mode')} {mode} needs a text query; image, id and vector queries search "
                          f"{opt('mode')} dense")
    if mode != "dense" and not has_bm25(col) and col.kind != "text":
        raise EngineError(f"collection {col.name!r} holds {'images' if col.kind == 'image' else 'vectors'}, which "
                          f"have no words for {opt('mode')} {mode}; search it with {opt('mode')} dense")
    if mode != "dense" and not has_bm25(col):
        raise EngineError(f"collection {col.name!r} has no BM25 index of its items for {opt('mode')} {mode}; "
                          f"build it with "
                          f"`engine build {col.name} --texts FILE --bm25 --force` (or {opt('mode')} dense)")
    return mode


def check_search_mode(col, mode: str | None, fusion_method: str, where: str | None, text_query: bool) -> None:
    """Everything a mode and a filter need, checked before a model loads."""
    check_mode(mode, fusion_method)
    resolve_mode(col, mode, text_query)
    if where is not None:  # parsed, and its fields looked up, before a model loads (the mask is built by the search)
        from engine.core.ranking.filters import parse_where
        check_fields(col, parse_where(where), metadata_table(col))


def _cache(col) -> dict:
    if col not in _parts:
        _parts[col] = {}
    return _parts[col]


def bm25_index(col):
    """The collection's BM25 index, loaded once per opened collection; its docs must be the collection's rows."""
    cache = _cache(col)
    if "bm25" not in cache:
        from engine.core.storage.index.bm25 import BM25Index
        cache["bm25"] = BM25Index.load(col.file(BM25_ROLE))
    return cache["bm25"]


def filter_mask(col, where: str | None, known_fields: bool = True) -> np.ndarray | None:
    """The rows matching `where` (None: no filter), evaluated over the collection's metadata columns; with
    `known_fields`, a field no item has is refused (`check_fields`) rather than matching nothing."""
    if where is None:
        return None
    live = col.live_mask()
    from engine.core.ranking.filters import evaluate, parse_where
    expr = parse_where(where)
    table = metadata_table(col)
    if known_fields:
        check_fields(col, expr, table)
    mask = evaluate(expr, table)
    return mask if live is None else mask & live  # deleted rows match no filter


def check_fields(col, expr, table) -> None:
    """A filter naming a field no item has (a misspelt `yaer`) is refused in one line naming the fields there
    are: it would match nothing (or, under `not`, everything) and look like an empty result."""
    from engine.core.ranking.filters import fields_of
    absent = sorted(f for f in fields_of(expr) if table.column(f) is None)
    if absent:
        known = table.field_names()
        raise EngineError(f"{opt('where')}: no item of collection {col.name!r} has a value for "
                          f"{', '.join(map(repr, absent))} (fields: {', '.join(known[:20]) or 'none'}"
                          f"{' …' if len(known) > 20 else ''})")


def metadata_table(col):
    """The collection's metadata columns for filters, opened once per opened collection."""
    from engine.core.storage.store.columns import ROLE, MetadataTable
    cache = _cache(col)
    if "table" not in cache:
        folder = col.file(ROLE) if ROLE in col.manifest.get("roles", {}) else None
        cache["table"] = MetadataTable(len(col), folder, lambda: col.items)
    return cache["table"]


def pin(col) -> None:
    """Read (or map) now everything a mode or a filter reads later, so no later request opens a file of this
    generation: a server's generation then answers whole after a commit has deleted its files."""
    if has_bm25(col):
        bm25_index(col)
    table = metadata_table(col)
    for field in (table.meta or {}).get("fields", {}):
        table.column(field)


def _dense(col, vectors: np.ndarray, depth: int, mask: np.ndarray | None, knobs) -> tuple[np.ndarray, np.ndarray]:
    if mask is None:
        return col.search_vectors(vectors, depth, knobs)
    from engine.core.storage.index.filtered import search_masked
    params = {**col.search_params, **col.check_search(depth, knobs)}
    queries = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
    return search_masked(lambda: col.index, col.embeddings, queries, depth, mask, params, col.exact_index)


def _bm25_scores(col, text: str, mask: np.ndarray | None) -> np.ndarray:
    """BM25 scores of every row, 0 outside `mask` (the filter's rows) and on deleted rows."""
    s = bm25_index(col).scores(text)
    if mask is None:
        mask = col.live_mask()
    return np.where(mask, s, 0.0) if mask is not None else s


def _lexical(scores: np.ndarray, depth: int) -> list[int]:
    from engine.io.ranking import top_k
    return [int(r) for r in top_k(scores, depth) if scores[r] > 0]


def _fuse(col, text: str, vector: np.ndarray, dense_rows: Sequence[int], lex: np.ndarray, k: int, method: str
          ) -> list[tuple[int, float]]:
    """One query's hybrid top-k: the union of both halves' candidates, ranked by each half, fused.

    rrf: reciprocal ranks. weighted: the sum of the cosine and the BM25 score divided by the query's BM25
    upper bound (`BM25Index.upper_bound`), both on a fixed [0, 1] scale (Bruch et al. 2023, "theoretical
    min-max"): a match on one common word of a long query adds little, a match on a rare query's only word
    adds a lot. Min-max over the candidates would stretch any weak BM25 match to 1."""
    cands = list(dict.fromkeys([*dense_rows, *_lexical(lex, max(k, DEPTH))]))
    if not cands:
        return []
    order = np.sort(np.asarray(cands, dtype=np.int64))
    from engine.core.storage.index.filtered import inner_products
    dense = inner_products(np.asarray(col.embeddings[order], dtype=np.float32),
                           np.asarray(vector, dtype=np.float32)[None])[0]
    if method == "rrf":
        dense_run = sorted(((str(r), float(s)) for r, s in zip(order, dense)), key=lambda p: -p[1])
        lex_run = sorted(((str(r), float(lex[r])) for r in order if lex[r] > 0), key=lambda p: -p[1])
        fused = fusion.fuse([dense_run, lex_run], method="rrf", depth=k)
    else:
        bound = bm25_index(col).upper_bound(text) or 1.0
        dense_run = [(str(r), max(0.0, float(s))) for r, s in zip(order, dense)]
        lex_run = [(str(r), float(lex[r]) / bound) for r in order]
        fused = fusion.weighted([dense_run, lex_run], [1.0, 1.0], method="none", depth=k)
    return [(int(r), s) for r, s in fused]


def search_rows(col, k: int, texts: Sequence[str] | None = None, vectors: np.ndarray | None = None,
                mode: str | None = None, fusion_method: str = "weighted", where: str | None = None, knobs=None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows) per query, -1 past the results, in the mode asked for (see `resolve_mode`), restricted
    to the rows matching `where`. `texts` are encoded here when the mode needs vectors and none are given."""
    check_mode(mode, fusion_method)
    mode = resolve_mode(col, mode, texts is not None)
    mask = filter_mask(col, where)
    n = len(texts) if texts is not None else len(np.atleast_2d(vectors))
    scores = np.full((n, k), -np.inf, dtype=np.float32)
    rows = np.full((n, k), -1, dtype=np.int64)
    if mode != "bm25" and vectors is None:
        vectors = col.encode_queries(texts=list(texts or []))
    if mode == "dense":
        return _dense(col, vectors, k, mask, knobs)
    dense_rows = None
    if mode == "hybrid":
        _, dense_rows = _dense(col, vectors, max(k, DEPTH), mask, knobs)
    for q, text in enumerate(texts or []):
        lex = _bm25_scores(col, text, mask)
        if mode == "bm25":
            ranked = [(r, float(lex[r])) for r in _lexical(lex, k)]
        else:
            ranked = _fuse(col, text, vectors[q], [int(r) for r in dense_rows[q] if r >= 0], lex, k, fusion_method)
        for i, (r, s) in enumerate(ranked):
            rows[q, i], scores[q, i] = r, s
    return scores, rows
