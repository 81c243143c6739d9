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
from array import array
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from engine.core.storage.store.generations import FileWriter, npy
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
    def items_at(self, rows: Sequence[int]) -> list[dict]: ...


def id_hashes(ids: Iterable[str]) -> np.ndarray:
    """The 64-bit hash of each id (BLAKE2b of its UTF-8 bytes, as a signed int64): the same in every process
    and version (Python's own `hash` of a string changes from process to process)."""
    out = array("q", map(_id_hash, ids))
    return np.frombuffer(out, dtype=np.int64) if len(out) else np.zeros(0, dtype=np.int64)


def _id_hash(i: str) -> int:
    return int.from_bytes(hashlib.blake2b(str(i).encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def sorted_index(hashes: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """The role's array: hashes sorted (stable: equal hashes keep their row order) beside their rows."""
    rows = np.arange(len(hashes), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    order = np.argsort(hashes, kind="stable")
    return np.stack([np.asarray(hashes, dtype=np.int64)[order], rows[order]])


class IdCollector:
    """Hashes every row's id while the items stream to the items file (8 bytes a row kept)."""

    def __init__(self) -> None:
        self.hashes = array("q")

    def rows(self, rows: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        for row in rows:
            self.hashes.append(_id_hash(row["id"]))
            yield row

    def writer(self) -> FileWriter:
        """The role's file; its array is made when it is written (after the items, whose ids it gathers)."""
        def write(path) -> None:
            npy(sorted_index(np.frombuffer(self.hashes, dtype=np.int64))).write(path)
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
    wanted = set(map(str, ids))
    keys = np.unique(id_hashes(wanted))
    lo, hi = np.searchsorted(index[0], keys, "left"), np.searchsorted(index[0], keys, "right")
    counts = hi - lo
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64), []
    at = np.repeat(lo, counts) + np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    rows = np.sort(np.asarray(index[1][at]))  # in file order: the items file read forwards
    found = [(r, i) for r, i in zip(rows.tolist(), map(_line_id, col.item_lines(rows))) if i in wanted]
    return np.asarray([r for r, _ in found], dtype=np.int64), [i for _, i in found]


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
