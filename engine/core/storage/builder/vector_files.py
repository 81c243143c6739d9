"""What `engine build --vectors PATH [--ids FILE] [--meta FILE]` reads: embeddings computed elsewhere.

PATH is one `.npy` (float32 or float16, (rows, dim)) or a folder of `.npy` shards taken in name order (the
layout clip-retrieval's inference writes: `img_emb/img_emb_0.npy`, …). `--ids` is one id per line (or a
CSV/JSONL with an id column), in row order; without it the ids are the row numbers 0..N-1. `--meta` is a
JSONL file or a parquet file (or a folder of them, in the same name order: clip-retrieval's `metadata/`), one row
per vector, stored as each item's metadata. Every check runs before any vector is read; an error names
the file at fault."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from engine.core.storage.store.npy_rows import NpyRows
from engine.errors import EngineError, missing_extra, opt, where
from engine.io.jsonio import parse_json

META_SUFFIXES = (".jsonl", ".ndjson", ".parquet")
NOT_WITH_VECTORS = ("images", "texts", "model", "add", "fields", "id_column", "path_column", "recall_queries")
"""Options of an encoding build; `--encoder` names the model that made the vectors instead of `--model`."""


def check_vector_flags(**given: Any) -> None:
    """A one-line error naming the first option given with `--vectors` that does not apply to it."""
    for name in NOT_WITH_VECTORS:
        if given.get(name) not in (None, False):
            hint = f" (name the model that made them with {opt('encoder')})" if name == "model" else ""
            raise EngineError(f"{opt(name)} does not go with {opt('vectors')}: the vectors are already "
                              f"computed{hint}")


def name_order(path: Path) -> list:
    """Shards in name order, numbers compared as numbers (img_emb_2.npy before img_emb_10.npy, as written)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", path.name)]


def _files(path: Path, suffixes: tuple[str, ...], what: str) -> list[Path]:
    """One file, or the files of a folder with one of `suffixes`, in name order."""
    if path.is_dir():
        files = sorted((p for p in path.iterdir() if p.is_file() and p.suffix.lower() in suffixes), key=name_order)
        if not files:
            raise EngineError(f"{path}: no {'/'.join(suffixes)} files in this folder ({what})")
        return files
    if not path.exists():
        raise EngineError(f"{path}: no such file or folder ({what})")
    if path.suffix.lower() not in suffixes:
        raise EngineError(f"{path}: {what} must be {' or '.join(suffixes)} (or a folder of them)")
    return [path]


def open_vectors(path: str | os.PathLike) -> NpyRows:
    """The vectors of one `.npy` or a folder of `.npy` shards, as one lazily read (n, dim) array."""
    rows = NpyRows.open(_files(Path(path), (".npy",), f"{opt('vectors')}"))
    if len(rows) == 0:
        raise EngineError(f"{path}: holds no vectors")
    return rows


def source_signature(rows: NpyRows) -> str:
    """What identifies the input of a resumable build: each file's path, size, modification time and shape."""
    stats = [(p.path, os.stat(p.path).st_size, os.stat(p.path).st_mtime_ns, p.rows, p.dim, p.dtype) for p in rows.parts]
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()


def read_ids(path: str | os.PathLike, n: int) -> list[str]:
    """The ids of the rows in order; their count must be the vectors'."""
    from engine.io.ids import read_id_list
    ids = list(read_id_list(path, unique=True, whole_id=True))
    if len(ids) != n:
        raise EngineError(f"{path}: {len(ids)} ids for {n} vectors; give one id per vector, in row order")
    return ids


@dataclass(frozen=True)
class Meta:
    """Item metadata rows read on demand (the files are streamed at commit, never held whole)."""
    files: tuple[Path, ...]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for f in self.files:
            yield from (_parquet_rows(f) if f.suffix.lower() == ".parquet" else _jsonl_rows(f))


def open_meta(path: str | os.PathLike, n: int) -> Meta:
    """`--meta`: its files, with the row count checked against the vectors' before anything is written."""
    files = _files(Path(path), META_SUFFIXES, opt("meta"))
    count = sum(_parquet_count(f) if f.suffix.lower() == ".parquet" else _jsonl_count(f) for f in files)
    if count != n:
        raise EngineError(f"{path}: {count} metadata rows for {n} vectors; give one row per vector, in row order")
    return Meta(tuple(files))


def _jsonl_count(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip())


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise EngineError(f"{where(path, n)}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
            row = parse_json(text, path, n)  # depth, number length, NaN and repeated keys refused (docs/limits.md)
            if not isinstance(row, dict):
                raise EngineError(f"{where(path, n)}: a metadata row must be a JSON object")
            yield _own_id(row)


def _pyarrow_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise missing_extra("pyarrow (to read parquet metadata)", "parquet") from None
    return pq


def _parquet_count(path: Path) -> int:
    pq = _pyarrow_parquet()
    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception as exc:  # pyarrow's errors have no common base worth naming
        raise EngineError(f"{path}: not a readable parquet file ({str(exc).splitlines()[0][:120]})") from None


def _parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    pq = _pyarrow_parquet()
    n = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=8192):
        for row in batch.to_pylist():
            n += 1
            yield _own_id({key: _plain(value, path, n, key) for key, value in row.items()})


def _plain(value: Any, path: Path, row: int, column: str) -> Any:
    """A parquet cell as a JSON value: dates, times and decimals as their text; bytes (a binary column) and
    NaN or infinities refused in one line naming the row and column, as the JSON reader refuses them."""
    import datetime
    import decimal
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EngineError(f"{path}: row {row}, column {column!r}: {value} is not a finite number (write null)")
        return value
    if isinstance(value, (bytes, bytearray)):
        raise EngineError(f"{path}: row {row}, column {column!r}: binary data; metadata values must be text, "
                          "numbers, booleans or lists and maps of those (cast the column to a string)")
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta, decimal.Decimal)):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v, path, row, f"{column}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):  # a parquet map: (key, value) pairs
            return {str(k): _plain(v, path, row, f"{column}.{k}") for k, v in value}
        return [_plain(v, path, row, column) for v in value]
    raise EngineError(f"{path}: row {row}, column {column!r}: a {type(value).__name__}, which metadata cannot hold")


def _own_id(row: dict[str, Any]) -> dict[str, Any]:
    """A metadata row's own `id` is kept as `meta_id`: the item's id is --ids' (or the row number)."""
    if "id" in row:
        row["meta_id"] = row.pop("id")
    return row
