"""`"mode"`, `"fusion"` and `"where"` in the service: the same hits as `Collection.search`, refusals in one line."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")

from engine.core.collection import Collection



def test_where_and_mode_equal_collection_search(client, served_root):
    col = Collection.open("docs", served_root)
    where = 'topic in ["cooking", "history"] and not topic == "history"'
    r = client.post("/search", json={"collection": "docs", "text": "food", "k": 5, "where": where})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert [h["meta"]["topic"] for h in hits] == ["cooking", "cooking"]
    assert [(h["id"], round(h["score"], 5)) for h in hits] == \
        [(h.id, round(h.score, 5)) for h in col.search(text="food", k=5, where=where)]
    vec = np.asarray(col.embeddings[0], dtype=float).tolist()
    r = client.post("/search/batch", json={"collection": "docs", "k": 3, "where": 'topic == "ml"',
                                           "queries": [{"vector": vec}, {"id": "d3"}, {"text": "learning"}]})
    assert r.status_code == 200, r.text
    assert all(h["meta"]["topic"] == "ml" for hits in r.json()["results"] for h in hits)
    assert [len(hits) for hits in r.json()["results"]] == [2, 2, 2]


@pytest.mark.parametrize("body, words", [
    ({"mode": "bm25"}, "no BM25 index"), ({"mode": "sparse"}, "must be one of dense, bm25, hybrid"),
    ({"fusion": "max"}, "must be one of rrf, weighted"), ({"where": "topic =="}, "at position 9")])
def test_refusals_are_one_line(client, body, words):
    r = client.post("/search", json={"collection": "docs", "text": "food", **body})
    assert 400 <= r.status_code < 500, r.text
    assert words in r.json()["detail"] and "\n" not in r.json()["detail"]


@pytest.mark.parametrize("where", ["(" * 5000 + 'topic == "ml"' + ")" * 5000, "not " * 5000 + 'topic == "ml"'])
def test_deeply_nested_where_is_a_one_line_4xx_on_search_and_batch(client, where):
    for path, body in (("/search", {"collection": "docs", "text": "food", "where": where}),
                       ("/search/batch", {"collection": "docs", "where": where, "queries": [{"text": "food"}]})):
        r = client.post(path, json=body)
        assert 400 <= r.status_code < 500, r.text
        assert "max_filter_depth" in r.json()["detail"] and "\n" not in r.json()["detail"]
