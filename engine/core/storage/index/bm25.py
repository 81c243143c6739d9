"""A small BM25 index over texts with ids, on the `bm25s` library, saved in bm25s' own format.

Folder layout: bm25s' files (`params.index.json`, `vocab.index.json`, `*.csc.index.npy`) plus `ids.json`
(the docids in index order) and `bm25.json` (how texts were analysed, so queries are analysed alike).

Analysis: `english` (the default, as Lucene, Pyserini and every BM25 a user compares against) drops English stop
words and stems with PyStemmer's Snowball English, so "floods" finds "flooding"; `none` matches lower-cased words
as written. An index records its analyzer; one written before analyzers had names (stop words, no stemming)
keeps what it was built with.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from engine.io.ranking import top_k
from engine.core.storage.store.generations import FileWriter
from engine.errors import EngineError
from engine.io.atomic import write_json
from engine.io.ids import first_duplicate
from engine.io.tables import read_json

IDS_FILE = "ids.json"
META_FILE = "bm25.json"


@dataclass(frozen=True)
class Analyzer:
    """How texts become BM25 terms: bm25s' word pattern, lower case, then stop words and a stemmer."""
    name: str                  # "english", "none", or "stopwords-en" (an index built before analyzers had names)
    stopwords: str | None      # bm25s' stop-word list name ("en") or None
    stemmer: str | None        # PyStemmer language ("english") or None

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        import bm25s
        return bm25s.tokenize(list(texts), stopwords=self.stopwords or [], stemmer=_stemmer(self.stemmer),
                              return_ids=False, show_progress=False)


ANALYZERS = {"english": Analyzer("english", "en", "english"), "none": Analyzer("none", None, None)}
DEFAULT_ANALYZER = "english"


@functools.lru_cache(maxsize=4)
def _stemmer(language: str | None):
    """PyStemmer's Snowball stemmer for `language` (one per process: it caches stems), or None."""
    if language is None:
        return None
    import Stemmer
    return Stemmer.Stemmer(language).stemWords


def named_analyzer(name: str | None) -> Analyzer:
    """The analyzer a name gives (None: the default); an unknown name is one line naming the choices."""
    from engine.errors import opt
    name = DEFAULT_ANALYZER if name is None else str(name).strip().lower()
    if name not in ANALYZERS:
        raise EngineError(f"{opt('bm25_analyzer')} must be one of {', '.join(ANALYZERS)}, not {name!r}")
    return ANALYZERS[name]


def recorded_analyzer(meta: Mapping) -> Analyzer:
    """The analyzer an index's `bm25.json` records; an index from before analyzers had names (no "analyzer"
    key) used its stop words and no stemmer, and keeps them."""
    name = meta.get("analyzer")
    if name in ANALYZERS:
        return ANALYZERS[name]
    stopwords = meta.get("stopwords")
    return Analyzer(f"stopwords-{stopwords}" if stopwords else "none", stopwords or None, None)


def stored_analyzer(folder: str | os.PathLike) -> Analyzer:
    """The analyzer of the BM25 index in `folder` (what a rebuild of the same collection keeps)."""
    path = Path(folder) / META_FILE
    if not path.exists():
        raise EngineError(f"{folder}: not a BM25 index ({META_FILE} is missing); rebuild it")
    return recorded_analyzer(read_json(path))


class BM25Index:
    """Docids aligned with a bm25s retriever; scores are plain BM25 (Lucene variant by default)."""

    def __init__(self, ids: list[str], retriever, analyzer: Analyzer = ANALYZERS[DEFAULT_ANALYZER],
                 method: str = "lucene") -> None:
        self.ids = ids
        self.retriever = retriever
        self.analyzer = analyzer
        self.method = method

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(cls, ids: Sequence[str], texts: Sequence[str], k1: float = 1.5, b: float = 0.75,
              method: str = "lucene", analyzer: Analyzer | str | None = None) -> "BM25Index":
        """Index `texts` under `ids`; `analyzer` an Analyzer or its name (None: english)."""
        import bm25s
        ids = [str(i) for i in ids]
        if len(ids) != len(texts):
            raise EngineError(f"BM25: {len(ids)} ids for {len(texts)} texts")
        if not ids:
            raise EngineError("BM25: nothing to index (no texts)")
        dup = first_duplicate(ids)
        if dup is not None:
            raise EngineError(f"BM25: doc id {ids[dup[1]]!r} appears twice; ids must be unique")
        chosen = analyzer if isinstance(analyzer, Analyzer) else named_analyzer(analyzer)
        retriever = bm25s.BM25(k1=k1, b=b, method=method)
        tokens = chosen.tokenize(texts)
        # bm25s cannot index a corpus whose every text is empty; one placeholder token keeps shapes right
        if not any(tokens):
            tokens = [["\x00"] for _ in tokens]
        retriever.index(tokens, show_progress=False)
        return cls(ids, retriever, chosen, method)

    def write_into(self, folder: Path) -> None:
        """bm25s' files plus ids and tokenization settings, into an existing empty folder."""
        self.retriever.save(str(folder), show_progress=False)
        write_json(folder / IDS_FILE, self.ids)
        write_json(folder / META_FILE, {"analyzer": self.analyzer.name, "stopwords": self.analyzer.stopwords,
                                        "stemmer": self.analyzer.stemmer, "method": self.method,
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
        return cls(ids, retriever, recorded_analyzer(meta), meta.get("method", "lucene"))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every doc (index order) for one query; unknown words score nothing."""
        tokens = self.analyzer.tokenize([query])[0]
        ids = self.retriever.get_tokens_ids(tokens)
        if not ids:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self.retriever.get_scores_from_ids(ids), dtype=np.float32)

    def upper_bound(self, query: str) -> float:
        """No doc scores more: the sum over the query's words of each word's best score in any doc, a word
        no doc holds counted as if one doc held it once (Lucene idf at df=1). So score / bound is on [0, 1]
        with one meaning across queries: a match on one common word of a long query stays small."""
        tokens = self.analyzer.tokenize([query])[0]
        vocab = self.retriever.vocab_dict
        n = len(self.ids)
        unseen = float(np.log(1 + (n - 0.5) / 1.5))
        return float(sum(np.max(self.retriever.get_scores_from_ids([vocab[t]])) if t in vocab else unseen
                         for t in tokens))

    def search(self, query: str, k: int = 10) -> list[tuple[str, float]]:
        """Top-k (docid, score), best first; docs with score 0 (no query word) are left out."""
        s = self.scores(query)
        return [(self.ids[i], float(s[i])) for i in top_k(s, k) if s[i] > 0]
