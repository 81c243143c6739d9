"""What a pipeline ranks for: a query id, its text, (for search by example) the ids of example items, and for
a first stage that searches by a vector instead of a text: an image file, an item of the collection ("more like
this") or a vector as given."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from engine.errors import EngineError


@dataclass(frozen=True)
class Query:
    qid: str
    text: str = ""
    examples: tuple[str, ...] = field(default_factory=tuple)
    image: str | None = None
    """An image file searched by the collection's image encoder (`retrieve` only)."""
    item: str | None = None
    """An item id of the collection searched by its stored vector (`retrieve` only)."""
    vector: tuple[float, ...] | None = None
    """A vector searched as given (`retrieve` only)."""

    @property
    def by_vector(self) -> bool:
        """Whether a first stage searches it by a vector (an image, an item, a vector) rather than by text."""
        return self.image is not None or self.item is not None or self.vector is not None


def queries_digest(queries: Sequence[Query]) -> str:
    """A key of the query set: what every cached stage output is computed for."""
    h = hashlib.sha256()
    for q in queries:
        row: list = [q.qid, q.text, list(q.examples)]
        if q.by_vector:  # a text query's key is what it always was
            row += [q.image, q.item, list(q.vector) if q.vector is not None else None]
        h.update(json.dumps(row, ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()[:16]


def read_queries_file(path: str | os.PathLike) -> list[Query]:
    """Queries from a file: TSV `qid<TAB>text`, CSV or JSONL with an id and a text column (the readers of
    `engine search --queries`); JSONL rows may add `examples`, a list of item ids to search by."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return _read_jsonl(path)
    from engine.io.tables import read_queries
    return [Query(str(q), t) for q, t in read_queries(path)]


def _read_jsonl(path: Path) -> list[Query]:
    from engine.io.tables import cell_text, check_file, id_text, read_queries
    check_file(path, "a JSONL query file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise EngineError(f"{path}: cannot read the queries ({e})") from None
    parsed: list[tuple[int, str, str, tuple[str, ...]]] = []
    by_example = False
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise EngineError(f"{path}:{n}: not a JSON object") from None
        if not isinstance(row, dict):
            raise EngineError(f"{path}:{n}: expected a JSON object per line, not {type(row).__name__}")
        ex = row.get("examples")
        if ex is not None:
            if not isinstance(ex, list) or not all(isinstance(e, (str, int)) and not isinstance(e, bool) for e in ex):
                raise EngineError(f"{path}:{n}: 'examples' must be a list of item ids")
            by_example = True
        # ids and texts read as every query reader reads them (a list of texts joined; an object refused)
        qid = id_text(row.get("qid", row.get("id", row.get("query_id"))), path, n, "query id")
        text = cell_text(row.get("text", row.get("query")), path, n, "query text")
        parsed.append((n, qid, text, tuple(str(e) for e in ex or ())))
    if not by_example:
        return [Query(str(q), t) for q, t in read_queries(path)]
    for n, qid, _, _ in parsed:
        if not qid:
            raise EngineError(f"{path}:{n}: the query has no id (qid, id or query_id)")
    return [Query(qid, text, ex) for _, qid, text, ex in parsed]
