"""What a collection is built from: image folders or tables of paths, and tables of texts.

Each source becomes a list of `Item`s (id, what to encode, metadata to show), in a stable
order so an interrupted build can be resumed against the same plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from engine.errors import EngineError, opt, where
from engine.io.ids import check_unique
from engine.io.tables import ID_COLUMNS, cell_text, id_text, iter_rows, pick_column

PATH_COLUMNS = ("path", "image_path", "file", "filename", "file_name", "image")
TEXT_FIELD_NAMES = ("text", "caption", "title", "description", "content", "summary", "body", "abstract",
                    "query", "question", "name", "tags")


@dataclass(frozen=True)
class Item:
    id: str
    source: str  # an image path or the text to embed
    meta: dict = field(default_factory=dict)


ItemPairs = Callable[[], Iterator[tuple[int | None, Item]]]
"""(line, item) of a source in order, read afresh on each call (line None: a folder's files)."""


def image_items(source: str | Path, id_column: str | None = None, path_column: str | None = None) -> list[Item]:
    """A folder (searched recursively; id = path below it without the extension) or a CSV/JSONL of id + path."""
    pairs = list(image_pairs(source, id_column, path_column)())
    lines = [n for n, _ in pairs]
    check_unique([it.id for _, it in pairs], "id", str(source), None if Path(source).is_dir() else lines)
    return [it for _, it in pairs]


def image_pairs(source: str | Path, id_column: str | None = None, path_column: str | None = None) -> ItemPairs:
    """`image_items` as (line, item) pairs read on each call (ids not yet checked unique): what a streamed build
    reads chunk by chunk. A folder's file list is found once (its paths, not its items, stay in memory)."""
    from engine.core.images import find_images
    source = Path(source)
    if source.is_dir():
        paths = [str(p) for p in find_images(source)]
        if not paths:
            raise EngineError(f"{source}: no image files found (looked for .jpg, .png, .webp, … recursively)")
        root = source

        def files() -> Iterator[tuple[int | None, Item]]:
            for p in map(Path, paths):
                yield None, Item(p.relative_to(root).with_suffix("").as_posix(), str(p.resolve()),
                                 {"path": str(p.relative_to(root))})
        return files
    first = next(iter_rows(source), None)
    if first is None:
        raise EngineError(f"{source}: no rows")
    cols = first.data.keys()
    id_col = pick_column(source, cols, id_column, ID_COLUMNS, "item id")
    path_col = pick_column(source, cols, path_column, PATH_COLUMNS, "image path")
    base = source.parent

    def rows() -> Iterator[tuple[int | None, Item]]:
        for row in iter_rows(source):
            item_id = id_text(row.data.get(id_col), source, row.line)
            rel = cell_text(row.data.get(path_col), source, row.line, "image path")
            if not item_id:
                raise EngineError(f"{where(source, row.line)}: empty id")
            if not rel:
                raise EngineError(f"{where(source, row.line)}: item {item_id!r} has no image path")
            path = Path(rel) if Path(rel).is_absolute() else base / rel
            yield row.line, Item(item_id, str(path.resolve()), {k: v for k, v in row.data.items() if k != id_col})
    return rows


def text_items(source: str | Path, id_column: str | None = None,
               fields: Sequence[str] | None = None) -> tuple[list[Item], list[str]]:
    """Rows of a CSV/JSONL/TSV with an id and one or more text fields (joined by newlines); returns the fields used."""
    empty: list[str] = []
    read, used = text_pairs(source, id_column, fields)
    pairs = list(read(empty))
    warn_empty(source, empty)
    check_unique([it.id for _, it in pairs], "id", str(source), [n for n, _ in pairs])
    return [it for _, it in pairs], used


def text_pairs(source: str | Path, id_column: str | None = None, fields: Sequence[str] | None = None
               ) -> tuple[Callable[..., Iterator[tuple[int | None, Item]]], list[str]]:
    """`text_items` as (line, item) pairs read on each call (ids not yet checked unique), and the fields used.
    Rows with empty text are left out (`read(empty)` lists them in `empty`)."""
    source = Path(source)
    first = next(iter_rows(source), None)
    if first is None:
        raise EngineError(f"{source}: no rows")
    cols = list(first.data.keys())
    id_col = pick_column(source, cols, id_column, ID_COLUMNS, "item id")
    if fields:
        missing = [f for f in fields if f not in cols]
        if missing:
            raise EngineError(f"{source}: no column {', '.join(map(repr, missing))} (columns: {', '.join(cols)})")
        used = list(fields)
    else:
        used = [c for c in cols if c.lower() in TEXT_FIELD_NAMES and c != id_col]
        if not used:
            used = [c for c in cols if c != id_col and isinstance(first.data.get(c), str)]
            if used:
                from engine.progress import warn
                warn(f"{source}: no column is named as a text ({', '.join(sorted(TEXT_FIELD_NAMES))}); reading the "
                     f"text of {', '.join(map(repr, used))}: name the text columns with {opt('fields')}")
        if not used:
            raise EngineError(f"{source}: no text column found; name them with {opt('fields')} "
                              f"(columns: {', '.join(cols)})")

    def read(empty: list[str] | None = None) -> Iterator[tuple[int | None, Item]]:
        for row in iter_rows(source):
            item_id = id_text(row.data.get(id_col), source, row.line)
            if not item_id:
                raise EngineError(f"{where(source, row.line)}: empty id")
            text = joined_text(row.data, used, source, row.line)
            if not text:
                if empty is not None:
                    empty.append(f"line {row.line} ({item_id})")
                continue
            yield row.line, Item(item_id, text, {k: v for k, v in row.data.items() if k != id_col})
    return read, used


def warn_empty(source: object, empty: Sequence[str]) -> None:
    """The rows of a text table skipped for empty text, the first ten named."""
    if empty:
        from engine.progress import warn
        warn(f"{source}: {len(empty)} rows with empty text skipped: {', '.join(empty[:10])}"
             + (" …" if len(empty) > 10 else ""))


STORED_TEXT = "text"  # the items-row key holding the embedded text where no text fields name it (ready items)


def joined_text(row: dict, fields: Sequence[str], origin: object = "", line: int | None = None) -> str:
    """The text a build embeds for a row: its non-empty `fields`, joined by newlines."""
    return "\n".join(p for p in (cell_text(row.get(f), origin, line, f) for f in fields) if p)


def stored_text(row: dict, fields: Sequence[str] | None) -> str:
    """An item's embedded text read back from its items row (the collection's manifest's `text_fields`, or
    the `text` key ready items are stored with): what a reranker reads; "" where the row holds none."""
    return joined_text(row, fields) if fields else cell_text(row.get(STORED_TEXT), "", None)
