"""A generation the server handed to a request stays readable until that request ends, whatever a writer
commits meanwhile (`delete`, `--add --update`, `--force`): hybrid, filtered and batch requests included; a
served pipeline reads the current generation."""
from __future__ import annotations

import threading

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from engine.core.storage.builder.update import delete_ids
from engine.core.collection import Collection
from engine.serve.app import create_app
from engine.serve.catalog import open_served
from engine.serve.options import ServeOptions

ROWS = [(f"d{i}", f"text {i} about {'bread' if i % 2 else 'castles'} and more", "odd" if i % 2 else "even")
        for i in range(12)]


def write(path, rows=ROWS):
    path.write_text("id,text,topic\n" + "".join(f"{i},{t},{g}\n" for i, t, g in rows))
    return path


@pytest.fixture()
def root(tmp_path, fake_encoder):
    root = tmp_path / "idx"
    Collection.build("srv", texts=write(tmp_path / "all.csv"), root=root, model="fake", bm25=True)
    return root


def test_an_opened_generation_answers_after_a_commit_deleted_its_files(root, tmp_path):
    served = open_served("srv", root)
    before = [(h.id, h.score) for h in served.col.search(text="bread", k=5, mode="hybrid", where='topic == "odd"')]
    delete_ids("srv", ["d1", "d3"], root=root)
    Collection.build("srv", texts=write(tmp_path / "one.csv", ROWS[:3]), root=root, model="fake", bm25=True,
                     add=True, update=True)
    Collection.build("srv", texts=write(tmp_path / "all.csv"), root=root, model="fake", bm25=True, force=True)
    assert not (root / "srv" / served.col.manifest["roles"]["columns"]).exists()  # the old files are gone
    for mode in ("hybrid", "bm25", "dense"):
        hits = served.col.search(text="bread", k=5, mode=mode, where='topic == "odd"')
        assert hits and all(h.meta["topic"] == "odd" for h in hits)
    assert [(h.id, h.score) for h in served.col.search(text="bread", k=5, mode="hybrid", where='topic == "odd"')] \
        == before


def test_no_valid_request_is_refused_while_a_writer_commits(root, tmp_path):
    bodies = [("/search", {"collection": "srv", "text": "bread", "k": 5}),
              ("/search", {"collection": "srv", "text": "castles", "k": 5, "mode": "hybrid",
                           "where": 'topic == "even"'}),
              ("/search/batch", {"collection": "srv", "k": 3, "where": 'topic != "none"',
                                 "queries": [{"text": "bread"}, {"text": "castles"}]})]
    done = threading.Event()
    errors: list = []

    def writer():
        try:
            for n in range(6):
                delete_ids("srv", ["d5"], root=root)
                Collection.build("srv", texts=write(tmp_path / f"w{n}.csv", ROWS[4:6]), root=root, model="fake",
                                 bm25=True, add=True, update=True)
        except Exception as exc:  # noqa: BLE001  (reported by the test)
            errors.append(exc)
        finally:
            done.set()

    refused = []
    with TestClient(create_app(ServeOptions(root=root)), raise_server_exceptions=False) as c:
        thread = threading.Thread(target=writer)
        thread.start()
        sent = 0
        while not done.is_set() or sent < 30:
            path, body = bodies[sent % len(bodies)]
            r = c.post(path, json=body)
            sent += 1
            if r.status_code != 200:
                refused.append((r.status_code, r.text))
        thread.join()
    assert not errors, errors
    assert not refused, f"{len(refused)} of {sent} refused: {refused[:3]}"


def test_a_served_pipeline_follows_commits_and_never_strands_on_deleted_files(root, tmp_path):
    from engine.core.ranking.pipeline.parse import parse_pipeline
    pipeline = parse_pipeline('retrieve("srv", mode="hybrid", k=20, where="topic == \\"odd\\"") % 20')
    ask = {"pipeline": "p", "text": "bread", "k": 20}
    with TestClient(create_app(ServeOptions(root=root, pipelines=(("p", pipeline),))),
                    raise_server_exceptions=False) as c:
        r = c.post("/search", json=ask)
        assert r.status_code == 200, r.text
        assert "d1" in [h["id"] for h in r.json()["hits"]]
        for n in range(3):
            delete_ids("srv", ["d1"], root=root)
            r = c.post("/search", json=ask)
            assert r.status_code == 200, r.text
            assert "d1" not in [h["id"] for h in r.json()["hits"]]  # the new generation, not a stale one
            Collection.build("srv", texts=write(tmp_path / f"p{n}.csv", ROWS[:2]), root=root, model="fake",
                             bm25=True, add=True, update=True)
            r = c.post("/search", json=ask)
            assert r.status_code == 200 and "d1" in [h["id"] for h in r.json()["hits"]], r.text
