"""Read the row-shaped files users give us: CSV, TSV (headerless `qid<TAB>text` too), JSONL and JSON lists.

Every row keeps its line number so errors can name it.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from engine.errors import EngineError, where

ID_COLUMNS = ("id", "qid", "query_id", "topic_id", "case_id", "image_id", "doc_id", "docid")
TEXT_COLUMNS = ("text", "query", "query_text", "caption", "question", "title", "description")


@dataclass(frozen=True)
class Row:
    line: int
    data: dict[str, Any]


csv.field_size_limit(1 << 30)


def check_file(path: Path, expected: str = "a file") -> None:
    """A missing file or a folder where a file belongs is an error naming the path."""
    if not path.exists():
        raise EngineError(f"{path}: no such file")
    if path.is_dir():
        raise EngineError(f"{path}: is a folder, expected {expected}")


def read_text_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file without their line endings; a final newline adds no empty line."""
    path = Path(path)
    check_file(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EngineError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def read_rows(path: str | Path) -> list[Row]:
    """Rows of a table file by its extension; TSV files may have no header (first column id, second text)."""
    path = Path(path)
    check_file(path, "a CSV, TSV, JSONL or JSON file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson"):
            return _read_jsonl(path)
        if suffix == ".json":
            return _read_json(path)
        if suffix in (".tsv", ".txt", ".topics"):
            return _read_tsv(path)
        return _read_csv(path, delimiter=",")
    except UnicodeDecodeError as exc:
        raise EngineError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_jsonl(path: Path) -> list[Row]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EngineError(f"{where(path, n)}: invalid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise EngineError(f"{where(path, n)}: expected a JSON object per line")
            rows.append(Row(n, obj))
    return rows


def read_json(path: str | Path, what: str = "file") -> Any:
    """A whole JSON document; a missing file, bad JSON or bad encoding is an EngineError naming the line."""
    path = Path(path)
    if not path.exists():
        raise EngineError(f"{path}: no such {what}")
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise EngineError(f"{where(path, exc.lineno)}: invalid JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise EngineError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_json(path: Path) -> list[Row]:
    obj = read_json(path)
    if isinstance(obj, dict):  # {id: {...}} or {id: "text"}
        return [Row(i + 1, {"id": k, **v} if isinstance(v, dict) else {"id": k, "text": v})
                for i, (k, v) in enumerate(obj.items())]
    if not isinstance(obj, list) or not all(isinstance(o, dict) for o in obj):
        raise EngineError(f"{path}: expected a JSON list of objects or an object keyed by id")
    return [Row(i + 1, o) for i, o in enumerate(obj)]


def _read_csv(path: Path, delimiter: str) -> list[Row]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        if reader.fieldnames is None:
            return []
        header = [h.strip() for h in reader.fieldnames]
        if len(set(header)) != len(header):
            raise EngineError(f"{where(path, 1)}: duplicate column names in header {header}")
        reader.fieldnames = header
        rows = []
        for rec in reader:
            if None in rec:
                raise EngineError(f"{where(path, reader.line_num)}: more fields than the header's {len(header)}")
            if all(v in (None, "") for v in rec.values()):
                continue
            rows.append(Row(reader.line_num, {k: (v if v is not None else "") for k, v in rec.items()}))
    return rows


def _looks_like_header(cells: Sequence[str]) -> bool:
    known = set(ID_COLUMNS) | set(TEXT_COLUMNS)
    return any(c.strip().lower() in known for c in cells)


def _read_tsv(path: Path) -> list[Row]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        first = fh.readline()
    if first and _looks_like_header(first.rstrip("\r\n").split("\t")):
        return _read_csv(path, delimiter="\t")
    rows = []
    with open(path, encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) < 2:
                raise EngineError(f"{where(path, n)}: expected `id<TAB>text`, found no tab")
            rows.append(Row(n, {"id": parts[0].strip(), "text": "\t".join(parts[1:]).strip(),
                                **{f"col{i}": p for i, p in enumerate(parts)}}))
    return rows


def pick_column(path: str | Path, columns: Iterable[str], wanted: str | None, candidates: Sequence[str],
                role: str) -> str:
    """The column to use for `role`: the one asked for, else the first known name present."""
    cols = list(columns)
    if wanted:
        if wanted not in cols:
            raise EngineError(f"{path}: no column {wanted!r} for {role} (columns: {', '.join(cols)})")
        return wanted
    lower = {c.lower(): c for c in cols}
    for c in candidates:
        if c in lower:
            return lower[c]
    raise EngineError(f"{path}: cannot tell which column holds the {role}; name it with an option "
                      f"(columns: {', '.join(cols)}; expected one of {', '.join(candidates)})")


def read_queries(path: str | Path, id_column: str | None = None,
                 text_column: str | None = None) -> list[tuple[str, str]]:
    """`(qid, text)` pairs from TSV `qid<TAB>text`, CSV or JSONL; duplicate or empty ids are errors."""
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no queries in file")
    id_col = pick_column(path, rows[0].data.keys(), id_column, ID_COLUMNS, "query id")
    text_col = pick_column(path, rows[0].data.keys(), text_column, TEXT_COLUMNS, "query text")
    seen: dict[str, int] = {}
    out = []
    for row in rows:
        qid = str(row.data.get(id_col, "")).strip()
        text = str(row.data.get(text_col, "") or "").strip()
        if not qid:
            raise EngineError(f"{where(path, row.line)}: empty query id")
        if qid in seen:
            raise EngineError(f"{where(path, row.line)}: duplicate query id {qid!r} (first on line {seen[qid]})")
        if not text:
            raise EngineError(f"{where(path, row.line)}: query {qid!r} has no text")
        seen[qid] = row.line
        out.append((qid, text))
    return out
