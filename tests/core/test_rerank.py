"""The reranking stage: order equal to `CrossEncoder.predict` on the same pairs (a tiny random-weight
cross-encoder built here from a config, loaded by path), stored text read back, every bad input one line."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


DOCS = [f"document {i} about {w}" for i, w in enumerate(
    ["cats", "dogs", "boats", "trains", "cheese", "rain", "music", "chess", "bread", "rivers", "stars", "maps"])]


@pytest.fixture()
def text_col(tmp_path):
    import csv
    src = tmp_path / "docs.csv"
    with src.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "title", "body"])
        for i, d in enumerate(DOCS):
            w.writerow([f"d{i}", f"title {i}", d])
    from engine.core.collection import Collection
    return Collection.build("docs", texts=src, root=tmp_path / "idx", batch_size=8)


def reference(tiny_cross: Path, query: str, docs: list[str]) -> np.ndarray:
    """CrossEncoder.predict's raw logits (identity activation)."""
    import torch
    from sentence_transformers import CrossEncoder
    return np.asarray(CrossEncoder(str(tiny_cross), device="cpu").predict(
        [(query, d) for d in docs], activation_fn=torch.nn.Identity()))


def forward_logits(folder: Path, query: str, docs: list[str]) -> np.ndarray:
    """transformers' own forward pass of the saved model: one logit per (query, doc) pair (float64)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(folder))
    net = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        batch = tok([query] * len(docs), docs, padding=True, truncation=True, return_tensors="pt")
        return net(**batch).logits[:, 0].double().numpy()


def test_large_logits_rerank_exactly_as_the_raw_logits(tiny_cross_large, text_col):
    """Logits near 80: the sigmoid's scores tie at 0.0/1.0, the stage still orders by the logit."""
    from sentence_transformers import CrossEncoder
    query = "a question about animals"
    first = text_col.search(text=query, k=len(DOCS))
    texts = [f"{h.meta['title']}\n{h.meta['body']}" for h in first]
    logits = forward_logits(tiny_cross_large, query, texts)
    assert np.abs(logits).max() > 50 and len(np.unique(np.round(logits, 3))) == len(DOCS)
    sigmoid = CrossEncoder(str(tiny_cross_large), device="cpu").predict([(query, t) for t in texts])
    assert len(np.unique(sigmoid)) < len(DOCS)  # the trap: saturated scores tie
    hits = text_col.search(text=query, k=len(DOCS), rerank=f"cross:{tiny_cross_large}", rerank_depth=len(DOCS))
    assert [h.id for h in hits] == [first[i].id for i in np.argsort(-logits)]
    np.testing.assert_allclose([h.score for h in hits], np.sort(logits)[::-1], rtol=1e-4)
    assert all(a > b for a, b in zip([h.score for h in hits], [h.score for h in hits][1:]))


def test_every_reranker_writes_strictly_decreasing_scores():
    """Tied and inverted scores after the order is chosen come out strictly decreasing, order unchanged."""
    from engine.core.ranking.rerankers.base import Reranker
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.core.ranking.rerankers.stage import distinct_scores, reordered

    class Tied(Reranker):
        def _score(self, query, docs, kind):
            return np.array([1.0, 3.0, 1.0, 3.0, -np.inf])

    tied = Tied(RerankerSpec.parse("cross:x"))
    got = reordered([(f"d{i}", 10.0 - i) for i in range(6)], tied.score("q", [f"t{i}" for i in range(5)]), 5)
    assert list(got.ids) == ["d1", "d3", "d0", "d2", "d4", "d5"]  # ties keep the given order; d5 below the depth
    scores = list(got.scores)
    assert all(a > b for a, b in zip(scores, scores[1:])) and all(np.isfinite(scores))
    assert scores[0] == 3.0 and scores[2] == 1.0
    assert distinct_scores(np.array([2.0, 2.0, 2.0])) == [2.0, np.nextafter(2.0, -np.inf),
                                                          np.nextafter(np.nextafter(2.0, -np.inf), -np.inf)]


def test_reranked_order_equals_cross_encoder_predict(tiny_cross, text_col):
    query = "a question about animals"
    first = text_col.search(text=query, k=len(DOCS))
    texts = [f"{h.meta['title']}\n{h.meta['body']}" for h in first]
    ref = reference(tiny_cross, query, texts)
    want = [first[i].id for i in np.argsort(-ref, kind="stable")][:5]
    hits = text_col.search(text=query, k=5, rerank=f"cross:{tiny_cross}", rerank_depth=len(DOCS))
    assert [h.id for h in hits] == want
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([h.score for h in hits], np.sort(ref)[::-1][:5], rtol=1e-5, atol=1e-6)


def test_ready_text_items_store_their_text_for_the_reranker(tmp_path):
    from engine.core.collection import Collection
    from engine.core.ranking.rerankers.candidates import item_fields
    from engine.core.sources import Item
    col = Collection.build("items", items=[Item(f"i{n}", d) for n, d in enumerate(DOCS[:4])], kind="text",
                           root=tmp_path)
    hits = col.search(text="cats", k=4)
    assert sorted(f["text"] for f in item_fields(col, [{"id": h.id, **h.meta} for h in hits])) == sorted(DOCS[:4])


def test_cli_run_is_reranked_and_strictly_decreasing(run_cli, tiny_cross, text_col, tmp_path, monkeypatch, capsys):
    from engine.io.runs import parse_run
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tanimals\nq2\tfood and drink\n")
    out = tmp_path / "run.txt"
    code, _, err = run_cli("search", "docs", "--queries", queries, "--out", out, "-k", "4",
                           "--rerank", f"cross:{tiny_cross}", "--rerank-depth", "12",
                           "--root", tmp_path / "idx", "-q")
    assert code == 0, err
    lines = [ln.split() for ln in out.read_text().splitlines()]
    assert len(lines) == 8
    for q, text in (("q1", "animals"), ("q2", "food and drink")):
        first = text_col.search(text=text, k=12)
        ref = reference(tiny_cross, text, [f"{h.meta['title']}\n{h.meta['body']}" for h in first])
        want = [first[i].id for i in np.argsort(-ref, kind="stable")][:4]
        got = [ln for ln in lines if ln[0] == q]
        assert [ln[2] for ln in got] == want
        scores = [float(ln[4]) for ln in got]
        assert all(a > b for a, b in zip(scores, scores[1:]))
    assert not parse_run(out).problems


@pytest.mark.parametrize("args, message", [
    (["--rerank", "nope:x"], "unknown reranker spec"),
    (["--rerank", "cross:"], "names no model"),
    (["--rerank", "cross:x", "--rerank-depth", "0"], "--rerank-depth must be"),
    (["--rerank", "cross:x", "--rerank-depth", "3", "-k", "5"], "below -k"),
    (["--rerank-depth", "20"], "goes with --rerank"),
])
def test_bad_rerank_options_are_one_line(run_cli, args, message, text_col, tmp_path, monkeypatch, capsys):
    code, out, err = run_cli("search", "docs", "cats", *args, "--root", tmp_path / "idx")
    assert code == 2
    text = (out + err).strip()
    assert message in text and "Traceback" not in text and len(text.splitlines()) <= 2


def test_image_collection_refuses_a_text_only_reranker(tmp_path, tiny_cross):
    """Refused before any model loads (the collection's encoder is never needed)."""
    from engine.core.collection import Collection
    from engine.errors import EngineError
    vecs = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    col = Collection.from_vectors("pics", ["a", "b", "c"], vecs, "conse", "image", root=tmp_path)
    with pytest.raises(EngineError, match="scores texts only"):
        col.search(text="a cat", k=1, rerank=f"cross:{tiny_cross}")
    with pytest.raises(EngineError, match="image query takes none"):
        col.search(image=str(tmp_path / "x.jpg"), k=1, rerank=f"cross:{tiny_cross}")


def test_rerank_a_trec_run(run_cli, tiny_cross, tmp_path, monkeypatch, capsys):
    """Any run's top depth is reordered as CrossEncoder.predict orders it; the rest follow, scores decreasing."""
    from engine.io.runs import parse_run, write_run
    docs = tmp_path / "docs.tsv"
    docs.write_text("id\ttext\n" + "".join(f"d{i}\t{d}\n" for i, d in enumerate(DOCS)))
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tanimals\n")
    run = tmp_path / "bm25.run"
    write_run(run, {"q1": [(f"d{i}", 10.0 - i) for i in range(8)]}, "bm25")
    out = tmp_path / "re.run"
    code, _, err = run_cli("rerank", run, "--queries", queries, "--docs", docs,
                           "--model", f"cross:{tiny_cross}", "--depth", "5", "--out", out, "-q")
    assert code == 0, err
    got = [ln.split() for ln in out.read_text().splitlines()]
    ref = reference(tiny_cross, "animals", DOCS[:5])
    assert [ln[2] for ln in got[:5]] == [f"d{i}" for i in np.argsort(-ref, kind="stable")]
    assert [ln[2] for ln in got[5:]] == ["d5", "d6", "d7"]
    scores = [float(ln[4]) for ln in got]
    assert all(a > b for a, b in zip(scores, scores[1:])) and not parse_run(out).problems


@pytest.mark.parametrize("change, message", [
    ({"run_text": "q1 Q0 zz 1 1.0 x\n"}, "does not hold"),
    ({"queries_text": "q9\tother\n"}, "has no text"),
    ({"model": "bad:x"}, "unknown reranker spec"),
    ({"depth": "0"}, "--depth must be"),
])
def test_rerank_bad_input_is_one_line(run_cli, change, message, tmp_path, monkeypatch, capsys):
    docs = tmp_path / "docs.tsv"
    docs.write_text("id\ttext\nd0\tcats\n")
    queries = tmp_path / "q.tsv"
    queries.write_text(change.get("queries_text", "q1\tanimals\n"))
    run = tmp_path / "a.run"
    run.write_text(change.get("run_text", "q1 Q0 d0 1 1.0 x\n"))
    code, out, err = run_cli("rerank", run, "--queries", queries, "--docs", docs,
                             "--model", change.get("model", "cross:no-such-model"), "--depth",
                             change.get("depth", "10"), "--out", tmp_path / "o.run")
    text = (out + err).strip()
    assert code == 2 and message in text and len(text.splitlines()) <= 2 and "Traceback" not in text
    assert not (tmp_path / "o.run").exists()


def test_service_reranks_only_what_it_allows(tiny_cross, text_col, tmp_path):
    from fastapi.testclient import TestClient

    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    spec = f"cross:{tiny_cross}"
    want = [h.id for h in text_col.search(text="animals", k=3, rerank=spec, rerank_depth=12)]
    with TestClient(create_app(ServeOptions(root=tmp_path / "idx", rerank=(spec,))),
                    raise_server_exceptions=False) as c:
        r = c.post("/search", json={"collection": "docs", "text": "animals", "k": 3, "rerank": True,
                                    "rerank_depth": 12})
        assert r.status_code == 200, r.text
        assert [h["id"] for h in r.json()["hits"]] == want
        r = c.post("/search", json={"collection": "docs", "text": "animals", "rerank": "cross:other"})
        assert r.status_code == 422 and "not allowed" in r.json()["detail"]
        r = c.post("/search", json={"collection": "docs", "id": "d1", "rerank": True})
        assert r.status_code == 422 and "text query" in r.json()["detail"]
    with TestClient(create_app(ServeOptions(root=tmp_path / "idx")), raise_server_exceptions=False) as c:
        r = c.post("/search", json={"collection": "docs", "text": "animals", "rerank": True})
        assert r.status_code == 422 and "reranks nothing" in r.json()["detail"]


def test_service_batch_reranks_each_query_like_search(tiny_cross, text_col, tmp_path):
    from fastapi.testclient import TestClient

    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    spec = f"cross:{tiny_cross}"
    texts = ["animals", "food and drink", "travel by water"]
    want = [[h.id for h in text_col.search(text=t, k=3, rerank=spec, rerank_depth=12)] for t in texts]
    plain = [[h.id for h in text_col.search(text=t, k=3)] for t in texts]
    with TestClient(create_app(ServeOptions(root=tmp_path / "idx", rerank=(spec,))),
                    raise_server_exceptions=False) as c:
        body = {"collection": "docs", "k": 3, "queries": [{"text": t} for t in texts]}
        r = c.post("/search/batch", json={**body, "rerank": True, "rerank_depth": 12})
        assert r.status_code == 200, r.text
        assert [[h["id"] for h in hits] for hits in r.json()["results"]] == want
        r = c.post("/search/batch", json={**body, "rerank": spec, "rerank_depth": 12})
        assert [[h["id"] for h in hits] for hits in r.json()["results"]] == want
        r = c.post("/search/batch", json=body)
        assert [[h["id"] for h in hits] for hits in r.json()["results"]] == plain
        r = c.post("/search/batch", json={**body, "rerank": "cross:other"})
        assert r.status_code == 422 and "not allowed" in r.json()["detail"]
        r = c.post("/search/batch", json={**body, "queries": [{"text": "animals"}, {"id": "d1"}], "rerank": True})
        assert r.status_code == 422 and "queries.1" in r.json()["detail"]
        r = c.post("/search/batch", json={**body, "rerank": True, "rerank_depth": 2})
        assert r.status_code == 422 and "below" in r.json()["detail"]
    with TestClient(create_app(ServeOptions(root=tmp_path / "idx")), raise_server_exceptions=False) as c:
        r = c.post("/search/batch", json={**body, "rerank": True})
        assert r.status_code == 422 and "reranks nothing" in r.json()["detail"]
