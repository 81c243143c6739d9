"""engine.core.bm25: scores follow the BM25 formula, and an index survives save/load in bm25s' format."""
from __future__ import annotations

import math

import pytest

from engine.core.bm25 import BM25Index
from engine.errors import EngineError

DOCS = {"a": "solar panels capacity", "b": "solar solar farms report annual", "c": "bus ridership"}


def lucene_bm25(term_docs: dict[str, list[str]], term: str, doc: str, k1: float = 1.5, b: float = 0.75) -> float:
    n = len(term_docs)
    df = sum(term in toks for toks in term_docs.values())
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    avgdl = sum(len(t) for t in term_docs.values()) / n
    tf = term_docs[doc].count(term)
    dl = len(term_docs[doc])
    return idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))


def test_scores_follow_the_lucene_formula():
    index = BM25Index.build(list(DOCS), list(DOCS.values()), stopwords=None)
    toks = {d: t.split() for d, t in DOCS.items()}
    hits = dict(index.search("solar", k=3))
    assert set(hits) == {"a", "b"}  # c has no query word: left out
    assert hits["a"] == pytest.approx(lucene_bm25(toks, "solar", "a"), rel=1e-5)
    assert hits["b"] == pytest.approx(lucene_bm25(toks, "solar", "b"), rel=1e-5)
    both = index.scores("solar capacity")
    assert both[0] == pytest.approx(lucene_bm25(toks, "solar", "a") + lucene_bm25(toks, "capacity", "a"), rel=1e-5)


def test_search_order_ties_and_unknown_words():
    index = BM25Index.build(["x", "y", "z"], ["red apple", "green apple", "red red red car"])
    assert [d for d, _ in index.search("red", k=10)] == ["z", "x"]
    assert index.search("banana", k=5) == []
    assert index.search("the of", k=5) == []  # stopwords only
    assert len(index.search("apple", k=1)) == 1
    ranked = index.search("apple", k=5)
    assert [d for d, _ in ranked] == ["x", "y"]  # equal scores: index order


def test_save_load_roundtrip_and_overwrite(tmp_path):
    index = BM25Index.build(list(DOCS), list(DOCS.values()))
    folder = index.save(tmp_path / "bm25")
    loaded = BM25Index.load(folder)
    assert loaded.ids == list(DOCS)
    assert loaded.search("solar report", k=3) == index.search("solar report", k=3)
    BM25Index.build(["only"], ["bus depot"]).save(folder)  # replaces the old index in place
    assert BM25Index.load(folder).search("bus", k=3)[0][0] == "only"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bm25"]  # no temporary leftovers


def test_bad_inputs_are_engine_errors(tmp_path):
    with pytest.raises(EngineError, match="appears twice"):
        BM25Index.build(["a", "a"], ["x", "y"])
    with pytest.raises(EngineError, match="2 ids for 1 texts"):
        BM25Index.build(["a", "b"], ["x"])
    with pytest.raises(EngineError, match="not a BM25 index"):
        BM25Index.load(tmp_path)
    empty = BM25Index.build(["a", "b"], ["", ""])
    assert empty.search("anything") == []
