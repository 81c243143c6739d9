"""The BM25 index of a text collection, the role `bm25` (`engine build --texts F --bm25`): documents are the
items' embedded texts (their text fields joined as the build joined them), in row order, so a BM25 doc is
the collection's row. Every commit that changes the rows (`--add`, `--update`, `engine delete`) rebuilds it
from the items, so it never drifts from the vectors: BM25's statistics (idf, mean length) are corpus-wide,
and a fresh build of the same items gives the same index. Its analyzer (`--bm25-analyzer`, english by default)
is recorded in the role, and every rebuild keeps the one the collection was built with."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from engine.core.storage.store.generations import FileWriter
from engine.errors import EngineError, opt
from engine.io.tables import cell_text

if TYPE_CHECKING:
    from engine.core.storage.index.bm25 import Analyzer

ROLE = "bm25"


def check_lexical(bm25: bool, kind: str | None, analyzer: str | None = None, add: bool = False) -> None:
    """`--bm25` indexes texts: refused for an image collection before any model loads; `--bm25-analyzer` must
    name an analyzer and, on a new collection, come with `--bm25`."""
    if bm25 and kind != "text":
        raise EngineError(f"{opt('bm25')} indexes texts; build a text collection with {opt('texts')} FILE")
    if analyzer is not None:
        from engine.core.storage.index.bm25 import named_analyzer
        named_analyzer(analyzer)
        if not bm25 and not add:
            raise EngineError(f"{opt('bm25_analyzer')} says how {opt('bm25')} analyses texts; give {opt('bm25')} "
                              "too, or leave it out")


def lexical_analyzer(old: Any, requested: str | None) -> "Analyzer":
    """The analyzer a collection's BM25 role is (re)built with: the one an existing role records (a
    collection built before analyzers had names keeps its own), else the one requested (default english).
    Asking an existing role for another one is refused: its index would change meaning under its users."""
    from engine.core.storage.index.bm25 import named_analyzer, stored_analyzer
    if old is None or ROLE not in old.manifest.get("roles", {}):
        return named_analyzer(requested)
    stored = stored_analyzer(old.file(ROLE))
    if requested is not None and named_analyzer(requested).name != stored.name:
        raise EngineError(f"collection {old.name!r} analyses BM25 texts with {stored.name!r}; "
                          f"{opt('bm25_analyzer')} {requested} would change it: rebuild with {opt('force')}")
    return stored


def row_text(row: Mapping, fields: Sequence[str] | None, origin: object = "items") -> str:
    """An items row's embedded text: its text fields joined by newlines, as `engine.core.sources` joined them."""
    return "\n".join(p for p in (cell_text(row.get(f), origin, None, f) for f in fields or ()) if p)


def bm25_files(ids: Sequence[str], texts: Sequence[str], analyzer: "Analyzer") -> dict[str, FileWriter]:
    """The `bm25` role over these documents (the collection's rows, in order)."""
    from engine.core.storage.index.bm25 import BM25Index
    return {ROLE: BM25Index.build([str(i) for i in ids], list(texts), analyzer=analyzer).writer()}


def stored_texts(rows: Sequence[Mapping], fields: Sequence[str] | None) -> list[str]:
    """The embedded texts of stored items rows (a collection's `text_fields` joined as a build joined them)."""
    return [row_text(r, fields) for r in rows]
