"""A served pipeline takes what a collection request takes where its first stage can use it: `k`, and
`where`/`mode`/`fusion` applied to a `retrieve(…)` first stage (refused, naming the field, for any other);
`rerank` is refused (a pipeline carries its own rerankers); its hits carry the collection's metadata and
thumbnails as a collection's hits do; the start-up line lists the pipelines."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from engine.commands.serve import served_pipelines
from engine.serve.app import create_app
from engine.serve.options import ServeOptions


@pytest.fixture(scope="module")
def pipes(served_root, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipes")
    files = {"docs": 'retrieve("docs", k=7)', "demo": 'retrieve("demo", k=16) % 5',
             "fused": 'fuse(retrieve("docs", k=7), retrieve("docs", k=5)) % 5',
             "topic": 'retrieve("docs", k=7, where="topic != \\"travel\\"")'}
    for name, text in files.items():
        (folder / f"{name}.toml").write_text(f"pipeline = '{text}'\n")
    opts = ServeOptions(root=served_root, pipelines=served_pipelines([f"{n}={folder / n}.toml" for n in files]))
    with TestClient(create_app(opts), raise_server_exceptions=False) as c:
        yield c


def ids(r) -> list[str]:
    assert r.status_code == 200, r.text
    return [h["id"] for h in r.json()["hits"]]


def test_where_and_k_filter_a_pipeline_as_they_filter_the_collection(pipes):
    where = 'topic == "ml" or topic == "cooking"'
    want = pipes.post("/search", json={"collection": "docs", "text": "deep learning", "k": 3, "where": where})
    got = pipes.post("/search", json={"pipeline": "docs", "text": "deep learning", "k": 3, "where": where})
    assert ids(got) == ids(want) and len(ids(got)) == 3
    assert got.json()["hits"] == want.json()["hits"]  # metadata, scores and thumbnails alike
    assert all(h["meta"]["topic"] in ("ml", "cooking") for h in got.json()["hits"])


def test_a_request_filter_narrows_the_pipelines_own(pipes):
    got = ids(pipes.post("/search", json={"pipeline": "topic", "text": "walking", "k": 7,
                                          "where": 'topic != "history"'}))
    want = ids(pipes.post("/search", json={"collection": "docs", "text": "walking", "k": 7,
                                           "where": 'topic != "travel" and topic != "history"'}))
    assert got == want and len(got) == 4


def test_mode_is_applied_or_refused_as_on_the_collection(pipes):
    a = pipes.post("/search", json={"pipeline": "docs", "text": "bread", "mode": "dense", "k": 4})
    b = pipes.post("/search", json={"collection": "docs", "text": "bread", "mode": "dense", "k": 4})
    assert ids(a) == ids(b)
    a = pipes.post("/search", json={"pipeline": "docs", "text": "bread", "mode": "bm25"})
    b = pipes.post("/search", json={"collection": "docs", "text": "bread", "mode": "bm25"})
    assert a.status_code == b.status_code == 422 and "BM25" in a.json()["detail"]


@pytest.mark.parametrize("body, field", [
    ({"pipeline": "docs", "rerank": True}, "rerank"),
    ({"pipeline": "docs", "rerank": "cross:x"}, "rerank"),
    ({"pipeline": "docs", "rerank_depth": 5}, "rerank_depth"),
    ({"pipeline": "fused", "where": 'topic == "ml"'}, "where"),
    ({"pipeline": "fused", "mode": "dense"}, "mode"),
    ({"pipeline": "docs", "where": "topic =="}, "where"),
    ({"pipeline": "docs", "where": 'yaer > 3'}, "yaer"),
])
def test_what_a_pipeline_cannot_use_is_refused_naming_the_field(pipes, body, field):
    r = pipes.post("/search", json={"text": "deep learning", **body})
    assert r.status_code == 422, r.text
    assert field in r.json()["detail"] and "\n" not in r.json()["detail"]


def test_pipeline_hits_carry_metadata_and_thumbnails(pipes):
    got = pipes.post("/search", json={"pipeline": "demo", "text": "a dog", "k": 3}).json()["hits"]
    want = pipes.post("/search", json={"collection": "demo", "text": "a dog", "k": 3}).json()["hits"]
    assert [h["id"] for h in got] == [h["id"] for h in want]
    assert [h["thumb"] for h in got] == [h["thumb"] for h in want] and all(h["thumb"] for h in got)
    assert [h["meta"] for h in got] == [h["meta"] for h in want]
    fused = pipes.post("/search", json={"pipeline": "fused", "text": "history", "k": 2}).json()["hits"]
    assert all(h["meta"]["topic"] for h in fused)


def test_start_up_line_lists_the_pipelines(served_root, tmp_path, capsys):
    from engine.progress import set_quiet
    from engine.serve.server import announce
    set_quiet(False)  # an earlier command's -q is a process setting
    (tmp_path / "p.toml").write_text("pipeline = 'retrieve(\"docs\", k=5) % 3'\n")
    announce(ServeOptions(root=served_root, pipelines=served_pipelines([f"top3={tmp_path / 'p.toml'}"])))
    err = capsys.readouterr().err
    assert 'serving 1 pipeline(s)' in err and 'top3 = retrieve("docs", k=5) % 3' in err


def test_a_batch_runs_a_pipeline_on_every_query_as_single_requests_do(pipes):
    queries = [{"text": "deep learning"}, {"id": "d3"}, {"text": "castles"}]
    where = 'topic != "travel"'
    r = pipes.post("/search/batch", json={"pipeline": "docs", "k": 3, "where": where, "queries": queries})
    assert r.status_code == 200, r.text
    assert r.json()["collection"] == "docs" and len(r.json()["results"]) == 3
    for q, got in zip(queries, r.json()["results"]):
        one = pipes.post("/search", json={"pipeline": "docs", "k": 3, "where": where, **q}).json()["hits"]
        assert got == one
    for body, field in (({"rerank": True}, "rerank"), ({"collection": "docs"}, "not both"),
                        ({"pipeline": "fused", "mode": "dense"}, "mode")):
        r = pipes.post("/search/batch", json={"pipeline": "docs", "queries": queries, **body})
        assert r.status_code == 422 and field in r.json()["detail"]
    assert pipes.post("/search/batch", json={"pipeline": "nope", "queries": queries}).status_code == 404
    assert pipes.post("/search/batch", json={"queries": queries}).status_code == 422
