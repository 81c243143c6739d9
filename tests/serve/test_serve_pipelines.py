"""`engine serve --pipeline NAME=FILE`: GET /pipelines lists what is served, POST /search {"pipeline"} runs
it and answers what `engine pipeline run` writes; bad names and files are one line."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from engine.errors import EngineError
from engine.serve.app import create_app
from engine.commands.serve import served_pipelines
from engine.serve.options import ServeOptions



def test_pipeline_search_equals_pipeline_run(run_cli, served_root, tmp_path, monkeypatch, capsys):
    pipe = tmp_path / "p.toml"
    pipe.write_text("pipeline = 'retrieve(\"docs\", k=5) % 3'\n")
    opts = ServeOptions(root=served_root, pipelines=served_pipelines([f"top3={pipe}"]))
    with TestClient(create_app(opts), raise_server_exceptions=False) as c:
        listed = c.get("/pipelines").json()
        assert listed == [{"name": "top3", "pipeline": 'retrieve("docs", k=5) % 3', "collection": "docs"}]
        r = c.post("/search", json={"pipeline": "top3", "text": "deep learning", "k": 10})
        assert r.status_code == 200, r.text
        got = [h["id"] for h in r.json()["hits"]]
        assert c.post("/search", json={"pipeline": "nope", "text": "x"}).status_code == 404
        assert c.post("/search", json={"pipeline": "top3", "collection": "docs", "text": "x"}).status_code == 422
        by_id = c.post("/search", json={"pipeline": "top3", "id": "d1"})
        assert by_id.status_code == 200, by_id.text
        assert [h["id"] for h in by_id.json()["hits"]] == [
            h["id"] for h in c.post("/search", json={"collection": "docs", "id": "d1", "k": 3}).json()["hits"]]
        assert c.post("/search", json={"text": "x"}).status_code == 422
    (tmp_path / "q.tsv").write_text("q1\tdeep learning\n")
    code, _, err = run_cli("pipeline", "run", pipe, "--queries", tmp_path / "q.tsv", "--root",
                           served_root, "--out", tmp_path / "p.run", "--no-cache")
    assert code == 0, err
    assert got == [line.split()[2] for line in (tmp_path / "p.run").read_text().splitlines()]


def test_bad_pipeline_option_is_one_line(tmp_path):
    with pytest.raises(EngineError, match="NAME=FILE"):
        served_pipelines(["nofile"])
    bad = tmp_path / "b.toml"
    bad.write_text("pipeline = 'nope()'\n")
    with pytest.raises(EngineError, match="'nope' is not a stage"):
        served_pipelines([f"x={bad}"])
