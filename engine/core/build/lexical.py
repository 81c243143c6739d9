"""The BM25 index of a text collection, the role `bm25` (`engine build --texts F --bm25`): documents are the
items' embedded texts (their text fields joined as the build joined them), in row order, so a BM25 doc is
the collection's row. Every commit that changes the rows (`--add`, `--update`, `engine delete`) rebuilds it
from the items, so it never drifts from the vectors: BM25's statistics (idf, mean length) are corpus-wide,
and a fresh build of the same items gives the same index."""
from __future__ import annotations

from typing import Mapping, Sequence

from engine.core.store.generations import FileWriter
from engine.errors import EngineError, opt
from engine.io.tables import cell_text

ROLE = "bm25"


def check_lexical(bm25: bool, kind: str | None) -> None:
    """`--bm25` indexes texts: refused for an image collection before any model loads."""
    if bm25 and kind != "text":
        raise EngineError(f"{opt('bm25')} indexes texts; build a text collection with {opt('texts')} FILE")


def row_text(row: Mapping, fields: Sequence[str] | None, origin: object = "items") -> str:
    """An items row's embedded text: its text fields joined by newlines, as `engine.core.sources` joined them."""
    return "\n".join(p for p in (cell_text(row.get(f), origin, None, f) for f in fields or ()) if p)


def bm25_files(ids: Sequence[str], texts: Sequence[str]) -> dict[str, FileWriter]:
    """The `bm25` role over these documents (the collection's rows, in order)."""
    from engine.core.bm25 import BM25Index
    return {ROLE: BM25Index.build([str(i) for i in ids], list(texts)).writer()}


def stored_texts(rows: Sequence[Mapping], fields: Sequence[str] | None) -> list[str]:
    """The embedded texts of stored items rows (a collection's `text_fields` joined as a build joined them)."""
    return [row_text(r, fields) for r in rows]
