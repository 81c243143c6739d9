"""engine.core.storage.index.bm25: scores follow the BM25 formula, and an index survives save/load in bm25s' format."""
from __future__ import annotations

import math

import pytest

from engine.core.storage.index.bm25 import BM25Index
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
    index = BM25Index.build(list(DOCS), list(DOCS.values()), analyzer="none")
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


def test_english_analyzer_stems_and_drops_stop_words():
    """The default analyzer: an inflected form finds its word (Snowball, as PyStemmer stems it), stop words
    match nothing; `none` matches words as written."""
    import Stemmer
    docs = ["flooding closed the river road", "the bridge was painted", "the a of and", "stock market news"]
    english, plain = BM25Index.build(["f", "b", "s", "m"], docs), BM25Index.build(["f", "b", "s", "m"], docs,
                                                                                  analyzer="none")
    assert english.analyzer.name == "english" and plain.analyzer.name == "none"
    assert Stemmer.Stemmer("english").stemWord("floods") == Stemmer.Stemmer("english").stemWord("flooding")
    assert english.search("floods", k=1)[0][0] == "f" and english.search("bridges", k=1)[0][0] == "b"
    assert plain.search("floods") == [] and plain.search("bridges") == []
    assert english.search("the and of") == [] and plain.search("the and of")[0][0] == "s"


def test_analyzer_is_recorded_and_an_unnamed_index_keeps_its_own(tmp_path):
    import json

    from engine.core.storage.index.bm25 import recorded_analyzer
    docs = ["flooding closed the road", "the bridge was painted"]
    folder = BM25Index.build(["f", "b"], docs, analyzer="none").save(tmp_path / "none")
    assert BM25Index.load(folder).analyzer.name == "none"
    assert BM25Index.load(folder).search("floods") == []
    legacy = recorded_analyzer({"stopwords": "en", "method": "lucene", "library": "bm25s", "docs": 2})
    assert (legacy.stopwords, legacy.stemmer) == ("en", None)  # what a build before analyzers had names used
    meta = json.loads((folder / "bm25.json").read_text())
    assert meta["analyzer"] == "none" and meta["stemmer"] is None
    with pytest.raises(EngineError, match="bm25.analyzer must be one of english, none, not 'porter'"):
        BM25Index.build(["a"], ["x"], analyzer="porter")
