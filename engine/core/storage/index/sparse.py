"""The inverted index of learned sparse vectors (role `sparse` of a text collection, `engine build --sparse`).

Folder layout, plain numpy and JSON (no matrix of the vocabulary's size is ever made):
`terms.npy` (int32, the term ids that occur, ascending), `offsets.npy` (int64, where each term's postings
start in the next two, plus their end), `rows.npy` (int32, the collection rows holding the term, ascending
within a term), `weights.npy` (float32, each row's weight of the term) and `sparse.json` (the model spec, the
rows it covers and a hash of their ids, so an index that no longer matches its collection's rows is refused,
never read out of step).

A query's score of a row is the dot product of their weights (the SparseEncoder's own similarity): the
postings of the query's terms only are read, and rows that share no term with the query score nothing and are
not returned.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.storage.store.generations import FileWriter
from engine.errors import EngineError
from engine.io.ranking import top_k

ROLE = "sparse"
META_FILE = "sparse.json"
ARRAYS = ("terms", "offsets", "rows", "weights")


def ids_hash(ids: Sequence[str]) -> str:
    """What identifies the rows an index covers (their ids, in order)."""
    h = hashlib.blake2b(digest_size=16)
    for i in ids:
        h.update(str(i).encode("utf-8") + b"\0")
    return h.hexdigest()


@dataclass
class SparseIndex:
    terms: np.ndarray
    offsets: np.ndarray
    rows: np.ndarray
    weights: np.ndarray
    meta: dict

    @classmethod
    def build(cls, vectors: Sequence[tuple[np.ndarray, np.ndarray]], ids: Sequence[str], spec: str) -> "SparseIndex":
        """Postings of each document's (term ids, weights), row by row: one sort by term over the nonzeros."""
        if len(vectors) != len(ids):
            raise EngineError(f"sparse index: {len(vectors)} vectors for {len(ids)} ids")
        counts = np.fromiter((len(t) for t, _ in vectors), dtype=np.int64, count=len(vectors))
        all_terms = np.concatenate([t for t, _ in vectors]).astype(np.int32) if len(vectors) else np.zeros(0, np.int32)
        all_weights = np.concatenate([w for _, w in vectors]).astype(np.float32) if len(vectors) else \
            np.zeros(0, np.float32)
        all_rows = np.repeat(np.arange(len(vectors), dtype=np.int32), counts)
        order = np.lexsort((all_rows, all_terms))  # by term, then row
        all_terms, all_rows, all_weights = all_terms[order], all_rows[order], all_weights[order]
        terms, starts = np.unique(all_terms, return_index=True)
        offsets = np.append(starts, len(all_terms)).astype(np.int64)
        meta = {"spec": spec, "count": len(ids), "ids_hash": ids_hash(ids), "terms": int(len(terms)),
                "postings": int(len(all_terms)), "similarity": "dot"}
        return cls(terms.astype(np.int32), offsets, all_rows, all_weights, meta)

    def writer(self) -> FileWriter:
        return FileWriter("", self.write_into)

    def write_into(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ARRAYS:
            np.save(folder / f"{name}.npy", np.ascontiguousarray(getattr(self, name)))
        (folder / META_FILE).write_text(json.dumps(self.meta, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> "SparseIndex":
        folder = Path(folder)
        try:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
        except (OSError, ValueError) as exc:
            raise EngineError(f"{folder}: unreadable sparse index ({type(exc).__name__}: {exc}); rebuild the "
                              "collection with --sparse") from None
        if len(arrays["offsets"]) != len(arrays["terms"]) + 1 or len(arrays["rows"]) != len(arrays["weights"]):
            raise EngineError(f"{folder}: damaged sparse index (its arrays' lengths disagree); rebuild the "
                              "collection with --sparse")
        return cls(meta=meta, **arrays)

    def check_rows(self, ids: Sequence[str], where: str) -> None:
        """Refuse an index built over other rows than the collection's (rows deleted or added since)."""
        if int(self.meta.get("count", -1)) != len(ids) or self.meta.get("ids_hash") != ids_hash(ids):
            raise EngineError(f"{where}: its sparse index covers other rows than the collection holds now "
                              f"({self.meta.get('count')} rows indexed, {len(ids)} there); rebuild it with "
                              "`engine build NAME --texts FILE --force --sparse SPEC`")

    def scores(self, terms: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Every row's dot product with the query (term ids, weights): the postings of its terms only."""
        out = np.zeros(int(self.meta["count"]), dtype=np.float32)
        at = np.searchsorted(self.terms, terms)
        for pos, term, w in zip(at, terms, weights):
            if pos < len(self.terms) and self.terms[pos] == term:
                lo, hi = int(self.offsets[pos]), int(self.offsets[pos + 1])
                out[self.rows[lo:hi]] += np.float32(w) * self.weights[lo:hi]  # a term's rows are distinct
        return out

    def search(self, terms: np.ndarray, weights: np.ndarray, k: int, live: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the k best rows sharing a term with the query, best first (ties by row); `live`
        (a mask) leaves deleted rows out."""
        s = self.scores(terms, weights)
        touched = np.zeros(len(s), dtype=bool)
        at = np.searchsorted(self.terms, terms)
        for pos, term in zip(at, terms):
            if pos < len(self.terms) and self.terms[pos] == term:
                touched[self.rows[int(self.offsets[pos]):int(self.offsets[pos + 1])]] = True
        if live is not None:
            touched &= live
        rows = top_k(np.where(touched, s, -np.inf), k)
        return rows, s[rows]
