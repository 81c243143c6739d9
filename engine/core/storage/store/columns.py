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
import math
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
import pickle
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from engine.core.storage.store.generations import FileWriter

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
"""A cell that reads as a decimal number (CSV cells): what counts as a number in filters too."""


def as_number(value: Any) -> float | None:
    """A cell's number: ints and floats, and text that reads as a decimal number (CSV cells); never bools,
    NaN or infinities."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        v = float(value)
        return v if math.isfinite(v) else None
    return None


def as_text(value: Any) -> str | None:
    """A cell's text (what non-numeric comparisons see); None for a missing or null value."""
    import json
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass
class Column:
    """One metadata field over all rows: its number (NaN: not a number or missing), and its text as a code
    into the sorted `vocab` (-1: missing), so text comparisons are integer comparisons."""
    num: np.ndarray
    codes: np.ndarray
    vocab: list[str]

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> "Column":
        texts = [as_text(v) for v in values]
        vocab = sorted({t for t in texts if t is not None})
        code_of = {t: n for n, t in enumerate(vocab)}
        codes = np.fromiter((code_of[t] if t is not None else -1 for t in texts), dtype=np.int32, count=len(texts))
        num = np.fromiter((np.nan if (x := as_number(v)) is None else x for v in values), dtype=np.float64,
                          count=len(values))
        return cls(num, codes, vocab)

    def compare(self, op: str, lit: Any) -> np.ndarray:
        """Rows where the cell compares to the literal `lit` (a filter's: `.number` or None, `.text`)."""
        present = self.codes >= 0
        if lit.number is not None:
            isnum = ~np.isnan(self.num)
            with np.errstate(invalid="ignore"):
                numeric = _OPS[op](self.num, lit.number) & isnum
            return numeric | (present & ~isnum & self._text(op, lit.text))
        return present & self._text(op, lit.text)

    def _text(self, op: str, text: str) -> np.ndarray:
        lo, hi = bisect_left(self.vocab, text), bisect_right(self.vocab, text)
        c = self.codes
        if op == "==":
            return c == lo if lo < hi else np.zeros(len(c), bool)
        if op == "!=":
            return (c >= 0) & (c != lo) if lo < hi else c >= 0
        if op == "<":
            return (c >= 0) & (c < lo)
        if op == "<=":
            return (c >= 0) & (c < hi)
        if op == ">":
            return c >= hi
        return c >= lo


_OPS = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
        ">=": np.greater_equal}


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
