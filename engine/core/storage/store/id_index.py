"""The id → row index of a generation, the collection role `id_index`: what lets a delete find its rows
without reading any id it does not delete.

    id_index-G.npy   int64 (2, n): row 0 the 64-bit hashes of every row's id (BLAKE2b of its UTF-8 bytes, as
                     signed int64), sorted; row 1 the row each hash belongs to

Written at every commit from the ids as the items stream to disk (`IdCollector`), and carried through a
compaction by dropping and renumbering its entries (`kept_ids_writer`). A lookup (`find_rows`) hashes the wanted
ids, finds their candidates with a binary search, then reads only those rows' ids to rule out a collision of
two ids on one hash. Collections written before the role exist without it: their deletes scan the ids."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from engine.core.storage.store.generations import FileWriter, line_heads, npy
from engine.errors import EngineError

ROLE = "id_index"


class StoredRows(Protocol):
    """What this module reads of an opened generation (`engine.core.storage.store.stored.StoredCollection`, which
    imports this module: the type is named here, not imported)."""
    name: str
    manifest: dict

    def __len__(self) -> int: ...
    def array(self, name: str) -> np.ndarray: ...
    def file(self, role: str) -> Path: ...
    def item_lines(self, rows: Sequence[int]) -> list[bytes]: ...
    def item_offsets(self) -> np.ndarray: ...
    def items_at(self, rows: Sequence[int]) -> list[dict]: ...


def id_hashes(ids: Iterable[str]) -> np.ndarray:
    """The 64-bit hash of each id (BLAKE2b of its UTF-8 bytes, as a signed int64): the same in every process
    and version (Python's own `hash` of a string changes from process to process)."""
    blake2b = hashlib.blake2b
    digests = b"".join([blake2b(str(i).encode("utf-8"), digest_size=8).digest() for i in ids])
    return np.frombuffer(digests, dtype="<i8").astype(np.int64)  # the digests' bytes read as little-endian


def sorted_index(hashes: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """The role's array: hashes sorted (stable: equal hashes keep their row order) beside their rows."""
    rows = np.arange(len(hashes), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    order = np.argsort(hashes, kind="stable")
    return np.stack([np.asarray(hashes, dtype=np.int64)[order], rows[order]])


class IdCollector:
    """Hashes every row's id while the items stream to the items file (8 bytes a row kept)."""

    def __init__(self, batch: int = 4096) -> None:
        self.hashes: list[np.ndarray] = []
        self.pending: list[str] = []
        self.batch = batch

    def rows(self, rows: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        for row in rows:
            self.pending.append(row["id"])
            if len(self.pending) >= self.batch:
                self._flush()
            yield row
        self._flush()

    def _flush(self) -> None:
        if self.pending:
            self.hashes.append(id_hashes(self.pending))
            self.pending = []

    def writer(self) -> FileWriter:
        """The role's file; its array is made when it is written (after the items, whose ids it gathers)."""
        def write(path) -> None:
            self._flush()
            npy(sorted_index(np.concatenate(self.hashes) if self.hashes else np.zeros(0, np.int64))).write(path)
        return FileWriter(".npy", write)


def _renumbered(index: np.ndarray, keep: np.ndarray, n: int) -> FileWriter:
    """The index of a generation restricted to the sorted rows `keep` of `n`: entries of dropped rows removed,
    the others renumbered to their new rows (the order of the hashes is kept: no sort)."""
    new_row = np.full(n, -1, dtype=np.int64)
    new_row[keep] = np.arange(len(keep), dtype=np.int64)
    rows = new_row[index[1]]
    alive = rows >= 0
    return npy(np.stack([np.asarray(index[0])[alive], rows[alive]]))


def rows_of(col: StoredRows, ids: Iterable[str]) -> tuple[np.ndarray, list[str]]:
    """The rows holding these ids, sorted, and each row's id (an id not stored has none; deleted rows
    included): through the id index where the generation has one (reads only the candidates' rows), else by
    scanning every stored id."""
    ids = set(map(str, ids))
    if ROLE in (col.manifest.get("roles") or {}):
        return find_rows(col, ids)
    rows = np.flatnonzero(_scanned_rows(col, ids))
    return rows, [r["id"] for r in col.items_at(rows)]


def kept_ids_writer(col: StoredRows, keep: np.ndarray) -> FileWriter:
    """The id index of `col` restricted to the sorted rows `keep` (what a compaction writes): carried over
    from its own index, or made from the stored ids of a collection written before the role."""
    if ROLE in (col.manifest.get("roles") or {}):
        return _renumbered(col.array(ROLE), keep, len(col))
    ids = stored_ids(col)
    return npy(sorted_index(id_hashes(ids[int(r)] for r in keep)))


def find_rows(col: StoredRows, ids: Iterable[str]) -> tuple[np.ndarray, list[str]]:
    """The rows holding these ids (sorted; an id not stored has none) and their ids, read from the id index:
    the wanted ids hashed, their candidates found by binary search, and each candidate's stored id compared
    (a hash shared by two ids is told apart; only the candidates' rows are read)."""
    index = col.array(ROLE)
    wanted = sorted(set(map(str, ids)))
    hashes = id_hashes(wanted)
    keys, first, shared = np.unique(hashes, return_index=True, return_counts=True)
    lo, hi = np.searchsorted(index[0], keys, "left"), np.searchsorted(index[0], keys, "right")
    counts = hi - lo
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64), []
    at = np.repeat(lo, counts) + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    rows = np.asarray(index[1][at])
    expected = np.repeat(np.where(shared == 1, first, -1), counts)  # the one wanted id of the hash (-1: several)
    order = np.argsort(rows, kind="stable")  # in file order: the items file read forwards
    rows, expected = rows[order], expected[order]
    sure = _starts_with_ids(col, rows, expected, wanted)
    found = {int(r): wanted[int(e)] for r, e in zip(rows[sure], expected[sure])}
    doubt = rows[~sure]  # a collision, a hash two wanted ids share, a row of another form: parsed
    wanted_set = set(wanted)
    found.update((int(r), i) for r, i in zip(doubt.tolist(), map(_line_id, col.item_lines(doubt))) if i in wanted_set)
    out = sorted(found)
    return np.asarray(out, dtype=np.int64), [found[r] for r in out]


def _id_prefix(i: str) -> bytes:
    """The bytes an items row stored by this engine starts with for id `i` (`{"id": "…"`, as `jsonl` writes)."""
    if '"' in i or "\\" in i or not i.isprintable():
        return ('{"id": ' + json.dumps(i, ensure_ascii=False)).encode("utf-8")
    return b'{"id": "' + i.encode("utf-8") + b'"'


def _starts_with_ids(col: StoredRows, rows: np.ndarray, expected: np.ndarray, wanted: list[str],
                     budget: int = 16 << 20) -> np.ndarray:
    """Which candidate rows hold their expected wanted id (`expected`: its position in `wanted`, -1 for none),
    checked in bulk: each row's first bytes (`line_heads`) compared with the id's prefix and the byte after it
    (`,` or `}`). False means "not shown here" (the caller parses those rows)."""
    sure = np.zeros(len(rows), dtype=bool)
    if not len(rows) or not (expected >= 0).any():
        return sure
    prefixes = np.array([_id_prefix(i) for i in wanted])  # fixed width: compared in C
    width = prefixes.dtype.itemsize
    lengths = np.char.str_len(prefixes)
    table = np.frombuffer(prefixes.tobytes(), dtype=np.uint8).reshape(len(wanted), width)
    offsets = col.item_offsets()
    step = max(1, budget // (width + 1))
    for a in range(0, len(rows), step):
        r, e = rows[a:a + step], np.maximum(expected[a:a + step], 0)
        got = line_heads(col.file("items"), offsets, r, width + 1)
        n = lengths[e]
        same = ((got[:, :width] == table[e]) | (np.arange(width)[None, :] >= n[:, None])).all(axis=1)
        after = got[np.arange(len(r)), n]
        sure[a:a + step] = (expected[a:a + step] >= 0) & (np.asarray(offsets[r + 1]) - np.asarray(offsets[r]) > n) \
            & same & ((after == ord(",")) | (after == ord("}")))
    return sure


def _line_id(line: bytes) -> str | None:
    """An items row's id: the bytes between its quotes as the store writes it (`{"id": "…", …}`, no escape),
    else the row parsed."""
    if line.startswith(b'{"id": "'):
        end = line.find(b'"', 8)
        if end > 0 and b"\\" not in line[8:end]:
            return line[8:end].decode("utf-8", "replace")
    try:
        return str(json.loads(line)["id"])
    except (ValueError, KeyError, TypeError):
        return None


def check_index(col: StoredRows, ids: Sequence[str] | None = None) -> None:
    """The role's shape and order against the row count; with `ids` (every stored id, in row order: what
    `engine verify` reads anyway), each entry's hash against its row's id."""
    index = col.array(ROLE)
    n = len(col)
    bad = index.ndim != 2 or index.shape != (2, n) or index.dtype != np.int64
    if not bad and n:
        rows = np.asarray(index[1])
        bad = bool((np.diff(index[0]) < 0).any()) or rows.min() < 0 or rows.max() >= n \
            or len(np.unique(rows)) != n
        if not bad and ids is not None:
            expected = np.empty(n, dtype=np.int64)
            expected[rows] = index[0]
            bad = not np.array_equal(expected, id_hashes(ids))
    if bad:
        raise EngineError(f"{col.file(ROLE)}: damaged (not the sorted id hashes of the {n} rows); rebuild "
                          f"collection {col.name!r} (--force)")


# ------------------------------------------------------------------------ the scan (collections without the role)
_ID_AT_LINE_START = re.compile(rb'^\{"id": "((?:[^"\\\n]|\\.)*)"', re.M)


def _raw_ids(old: StoredRows) -> list[bytes] | None:
    """Every row's id as the bytes between its quotes: items rows are written `{"id": "…", …}`, so one regular
    expression over the mapped file finds them; None when some row has another form."""
    import mmap
    with open(old.file("items"), "rb") as fh:
        try:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                raw = _ID_AT_LINE_START.findall(data)
        except ValueError:  # an empty file cannot be mapped
            raw = []
    return raw if len(raw) == len(old) else None


def _decoded(raw: bytes) -> str:
    return json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode("utf-8")


def _scanned_rows(old: StoredRows, ids: set[str]) -> np.ndarray:
    """A mask of the rows whose id is in `ids`, comparing stored bytes (an id with an escape decoded first)."""
    raw = _raw_ids(old)
    if raw is None:
        return np.fromiter((i in ids for i in stored_ids(old)), dtype=bool, count=len(old))
    if not raw:
        return np.zeros(0, dtype=bool)
    stored = np.array(raw)  # fixed-width bytes: compared in C, not row by row in Python
    wanted = np.array(sorted(i.encode("utf-8") for i in ids) or [b""])
    mask = np.isin(stored, wanted) & (stored != b"") if ids else np.zeros(len(raw), dtype=bool)
    for r in np.flatnonzero(np.char.find(stored, b"\\") >= 0):  # an escape: the stored bytes are not the id's
        mask[r] = _decoded(raw[r]) in ids
    return mask


def stored_ids(old: StoredRows) -> list[str]:
    """Every row's id without parsing the rows (`_raw_ids`; a row of another form: every row read line by
    line, and any other row parsed whole)."""
    raw = _raw_ids(old)
    if raw is not None:
        return [_decoded(i) for i in raw]
    from json.decoder import scanstring
    prefix = '{"id": "'
    out = []
    with open(old.file("items"), encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(prefix):
                out.append(scanstring(line, len(prefix))[0])
            elif line.strip():
                out.append(str(json.loads(line)["id"]))
    if len(out) != len(old):
        raise EngineError(f"{old.file('items')} holds {len(out)} rows, the manifest says {len(old)}")
    return out
