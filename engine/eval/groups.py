"""Query groups (`qid<TAB>group`): the means per group that `engine eval --groups` adds, e.g. NTCIR's
criticality tiers."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from engine.errors import EngineError, where
from engine.io.atomic import atomic_open
from engine.io.tables import ID_COLUMNS, pick_column, read_rows, read_text_lines

GROUP_COLUMNS = ("group", "criticality", "task_criticalness", "tier", "category")


def read_groups(path: str | os.PathLike) -> dict[str, str]:
    """qid → group from `qid<TAB>group` lines (an optional header) or a CSV/JSON(L) table with id and group
    columns. A qid given two different groups is an error naming both lines."""
    path = Path(path)
    suffix = path.suffix.lower()
    pairs: list[tuple[int, str, str]] = []
    if suffix in (".csv", ".json", ".jsonl", ".ndjson"):
        rows = read_rows(path)
        if not rows:
            raise EngineError(f"{path}: no rows")
        cols = list(rows[0].data.keys())
        id_col = pick_column(path, cols, None, ID_COLUMNS + ("task_id",), "query id")
        group_col = pick_column(path, cols, None, GROUP_COLUMNS, "group")
        pairs = [(r.line, str(r.data.get(id_col, "")).strip(), str(r.data.get(group_col, "")).strip())
                 for r in rows]
    else:
        for n, text in enumerate(read_text_lines(path), 1):
            if not text.strip():
                continue
            parts = text.split("\t") if "\t" in text else text.split(None, 1)
            if len(parts) != 2:
                raise EngineError(f"{where(path, n)}: expected `qid<TAB>group`, found {len(parts)} field(s)")
            qid, group = parts[0].strip(), parts[1].strip()
            if n == 1 and qid.lower() in ID_COLUMNS + ("task_id",) and group.lower() in GROUP_COLUMNS:
                continue  # header
            pairs.append((n, qid, group))
    out: dict[str, str] = {}
    first: dict[str, int] = {}
    for n, qid, group in pairs:
        if not qid or not group:
            raise EngineError(f"{where(path, n)}: empty query id or group")
        if qid in out and out[qid] != group:
            raise EngineError(f"{where(path, n)}: query {qid!r} is in group {group!r} here and in "
                              f"{out[qid]!r} on line {first[qid]}")
        out.setdefault(qid, group)
        first.setdefault(qid, n)
    if not out:
        raise EngineError(f"{path}: no `qid<TAB>group` lines")
    return out


def write_groups(path: str | os.PathLike, groups: Mapping[str, str]) -> int:
    """`qid<TAB>group` lines under a `qid<TAB>group` header, the format `read_groups` reads."""
    with atomic_open(path) as fh:
        fh.write("qid\tgroup\n")
        for qid, group in groups.items():
            fh.write(f"{qid}\t{group}\n")
    return len(groups)
