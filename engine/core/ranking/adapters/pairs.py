"""Labelled pairs: a CSV with the columns `text,image` (a caption and an image path, relative to the CSV or
absolute) or `query,document` (two texts)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError, where
from engine.io.tables import cell_text, read_rows

LAYOUTS = (("text", "image"), ("query", "document"))


@dataclass(frozen=True)
class Pairs:
    kind: str               # "image" (text → image) or "text" (query → document)
    left: list[str]         # captions or queries
    right: list[str]        # image paths (resolved) or documents
    path: Path


def read_pairs(path: str | Path) -> Pairs:
    """The pairs of a CSV; a missing column, an empty cell or a missing image file is named with its line."""
    path = Path(path)
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no pairs")
    cols = set(rows[0].data)
    layout = next((lay for lay in LAYOUTS if set(lay) <= cols), None)
    if layout is None:
        raise EngineError(f"{path}: needs the columns text,image or query,document (has {', '.join(sorted(cols))})")
    kind = "image" if layout[1] == "image" else "text"
    left, right = [], []
    for row in rows:
        a = cell_text(row.data.get(layout[0]), path, row.line, layout[0])
        b = cell_text(row.data.get(layout[1]), path, row.line, layout[1])
        if not a or not b:
            raise EngineError(f"{where(path, row.line)}: empty {layout[0] if not a else layout[1]}")
        if kind == "image":
            p = Path(b) if Path(b).is_absolute() else path.parent / b
            if not p.is_file():
                raise EngineError(f"{where(path, row.line)}: image {b} not found")
            b = str(p.resolve())
        left.append(a)
        right.append(b)
    if len(set(right)) < 5:
        raise EngineError(f"{path}: {len(set(right))} distinct {layout[1]}s; an adapter needs at least 5 to fit "
                          "and hold some out")
    return Pairs(kind, left, right, path)
