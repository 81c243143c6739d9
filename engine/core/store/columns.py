"""A columnar cache of item metadata, the collection role `columns`: filters (`--where`) read a few int32 /
float64 arrays instead of parsing every items row.

    columns-G/columns.json   {"count": n, "fields": {field: k}, "skipped": [fields left to the items file]}
    columns-G/c<k>.num.npy   float64: the cell as a number (NaN: not a number, or missing)
    columns-G/c<k>.codes.npy int32: the cell's text as a position in the sorted vocabulary (-1: missing)
    columns-G/c<k>.vocab.json the sorted distinct texts

Written at every commit from the items as they stream to disk (`ColumnCollector`); fields of long texts
(the embedded text itself) are skipped and filtered from the items file instead (`MetadataTable`).
"""
from __future__ import annotations

import json
import pickle
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from engine.core.filters import Column, as_number, as_text
from engine.core.store.generations import FileWriter

ROLE = "columns"
INDEX_FILE = "columns.json"
LONG_TEXT = 200
"""Fields whose texts average more characters than this are not cached (the embedded text, descriptions)."""


def write_columns(folder: Path, count: int, columns: Mapping[str, Column], skipped: Sequence[str]) -> None:
    fields = {}
    for k, (name, col) in enumerate(sorted(columns.items())):
        np.save(folder / f"c{k}.num.npy", np.asarray(col.num, dtype=np.float64))
        np.save(folder / f"c{k}.codes.npy", np.asarray(col.codes, dtype=np.int32))
        (folder / f"c{k}.vocab.json").write_text(json.dumps(col.vocab, ensure_ascii=False), encoding="utf-8")
        fields[name] = k
    (folder / INDEX_FILE).write_text(json.dumps({"count": count, "fields": fields, "skipped": sorted(skipped)},
                                                ensure_ascii=False), encoding="utf-8")


def columns_writer(count: Callable[[], int], columns: Callable[[], tuple[dict[str, Column], list[str]]]
                   ) -> FileWriter:
    """The role's folder; `columns()` is called when it is written (after the items, whose rows it gathers)."""
    def write(folder: Path) -> None:
        cols, skipped = columns()
        write_columns(folder, count(), cols, skipped)
    return FileWriter("", write)


class ColumnCollector:
    """Gathers every scalar metadata field of the items rows while they stream to the items file. Each
    field's cells (row, text, number) are spilled to a temporary file in batches, so a build's memory does not
    grow with its row count: a field is read back only when it is written (its vocabulary then held: the
    distinct texts of a field of short texts), a field of long texts never."""

    BATCH = 4096

    def __init__(self) -> None:
        self.files: dict[str, IO[bytes]] = {}
        self.buffers: dict[str, list[tuple[int, str | None, float | None]]] = {}
        self.cells: dict[str, int] = {}
        self.chars: dict[str, int] = {}
        self.n = 0

    def rows(self, rows: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        for row in rows:
            for key, value in row.items():
                if key == "id":
                    continue
                buf = self.buffers.setdefault(key, [])
                buf.append((self.n, as_text(value), as_number(value)))
                self.cells[key] = self.cells.get(key, 0) + 1
                if isinstance(value, str):
                    self.chars[key] = self.chars.get(key, 0) + len(value)
                if len(buf) >= self.BATCH:
                    self._flush(key)
            self.n += 1
            yield row

    def _flush(self, key: str) -> None:
        if key not in self.files:
            self.files[key] = tempfile.TemporaryFile(prefix="engine-column-")
        pickle.dump(self.buffers[key], self.files[key], protocol=pickle.HIGHEST_PROTOCOL)
        self.buffers[key] = []

    def _cells(self, key: str) -> Iterator[tuple[int, str | None, float | None]]:
        fh = self.files.get(key)
        if fh is not None:
            fh.seek(0)
            while True:
                try:
                    yield from pickle.load(fh)
                except EOFError:
                    break
        yield from self.buffers[key]

    def columns(self) -> tuple[dict[str, Column], list[str]]:
        out, skipped = {}, []
        for key, cells in self.cells.items():
            if self.chars.get(key, 0) > LONG_TEXT * max(1, cells):
                skipped.append(key)
                continue
            vocab = sorted({t for _, t, _ in self._cells(key) if t is not None})
            code_of = {t: n for n, t in enumerate(vocab)}
            codes, num = np.full(self.n, -1, np.int32), np.full(self.n, np.nan)
            for row, text, number in self._cells(key):
                codes[row] = -1 if text is None else code_of[text]
                num[row] = np.nan if number is None else number
            out[key] = Column(num, codes, vocab)
        for fh in self.files.values():
            fh.close()
        return out, skipped

    def writer(self) -> FileWriter:
        return columns_writer(lambda: self.n, self.columns)


def take_columns(folder: Path, rows: np.ndarray) -> FileWriter:
    """The stored columns of `folder` restricted to `rows` (a delete: no items row parsed)."""
    meta = json.loads((folder / INDEX_FILE).read_text(encoding="utf-8"))

    def columns() -> tuple[dict[str, Column], list[str]]:
        cols = {}
        for name, k in meta["fields"].items():
            col = _load(folder, k)
            cols[name] = Column(np.asarray(col.num[rows]), np.asarray(col.codes[rows]), col.vocab)
        return cols, list(meta.get("skipped", []))
    return columns_writer(lambda: len(rows), columns)


def _load(folder: Path, k: int) -> Column:
    return Column(np.load(folder / f"c{k}.num.npy", mmap_mode="r"), np.load(folder / f"c{k}.codes.npy", mmap_mode="r"),
                  json.loads((folder / f"c{k}.vocab.json").read_text(encoding="utf-8")))


class MetadataTable:
    """Columns of a collection for filters: from the `columns` role when the field is cached there, else
    built once from the items rows (collections written before the role, long-text fields)."""

    def __init__(self, count: int, folder: Path | None, items: Callable[[], list[dict]]):
        self.count = count
        self.folder = folder
        self.items = items
        self.meta = json.loads((folder / INDEX_FILE).read_text(encoding="utf-8")) if folder is not None else None
        self.cache: dict[str, Column | None] = {}

    def __len__(self) -> int:
        return self.count

    def field_names(self) -> list[str]:
        """The fields items have, sorted (from the `columns` role's index, else from the items rows)."""
        if self.meta is not None:
            return sorted({*self.meta["fields"], *self.meta.get("skipped", [])})
        return sorted({k for row in self.items() for k in row if k != "id"})

    def column(self, field: str) -> Column | None:
        if field not in self.cache:
            self.cache[field] = self._column(field)
        return self.cache[field]

    def _column(self, field: str) -> Column | None:
        if self.meta is not None and field in self.meta["fields"]:
            return _load(self.folder, self.meta["fields"][field])  # type: ignore[arg-type]
        if self.meta is not None and field not in self.meta.get("skipped", []):
            return None  # no item has it
        values = [row.get(field) for row in self.items()]
        if all(as_text(v) is None for v in values):
            return None
        return Column.from_values(values)
