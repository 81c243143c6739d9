"""What a collection is built from: image folders or tables of paths, and tables of texts.

Each source becomes a list of `Item`s (id, what to encode, metadata to show), in a stable
order so an interrupted build can be resumed against the same plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from engine.errors import EngineError, opt, where
from engine.io.ids import check_unique
from engine.io.tables import ID_COLUMNS, cell_text, id_text, pick_column, read_rows

PATH_COLUMNS = ("path", "image_path", "file", "filename", "file_name", "image")
TEXT_FIELD_NAMES = ("text", "caption", "title", "description", "content", "summary", "body", "abstract",
                    "query", "question", "name", "tags")


@dataclass(frozen=True)
class Item:
    id: str
    source: str  # an image path or the text to embed
    meta: dict = field(default_factory=dict)


def image_items(source: str | Path, id_column: str | None = None, path_column: str | None = None) -> list[Item]:
    """A folder (searched recursively; id = path below it without the extension) or a CSV/JSONL of id + path."""
    from engine.core.images import find_images
    source = Path(source)
    if source.is_dir():
        paths = find_images(source)
        if not paths:
            raise EngineError(f"{source}: no image files found (looked for .jpg, .png, .webp, … recursively)")
        items = [Item(p.relative_to(source).with_suffix("").as_posix(), str(p.resolve()),
                      {"path": str(p.relative_to(source))}) for p in paths]
        check_unique([it.id for it in items], "id", str(source))
        return items
    rows = read_rows(source)
    if not rows:
        raise EngineError(f"{source}: no rows")
    cols = rows[0].data.keys()
    id_col = pick_column(source, cols, id_column, ID_COLUMNS, "item id")
    path_col = pick_column(source, cols, path_column, PATH_COLUMNS, "image path")
    base = source.parent
    items, lines = [], []
    for row in rows:
        item_id = id_text(row.data.get(id_col), source, row.line)
        rel = cell_text(row.data.get(path_col), source, row.line, "image path")
        if not item_id:
            raise EngineError(f"{where(source, row.line)}: empty id")
        if not rel:
            raise EngineError(f"{where(source, row.line)}: item {item_id!r} has no image path")
        path = Path(rel) if Path(rel).is_absolute() else base / rel
        items.append(Item(item_id, str(path.resolve()), {k: v for k, v in row.data.items() if k != id_col}))
        lines.append(row.line)
    check_unique([it.id for it in items], "id", str(source), lines)
    return items


def text_items(source: str | Path, id_column: str | None = None,
               fields: Sequence[str] | None = None) -> tuple[list[Item], list[str]]:
    """Rows of a CSV/JSONL/TSV with an id and one or more text fields (joined by newlines); returns the fields used."""
    source = Path(source)
    rows = read_rows(source)
    if not rows:
        raise EngineError(f"{source}: no rows")
    cols = list(rows[0].data.keys())
    id_col = pick_column(source, cols, id_column, ID_COLUMNS, "item id")
    if fields:
        missing = [f for f in fields if f not in cols]
        if missing:
            raise EngineError(f"{source}: no column {', '.join(map(repr, missing))} (columns: {', '.join(cols)})")
        used = list(fields)
    else:
        used = [c for c in cols if c.lower() in TEXT_FIELD_NAMES and c != id_col]
        if not used:
            used = [c for c in cols if c != id_col and isinstance(rows[0].data.get(c), str)]
        if not used:
            raise EngineError(f"{source}: no text column found; name them with {opt('fields')} "
                              f"(columns: {', '.join(cols)})")
    items, lines, empty = [], [], []
    for row in rows:
        item_id = id_text(row.data.get(id_col), source, row.line)
        if not item_id:
            raise EngineError(f"{where(source, row.line)}: empty id")
        text = joined_text(row.data, used, source, row.line)
        if not text:
            empty.append(f"line {row.line} ({item_id})")
            continue
        meta = {k: v for k, v in row.data.items() if k != id_col}
        items.append(Item(item_id, text, meta))
        lines.append(row.line)
    if empty:
        from engine.progress import warn
        warn(f"{source}: {len(empty)} rows with empty text skipped: {', '.join(empty[:10])}"
             + (" …" if len(empty) > 10 else ""))
    check_unique([it.id for it in items], "id", str(source), lines)
    return items, used


STORED_TEXT = "text"  # the items-row key holding the embedded text where no text fields name it (ready items)


def joined_text(row: dict, fields: Sequence[str], origin: object = "", line: int | None = None) -> str:
    """The text a build embeds for a row: its non-empty `fields`, joined by newlines."""
    return "\n".join(p for p in (cell_text(row.get(f), origin, line, f) for f in fields) if p)


def stored_text(row: dict, fields: Sequence[str] | None) -> str:
    """An item's embedded text read back from its items row (the collection's manifest's `text_fields`, or
    the `text` key ready items are stored with): what a reranker reads; "" where the row holds none."""
    return joined_text(row, fields) if fields else cell_text(row.get(STORED_TEXT), "", None)
