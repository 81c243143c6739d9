"""Id lists and the one duplicate-id check every reader and writer uses."""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from engine.errors import EngineError, opt, preview, where
from engine.io.tables import (
    ID_COLUMNS,
    id_text,
    pick_column,
    read_rows,
    read_text_lines,
)

LIST_ID_COLUMNS = ID_COLUMNS + ("article_id", "model_id", "task_id", "dataset_id", "llm_id")


def first_duplicate(ids: Iterable[object]) -> tuple[int, int] | None:
    """(first position, repeat position) of the first id seen twice, or None: one pass, O(n)."""
    seen: dict[object, int] = {}
    for n, i in enumerate(ids):
        if i in seen:
            return seen[i], n
        seen[i] = n
    return None


def check_unique(ids: Sequence[object], what: str = "id", origin: object | None = None,
                 lines: Sequence[int] | None = None) -> None:
    """Raise an error naming the first repeated id (with its lines, when the caller knows them)."""
    dup = first_duplicate(ids)
    if dup is None:
        return
    first, again = dup
    if lines is not None:
        at, before = where(origin, lines[again]), f"line {lines[first]}"
    else:
        at, before = (f"{origin}" if origin is not None else ""), f"item {first + 1}"
    raise EngineError(f"{at + ': ' if at else ''}duplicate {what} {ids[again]!r} (first at {before}); "
                      f"{what}s must be unique")


def read_id_list(path: str | os.PathLike, unique: bool = False, whole_line: bool = False,
                 whole_id: bool = False) -> dict[str, int]:
    """Ids → line: one id per line (first field; a header like `id` is skipped; white space around a line is
    not part of it), or a CSV/TSV-with-header/JSON(L) table with an id column. With `unique`, a repeated id is
    an error naming both lines. With `whole_line` (a plain list of ids, nothing after them), a line with white
    space inside is an error, not its first word; with `whole_id` the id is the whole line, white space inside
    kept (`has space` is that id, for the caller's id policy to refuse or fix, never `has`)."""
    path = Path(path)
    pairs: list[tuple[int, str]] = []
    if path.suffix.lower() in (".csv", ".json", ".jsonl", ".ndjson"):
        rows = read_rows(path)
        if not rows:
            raise EngineError(f"{path}: no rows")
        col = pick_column(path, rows[0].data.keys(), None, LIST_ID_COLUMNS, "id")
        pairs = [(r.line, id_text(r.data.get(col), path, r.line)) for r in rows]
    else:
        for n, text in enumerate(read_text_lines(path), 1):
            text = text.strip()  # a line's surrounding tabs and spaces are not its id (nor an empty first field)
            fields = [text] if whole_id else text.split("\t") if "\t" in text else text.split()
            if not fields or not fields[0].strip():
                continue
            token = fields[0].strip()
            if whole_line and len(fields) > 1:
                raise EngineError(f"{where(path, n)}: id {text.strip()!r} holds white space; one id per line")
            if n == 1 and token.lower() in LIST_ID_COLUMNS:
                continue
            pairs.append((n, token))
    out: dict[str, int] = {}
    for n, token in pairs:
        if not token:
            raise EngineError(f"{where(path, n)}: empty id")
        if token in out and unique:
            raise EngineError(f"{where(path, n)}: duplicate id {token!r} (first on line {out[token]})")
        out.setdefault(token, n)
    if not out:
        raise EngineError(f"{path}: no ids")
    return out


ID_POLICIES = ("strict", "replace")
"""What a build does with an id a TREC file cannot hold (empty, or with white space): `strict` refuses it
with the first few named; `replace` turns each run of white space into `_` (still unique, or an error)."""
_SPACE = re.compile(r"\s+")
_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f]")


def trec_safe_ids(ids: Sequence[str], policy: str = "strict", origin: object = "", fixable: bool = True) -> list[str]:
    """`ids` checked (and with `replace`, fixed) so every run, qrels and submission can hold them."""
    bad = [i for i in ids if trec_unsafe(i)]
    if not bad:
        return list(ids)
    if policy != "replace" or any(not i.strip() or _UNSAFE.search(_SPACE.sub("_", i)) for i in bad):
        raise EngineError(f"{origin}: {len(bad)} id(s) are empty or hold white space or control characters, which TREC runs cannot "
                          f"hold: {preview([repr(i) for i in bad])}; rename them"
                          + (f", or pass {opt('id_policy')} replace to turn white space into '_'" if fixable else ""))
    fixed = [trec_fixed(i) for i in ids]
    check_unique(fixed, "id (after replacing white space)", origin)
    return fixed


def trec_unsafe(i: str) -> bool:
    """An id a TREC file cannot hold: empty, or with white space or control characters."""
    return not i or _UNSAFE.search(i) is not None


def trec_fixed(i: str) -> str:
    """`--id-policy replace`'s spelling of an id: each run of white space turned into `_`."""
    return _SPACE.sub("_", i.strip())
