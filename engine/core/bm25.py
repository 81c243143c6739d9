"""A small BM25 index over texts with ids, on the `bm25s` library, saved in bm25s' own format.

Folder layout: bm25s' files (`params.index.json`, `vocab.index.json`, `*.csc.index.npy`) plus `ids.json`
(the docids in index order) and `bm25.json` (how texts were tokenized, so queries are tokenized alike).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.ranking import top_k
from engine.core.store.generations import FileWriter
from engine.errors import EngineError
from engine.io.atomic import write_json
from engine.io.ids import first_duplicate
from engine.io.tables import read_json

IDS_FILE = "ids.json"
META_FILE = "bm25.json"


def _tokenize(texts: Sequence[str], stopwords: str | None) -> list[list[str]]:
    import bm25s
    return bm25s.tokenize(list(texts), stopwords=stopwords or [], return_ids=False, show_progress=False)


class BM25Index:
    """Docids aligned with a bm25s retriever; scores are plain BM25 (Lucene variant by default)."""

    def __init__(self, ids: list[str], retriever, stopwords: str | None = "en", method: str = "lucene") -> None:
        self.ids = ids
        self.retriever = retriever
        self.stopwords = stopwords
        self.method = method

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(cls, ids: Sequence[str], texts: Sequence[str], k1: float = 1.5, b: float = 0.75,
              method: str = "lucene", stopwords: str | None = "en") -> "BM25Index":
        import bm25s
        ids = [str(i) for i in ids]
        if len(ids) != len(texts):
            raise EngineError(f"BM25: {len(ids)} ids for {len(texts)} texts")
        if not ids:
            raise EngineError("BM25: nothing to index (no texts)")
        dup = first_duplicate(ids)
        if dup is not None:
            raise EngineError(f"BM25: doc id {ids[dup[1]]!r} appears twice; ids must be unique")
        retriever = bm25s.BM25(k1=k1, b=b, method=method)
        tokens = _tokenize(texts, stopwords)
        # bm25s cannot index a corpus whose every text is empty; one placeholder token keeps shapes right
        if not any(tokens):
            tokens = [["\x00"] for _ in tokens]
        retriever.index(tokens, show_progress=False)
        return cls(ids, retriever, stopwords, method)

    def write_into(self, folder: Path) -> None:
        """bm25s' files plus ids and tokenization settings, into an existing empty folder."""
        self.retriever.save(str(folder), show_progress=False)
        write_json(folder / IDS_FILE, self.ids)
        write_json(folder / META_FILE, {"stopwords": self.stopwords, "method": self.method,
                                        "library": "bm25s", "docs": len(self.ids)})

    def writer(self) -> FileWriter:
        """The index as a folder a collection stores beside its vectors (atomic, checksummed)."""
        return FileWriter("", self.write_into)

    def save(self, folder: str | os.PathLike) -> Path:
        """Write into a temporary sibling folder, then swap it in: never a half-written index."""
        from engine.io.atomic import atomic_dir
        with atomic_dir(folder) as tmp:
            self.write_into(tmp)
        return Path(folder)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> "BM25Index":
        import bm25s
        folder = Path(folder)
        for name in (IDS_FILE, META_FILE, "params.index.json"):
            if not (folder / name).exists():
                raise EngineError(f"{folder}: not a BM25 index ({name} is missing); rebuild it")
        meta = read_json(folder / META_FILE)
        ids = read_json(folder / IDS_FILE)
        retriever = bm25s.BM25.load(str(folder), show_progress=False)
        if retriever.scores["num_docs"] != len(ids):
            raise EngineError(f"{folder}: {IDS_FILE} lists {len(ids)} ids but the index holds "
                              f"{retriever.scores['num_docs']} docs; rebuild it")
        return cls(ids, retriever, meta.get("stopwords"), meta.get("method", "lucene"))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every doc (index order) for one query; unknown words score nothing."""
        tokens = _tokenize([query], self.stopwords)[0]
        ids = self.retriever.get_tokens_ids(tokens)
        if not ids:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self.retriever.get_scores_from_ids(ids), dtype=np.float32)

    def upper_bound(self, query: str) -> float:
        """No doc scores more: the sum over the query's words of each word's best score in any doc, a word
        no doc holds counted as if one doc held it once (Lucene idf at df=1). So score / bound is on [0, 1]
        with one meaning across queries: a match on one common word of a long query stays small."""
        tokens = _tokenize([query], self.stopwords)[0]
        vocab = self.retriever.vocab_dict
        n = len(self.ids)
        unseen = float(np.log(1 + (n - 0.5) / 1.5))
        return float(sum(np.max(self.retriever.get_scores_from_ids([vocab[t]])) if t in vocab else unseen
                         for t in tokens))

    def search(self, query: str, k: int = 10) -> list[tuple[str, float]]:
        """Top-k (docid, score), best first; docs with score 0 (no query word) are left out."""
        s = self.scores(query)
        return [(self.ids[i], float(s[i])) for i in top_k(s, k) if s[i] > 0]
