"""Read the row-shaped files users give us: CSV, TSV (headerless `qid<TAB>text` too), JSONL and JSON lists.

Every row keeps its line number so errors can name it.
"""
from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import EngineError, where
from engine.io.jsonio import parse_json
from engine.io.limits import limit, over

ID_COLUMNS = ("id", "qid", "query_id", "topic_id", "case_id", "image_id", "doc_id", "docid")
TEXT_COLUMNS = ("text", "query", "query_text", "caption", "question", "title", "description")


@dataclass(frozen=True)
class Row:
    line: int
    data: dict[str, Any]



def check_file(path: Path, expected: str = "a file") -> None:
    """A missing file, a folder, or anything else that is no regular file where a file belongs (a FIFO would
    block the read forever, a device such as /dev/zero would be read until memory runs out) is an error
    naming the path."""
    import stat
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise EngineError(f"{path}: no such file") from None
    except OSError as exc:
        raise EngineError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise EngineError(f"{path}: is a folder, expected {expected}")
    if not stat.S_ISREG(mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device" \
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "no regular file"
        raise EngineError(f"{path}: is {kind}, expected {expected} (a regular file)")


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
    check_line_lengths(path, lines)
    return [ln.removesuffix("\r") for ln in lines]


def check_line_lengths(origin: object, lines: Sequence[str]) -> None:
    """The first line longer than the `max_line_bytes` limit is an error naming it (characters count as bytes:
    a cheap bound that is exact for ASCII)."""
    most = limit("max_line_bytes")
    if lines and max(map(len, lines)) > most:
        n = next(i for i, ln in enumerate(lines, 1) if len(ln) > most)
        raise over("max_line_bytes", f"a line of {len(lines[n - 1]):,} characters", where(origin, n))


def read_rows(path: str | Path) -> list[Row]:
    """Rows of a table file by its extension; TSV files may have no header (first column id, second text)."""
    return list(iter_rows(path))


def iter_rows(path: str | Path) -> Iterator[Row]:
    """`read_rows` one row at a time (a build streams a large table instead of holding its rows); the file is
    checked when this is called, its rows when they are read."""
    path = Path(path)
    check_file(path, "a CSV, TSV, JSONL or JSON file")
    return _iter_rows(path)


def _iter_rows(path: Path) -> Iterator[Row]:
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson"):
            yield from _read_jsonl(path)
        elif suffix == ".json":
            yield from _read_json(path)
        elif suffix in (".tsv", ".txt", ".topics"):
            yield from _read_tsv(path)
        else:
            yield from _read_csv(path, delimiter=",")
    except UnicodeDecodeError as exc:
        raise EngineError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_jsonl(path: Path) -> Iterator[Row]:
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if len(line) > limit("max_line_bytes"):
                raise over("max_line_bytes", f"a line of {len(line):,} characters", where(path, n))
            if not line.strip():
                continue
            obj = parse_json(line, path, n)
            if not isinstance(obj, dict):
                raise EngineError(f"{where(path, n)}: expected a JSON object per line")
            yield Row(n, obj)


def read_json(path: str | Path, what: str = "file") -> Any:
    """A whole JSON document; a missing file, bad JSON or bad encoding is an EngineError naming the line."""
    path = Path(path)
    if not path.exists():
        raise EngineError(f"{path}: no such {what}")
    check_file(path, f"a JSON {what}")
    try:
        return parse_json(path.read_text(encoding="utf-8-sig"), path)
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


def _read_csv(path: Path, delimiter: str) -> Iterator[Row]:
    """Strict CSV: a quote left open is an error, not rows merged into one field up to the end of the file."""
    csv.field_size_limit(int(limit("max_line_bytes")))
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh, delimiter=delimiter, strict=True)
        try:
            yield from _csv_rows(path, reader)
        except csv.Error as exc:
            if "field larger than field limit" in str(exc):
                raise over("max_line_bytes", "a field", where(path, reader.line_num + 1)) from None
            raise EngineError(f"{where(path, reader.line_num)}: malformed CSV ({exc}; is a quote left "
                              "open?)") from None


def _csv_rows(path: Path, reader: csv.DictReader) -> Iterator[Row]:
    if reader.fieldnames is None:
        return
    header = [h.strip() for h in reader.fieldnames]
    if len(set(header)) != len(header):
        raise EngineError(f"{where(path, 1)}: duplicate column names in header {header}")
    reader.fieldnames = header
    for rec in reader:
        if None in rec:
            raise EngineError(f"{where(path, reader.line_num)}: more fields than the header's {len(header)}")
        if all(v in (None, "") for v in rec.values()):
            continue
        yield Row(reader.line_num, {k: (v if v is not None else "") for k, v in rec.items()})


def _looks_like_header(cells: Sequence[str]) -> bool:
    known = set(ID_COLUMNS) | set(TEXT_COLUMNS)
    return any(c.strip().lower() in known for c in cells)


def _read_tsv(path: Path) -> Iterator[Row]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        first = fh.readline()
    if first and _looks_like_header(first.rstrip("\r\n").split("\t")):
        yield from _read_csv(path, delimiter="\t")
        return
    with open(path, encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            if len(line) > limit("max_line_bytes"):
                raise over("max_line_bytes", f"a line of {len(line):,} characters", where(path, n))
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) < 2:
                raise EngineError(f"{where(path, n)}: expected `id<TAB>text`, found no tab")
            yield Row(n, {"id": parts[0].strip(), "text": "\t".join(parts[1:]).strip(),
                          **{f"col{i}": p for i, p in enumerate(parts)}})


def id_text(value: Any, origin: object, line: int | None, what: str = "id") -> str:
    """An id cell as text: a string or an integer (JSON ids may be numbers); anything else (an object, a
    list, true, 1.5) is an error naming the line, not its Python spelling used as an id."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise EngineError(f"{where(origin, line)}: {what} {preview_value(value)} is a {type(value).__name__}; "
                      "ids are strings or integers")


def cell_text(value: Any, origin: object, line: int | None, what: str = "text") -> str:
    """A text cell as text: a string, a number, or a list of those (joined by ", "); an object or a
    boolean is an error naming the line."""
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(cell_text(v, origin, line, what) for v in value)
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise EngineError(f"{where(origin, line)}: {what} {preview_value(value)} is a {type(value).__name__}, "
                      "expected text")


def preview_value(value: Any, n: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "…"


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


def read_queries(path: str | Path, id_column: str | None = None, text_column: str | None = None,
                 id_columns: Sequence[str] = ()) -> list[tuple[str, str]]:
    """`(qid, text)` pairs from TSV `qid<TAB>text`, CSV or JSONL; duplicate or empty ids are errors.
    `id_columns`: a task's own id column names, tried before the usual ones."""
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no queries in file")
    id_col = pick_column(path, rows[0].data.keys(), id_column, (*id_columns, *ID_COLUMNS), "query id")
    text_col = pick_column(path, rows[0].data.keys(), text_column, TEXT_COLUMNS, "query text")
    seen: dict[str, int] = {}
    out = []
    for row in rows:
        qid = id_text(row.data.get(id_col), path, row.line, "query id")
        text = cell_text(row.data.get(text_col), path, row.line, "query text")
        if not qid:
            raise EngineError(f"{where(path, row.line)}: empty query id")
        if qid in seen:
            raise EngineError(f"{where(path, row.line)}: duplicate query id {qid!r} (first on line {seen[qid]})")
        if not text:
            raise EngineError(f"{where(path, row.line)}: query {qid!r} has no text")
        seen[qid] = row.line
        out.append((qid, text))
    return out
