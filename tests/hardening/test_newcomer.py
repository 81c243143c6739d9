"""What a new user trips over first: a misspelt filter field, a server with nothing to serve, a root given once
by ENGINE_ROOT."""
from __future__ import annotations

import pytest

from engine.core.collection import Collection


def docs(path):
    path.write_text("id,text,year\nd1,bread and butter,2019\nd2,castle walls,2021\n")
    return path


def test_a_filter_on_a_field_no_item_has_is_one_line(run_cli, tmp_path, monkeypatch, capsys, fake_encoder):
    Collection.build("c", texts=docs(tmp_path / "d.csv"), root=tmp_path / "idx", model="fake")
    fake_encoder["loads"] = 0
    code, out, err = run_cli("search", "c", "bread", "--where", "yaer >= 2020", "--root",
                             tmp_path / "idx")
    assert code == 2 and "no item of collection 'c' has a value for 'yaer'" in err and "year" in err, err
    assert fake_encoder["loads"] == 0  # refused before the model loads
    code, out, err = run_cli("search", "c", "bread", "--where", "year >= 2020", "--root",
                             tmp_path / "idx")
    assert code == 0 and "d2" in out and "d1" not in out, (out, err)


def test_a_filter_on_an_unknown_field_is_a_4xx_in_the_service(tmp_path, fake_encoder):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    Collection.build("c", texts=docs(tmp_path / "d.csv"), root=tmp_path / "idx", model="fake")
    with TestClient(create_app(ServeOptions(root=tmp_path / "idx")), raise_server_exceptions=False) as client:
        r = client.post("/search", json={"collection": "c", "text": "bread", "where": "yaer >= 2020"})
        assert 400 <= r.status_code < 500 and "'yaer'" in r.json()["detail"], r.text
        r = client.post("/search", json={"collection": "c", "text": "bread", "where": "year >= 2020"})
        assert r.status_code == 200 and [h["id"] for h in r.json()["hits"]] == ["d2"]


def test_serve_says_what_it_serves_and_warns_when_nothing(tmp_path, capsys, fake_encoder):
    from engine.serve.options import ServeOptions
    from engine.serve.server import announce
    announce(ServeOptions(root=tmp_path / "empty"))
    err = " ".join(capsys.readouterr().err.split())
    assert "warning:" in err and "no collection in" in err and "engine build NAME" in err
    Collection.build("c", texts=docs(tmp_path / "d.csv"), root=tmp_path / "idx", model="fake")
    capsys.readouterr()
    announce(ServeOptions(root=tmp_path / "idx"))
    err = " ".join(capsys.readouterr().err.split())
    assert "serving 1 collection(s)" in err and ": c" in err and "warning" not in err
    announce(ServeOptions(root=tmp_path / "idx", collections=("c", "typo")))
    err = " ".join(capsys.readouterr().err.split())
    assert "no collection 'typo'" in err


def test_engine_root_sets_the_default_root(run_cli, tmp_path, monkeypatch, capsys, fake_encoder):
    monkeypatch.setenv("ENGINE_ROOT", str(tmp_path / "elsewhere"))
    code, out, err = run_cli("build", "c", "--texts", docs(tmp_path / "d.csv"), "--model",
                             "fake")
    assert code == 0, err
    assert (tmp_path / "elsewhere" / "c" / "manifest.json").is_file()
    code, out, err = run_cli("list")
    assert code == 0 and "c" in out.split(), out
    code, out, err = run_cli("search", "c", "bread")
    assert code == 0 and "d1" in out, err


def test_list_shows_count_size_and_encoder_and_info_summarises(run_cli, tmp_path, monkeypatch, capsys, fake_encoder):
    Collection.build("c", texts=docs(tmp_path / "d.csv"), root=tmp_path / "idx", model="fake")
    code, out, err = run_cli("list", "--root", tmp_path / "idx")
    header, row = out.strip().splitlines()
    assert header.split() == ["name", "kind", "items", "size", "encoder"]
    assert row.split()[:3] == ["c", "text", "2"] and row.split()[-1] == "fake" and "kB" in row
    code, out, err = run_cli("list", "--root", tmp_path / "idx", "--names")
    assert out.split() == ["c"]
    code, out, err = run_cli("info", "c", "--root", tmp_path / "idx")
    assert code == 0 and "--files lists them" in out and "embeddings-000001.npy" not in out
    code, out, err = run_cli("info", "c", "--root", tmp_path / "idx", "--files")
    assert "embeddings-000001.npy" in out


def test_run_ids_say_what_made_the_run(run_cli, tmp_path, monkeypatch, capsys, fake_encoder):
    Collection.build("c", texts=docs(tmp_path / "d.csv"), root=tmp_path / "idx", model="fake", bm25=True)
    (tmp_path / "q.tsv").write_text("q1\tbread\n")
    tags = {}
    for extra in ((), ("--mode", "dense"), ("--mode", "bm25"), ("--run-id", "mine")):
        out = tmp_path / f"{len(tags)}.run"
        code, _, err = run_cli("search", "c", "--queries", tmp_path / "q.tsv", "--out", out,
                               "--root", tmp_path / "idx", *extra)
        assert code == 0, err
        tags[extra] = {line.split()[-1] for line in out.read_text().splitlines()}
    assert tags[()] == {"c-hybrid"} and tags[("--mode", "dense")] == {"c-dense"}
    assert tags[("--mode", "bm25")] == {"c-bm25"} and tags[("--run-id", "mine")] == {"mine"}
    from engine.tasks.model_ranking.mllm import MllmOptions
    from engine.tasks.model_ranking.transfer import run_tag
    options = MllmOptions()
    assert run_tag(options.run_id, options.method) == f"engine-{options.method}" != "engine-transfer"


def test_bench_shows_progress_in_each_phase(tmp_path, monkeypatch, fake_encoder):
    import contextlib

    import engine.progress as progress
    from engine.core.bench import bench_collection
    seen: dict[str, int] = {}

    class Bar:
        def add_task(self, label, total=None, visible=True):
            seen[label] = 0 if visible else -1
            return label

        def update(self, task, completed, total=None):
            seen[task] = completed

        def advance(self, task, n=1):
            pass  # other bars (encoding the queries) are not the bench's

    monkeypatch.setattr(progress, "make_progress", lambda: contextlib.nullcontext(Bar()))
    col = Collection.build("c", texts=docs(tmp_path / "d.csv"), root=tmp_path / "idx", model="fake")
    bench_collection(col, queries=["bread", "walls"], n=10, batch=4)
    seen = {k: v for k, v in seen.items() if "one by one" in k or "batches of" in k}
    assert any(k.startswith("encoding") for k in seen) and any(k.startswith("searching") for k in seen), seen
    assert all(v > 0 for v in seen.values()), seen  # each phase's bar advanced to the calls it timed
