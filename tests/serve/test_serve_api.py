"""The HTTP contract of `engine serve`: rankings equal `engine search`'s, bounds refuse with one 4xx line, no
request path reaches the file system, collections re-open on a new generation, `--server` prints the same."""
from __future__ import annotations

import io
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient
from PIL import Image

from engine.core.collection import MANIFEST, Collection
from engine.errors import EngineError
from engine.serve.app import create_app
from engine.serve.options import ServeOptions



def one_line_refusal(r, status: int) -> str:
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert detail and "\n" not in detail and "Traceback" not in detail
    return detail


def local_json(run_cli, root, *args) -> dict:
    code, out, err = run_cli("search", *args, "--root", root, "--json", "-q")
    assert code == 0, err
    return json.loads(out)


def test_health_collections_docs_and_metrics(client):
    assert client.get("/health").status_code == 200
    cols = {c["name"]: c for c in client.get("/collections").json()}
    assert set(cols) == {"demo", "docs"}
    assert (cols["demo"]["kind"], cols["demo"]["count"], cols["demo"]["encoder"][:5]) == ("image", 16, "conse")
    assert (cols["docs"]["kind"], cols["docs"]["count"], cols["docs"]["encoder"]) == ("text", 7, "sbert:all-MiniLM-L6-v2")
    assert cols["docs"]["manifest"]["generation"] == 1 and "path" not in cols["docs"]["manifest"]
    assert "/search" in client.get("/openapi.json").json()["paths"]
    assert client.get("/docs").status_code == 200 and "<html" in client.get("/").text.lower()
    client.post("/search", json={"collection": "docs", "text": "bread", "k": 2})
    text = client.get("/metrics").text
    for name in ('engine_requests_total{endpoint="/search",status="200"}', "engine_request_seconds_bucket",
                 'engine_encode_seconds_count{modality="text"}', "engine_search_seconds_count",
                 "engine_collections_loaded 2.0"):
        assert name in text


@pytest.mark.parametrize("name,text", [("docs", "deep learning backprop"), ("demo", "a cup of coffee")])
def test_text_ranking_is_engine_search(run_cli, client, served_root, monkeypatch, capsys, name, text):
    r = client.post("/search", json={"collection": name, "text": text, "k": 5})
    assert r.status_code == 200 and r.json()["took_ms"] >= 0
    hits = r.json()["hits"]
    local = local_json(run_cli, served_root, name, text, "-k", "5")["hits"]
    assert [{k: v for k, v in h.items() if k != "thumb"} for h in hits] == \
        [{**h, "meta": h.get("meta", {})} for h in local]
    assert hits[0]["id"] == {"docs": "d6", "demo": "coffee"}[name]


def test_image_upload_is_engine_search_image(run_cli, client, served_root, sample_photos, monkeypatch, capsys):
    photo = sample_photos["coffee"]
    r = client.post("/search", data={"collection": "demo", "k": "4"},
                    files={"image": ("coffee.png", photo.read_bytes(), "image/png")})
    assert r.status_code == 200, r.text
    local = local_json(run_cli, served_root, "demo", "--image", photo, "-k", "4")["hits"]
    assert [(h["id"], h["rank"]) for h in r.json()["hits"]] == [(h["id"], h["rank"]) for h in local]
    assert np.allclose([h["score"] for h in r.json()["hits"]], [h["score"] for h in local], atol=1e-6)
    assert r.json()["hits"][0]["id"] == "coffee"


def test_id_vector_and_batch_search_against_exact_inner_products(client, served_root):
    col = Collection.open("docs", served_root)
    emb = np.asarray(col.embeddings)
    exact = [col.ids[i] for i in np.argsort(-(emb @ emb[1]), kind="stable")[:4]]
    by_id = client.post("/search", json={"collection": "docs", "id": "d2", "k": 4}).json()["hits"]
    by_vec = client.post("/search", json={"collection": "docs", "vector": emb[1].tolist(), "k": 4}).json()["hits"]
    assert [h["id"] for h in by_id] == [h["id"] for h in by_vec] == exact
    queries = [{"text": "castles"}, {"id": "d5"}, {"vector": emb[3].tolist()}, {"text": "bread"}]
    batch = client.post("/search/batch", json={"collection": "docs", "k": 3, "queries": queries})
    assert batch.status_code == 200
    singles = [client.post("/search", json={"collection": "docs", "k": 3, **q}).json()["hits"] for q in queries]
    for got, want in zip(batch.json()["results"], singles):  # texts encoded together: same ranking, scores ± padding
        assert [(h["id"], h["rank"], h["meta"]) for h in got] == [(h["id"], h["rank"], h["meta"]) for h in want]
        assert np.allclose([h["score"] for h in got], [h["score"] for h in want], atol=1e-5)


def test_item_metadata_and_thumbnails(docs_table, client):
    item = client.get("/items/docs/d3").json()
    assert item["meta"] == {"text": docs_table.rows[2][1], "topic": "history"} and item["thumb"] is None
    hit = client.post("/search", json={"collection": "demo", "text": "a cat", "k": 1}).json()["hits"][0]
    assert hit["id"] == "chelsea" and hit["thumb"] == "/thumb/demo/chelsea"
    r = client.get(hit["thumb"])
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    assert max(Image.open(io.BytesIO(r.content)).size) == 256
    assert max(Image.open(io.BytesIO(client.get("/thumb/demo/chelsea?size=64").content)).size) == 64
    one_line_refusal(client.get("/thumb/docs/d1"), 404)
    one_line_refusal(client.get("/items/docs/nope"), 404)


@pytest.mark.parametrize("path", [
    "/thumb/demo/..%2F..%2F..%2F..%2Fetc%2Fpasswd", "/thumb/demo/%2Fetc%2Fpasswd", "/thumb/demo//etc/passwd",
    "/thumb/demo/chelsea%2F..%2F..%2F..%2Fetc%2Fpasswd", "/thumb/..%2Fdemo/chelsea", "/thumb/%2Fetc/passwd",
    "/thumb/demo/..%5C..%5Cwindows%5Cwin.ini", "/items/..%2F..%2Fetc/passwd", "/thumb/demo/~%2F.ssh%2Fid_rsa",
])
def test_no_request_path_reaches_the_file_system(client, path):
    r = client.get(path)
    assert r.status_code == 404, (path, r.status_code)
    assert "root:" not in r.text and r.headers["content-type"] == "application/json"


def test_bad_requests_get_one_line_4xx_and_the_server_goes_on(client, sample_photos):
    bomb = io.BytesIO()
    Image.new("1", (20000, 20000)).save(bomb, format="PNG")  # 400 M pixels in a few kB
    cases = [
        (client.post("/search", content=b"{not json", headers={"content-type": "application/json"}), 400, "JSON"),
        (client.post("/search", content=b"x=1", headers={"content-type": "text/plain"}), 415, "JSON"),
        (client.post("/search", json={"collection": "nope", "text": "x"}), 404, "nope"),
        (client.post("/search", json={"collection": "../docs", "text": "x"}), 404, "../docs"),
        (client.post("/search", json={"collection": "docs", "text": "x", "k": 0}), 422, "k must"),
        (client.post("/search", json={"collection": "docs", "text": "x", "k": 1001}), 422, "1000"),
        (client.post("/search", json={"collection": "docs", "text": "x" * 1001}), 422, "limit"),
        (client.post("/search", json={"collection": "docs", "text": "   "}), 422, "empty"),
        (client.post("/search", json={"collection": "docs", "text": "x", "id": "d1"}), 422, "exactly one"),
        (client.post("/search", json={"collection": "docs"}), 422, "exactly one"),
        (client.post("/search", json={"collection": "docs", "text": "x", "colour": 1}), 422, "colour"),
        (client.post("/search", json={"collection": "docs", "vector": [0.1, 0.2]}), 422, "384-d"),
        (client.post("/search", json={"collection": "docs", "vector": [1e39] * 384}), 422, "infinite"),
        (client.post("/search", json={"collection": "docs", "id": "d99"}), 404, "d99"),
        (client.post("/search", json=[1, 2]), 422, "body"),
        (client.post("/search", data={"collection": "docs"},
                     files={"image": ("a.png", sample_photos["coffee"].read_bytes(), "image/png")}), 422, "text"),
        (client.post("/search", data={"collection": "demo"}, files={"image": ("a.png", b"not an image", "image/png")}),
         422, "not an image"),
        (client.post("/search", data={"collection": "demo"}, files={"image": ("big.png", bomb.getvalue(), "image/png")}),
         422, "pixels"),
        (client.post("/search", data={"collection": "demo", "k": "many"},
                     files={"image": ("a.png", b"x", "image/png")}), 422, "k must"),
        (client.post("/search", data={"collection": "demo"}), 415, "multipart"),
        (client.post("/search", files={"image": ("a.png", b"x", "image/png")}), 422, "collection"),
        (client.post("/search", content=b"{" * (9 << 20), headers={"content-type": "application/json"}), 413, "limit"),
        (client.post("/search", content=(b"{" for _ in range(9 << 10)), headers={"content-type": "application/json"}),
         422, "JSON nested"),  # 9 kB streamed without Content-Length: under the limit, so parsed and refused
        (client.post("/search", content=(b"{" * 1024 for _ in range(9 << 10)),
                     headers={"content-type": "application/json"}), 413, "limit"),  # 9 MiB streamed: cut off
        (client.post("/search/batch", json={"collection": "docs", "queries": []}), 422, "queries"),
        (client.post("/search/batch", json={"collection": "docs", "queries": [{"text": "a"}] * 257}), 422, "256"),
        (client.get("/thumb/demo/chelsea?size=5000"), 422, "size"),
        (client.get("/thumb/demo/chelsea?size=big"), 422, "size"),
        (client.get("/collections/nope"), 404, "nope"),
    ]
    for r, status, word in cases:
        assert word in one_line_refusal(r, status), (status, r.json())
    assert client.get("/health").status_code == 200
    assert client.post("/search", json={"collection": "docs", "text": "bread"}).json()["hits"][0]["id"] == "d1"


def test_timeout_is_a_503_and_api_key_guards_everything_but_the_page(served_root, monkeypatch):
    app = create_app(ServeOptions(root=served_root, timeout_s=0.5, collections=("docs",)))
    with TestClient(app, raise_server_exceptions=False) as c:
        slow = Collection.encode_queries
        monkeypatch.setattr(Collection, "encode_queries", lambda *a, **kw: (time.sleep(1), slow(*a, **kw))[1])
        assert "timeout" in one_line_refusal(c.post("/search", json={"collection": "docs", "text": "bread"}), 503)
        monkeypatch.undo()
        assert c.get("/health").status_code == 200
        assert [x["name"] for x in c.get("/collections").json()] == ["docs"]
        one_line_refusal(c.post("/search", json={"collection": "demo", "text": "a cat"}), 404)
    with pytest.raises(EngineError, match="API key"):
        create_app(ServeOptions(root=served_root, host="0.0.0.0"))
    with TestClient(create_app(ServeOptions(root=served_root, host="0.0.0.0", api_key="s3cret"))) as c:
        for path in ("/health", "/collections", "/metrics", "/thumb/demo/chelsea"):
            assert "API key" in one_line_refusal(c.get(path), 401)
        one_line_refusal(c.get("/health", headers={"X-API-Key": "wrong"}), 401)
        assert c.get("/health", headers={"X-API-Key": "s3cret"}).status_code == 200
        assert c.get("/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/thumb/demo/chelsea?api_key=s3cret").status_code == 200
        assert c.get("/").status_code == 200 and c.get("/static/app.js").status_code == 200


def test_concurrent_text_queries_are_micro_batched(docs_table, served_root):
    app = create_app(ServeOptions(root=served_root, batch_window_ms=200, max_batch=8))
    texts = [t for _, t, _ in docs_table.rows] + ["a", "b", "c", "d", "e", "f", "g", "h", "i"]
    with TestClient(app) as c, ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda t: c.post("/search", json={"collection": "docs", "text": t, "k": 3}), texts))
        metrics = c.get("/metrics").text
    assert all(r.status_code == 200 for r in got)
    col = Collection.open("docs", served_root)
    for text, r in zip(texts, got):
        assert [h["id"] for h in r.json()["hits"]] == [h.id for h in col.search(text=text, k=3)]
    count = float(metrics.split("engine_text_batch_size_count ")[1].split()[0])
    assert count < len(texts)  # fewer forward passes than queries


def test_a_new_generation_is_served_without_restart_and_a_broken_one_never(docs_table, tmp_path):
    root = tmp_path / "idx"
    Collection.build("docs", texts=docs_table.write(tmp_path / "a.csv", docs_table.rows[:4]), root=root)
    with TestClient(create_app(ServeOptions(root=root))) as c:
        ask = lambda: c.post("/search", json={"collection": "docs", "text": "barbecue grill", "k": 10})
        assert len(ask().json()["hits"]) == 4
        Collection.build("docs", texts=docs_table.write(tmp_path / "b.csv", docs_table.rows), root=root, add=True)
        hits = ask().json()["hits"]
        assert len(hits) == 7 and hits[0]["id"] == "d5"
        assert c.get("/collections/docs").json()["manifest"]["generation"] == 2
        # a manifest naming files that are not (all) there: the previous generation keeps answering
        path = root / "docs" / MANIFEST
        manifest = json.loads(path.read_text())
        broken = {**manifest, "generation": 3, "count": 99,
                  "roles": {**manifest["roles"], "index": "index-000003.faiss"},
                  "files": {**manifest["files"], "index-000003.faiss": {"bytes": 1, "sha256": "0"}}}
        time.sleep(0.01)
        path.write_text(json.dumps(broken))
        for _ in range(3):
            r = ask()
            assert r.status_code == 200 and len(r.json()["hits"]) == 7
        path.write_text(json.dumps(manifest))
        Collection.build("new", texts=docs_table.write(tmp_path / "c.csv", docs_table.rows[:2]), root=root)
        assert {x["name"] for x in c.get("/collections").json()} == {"docs", "new"}


def test_cli_search_with_server_prints_the_same(run_cli, served_root, monkeypatch, capsys, sample_photos):
    from engine.serve.server import running
    with running(ServeOptions(root=served_root)) as url:
        for args in (["docs", "neural networks", "-k", "3"], ["demo", "--image", str(sample_photos["rocket"])]):
            for fmt in ([], ["--json"]):
                local = run_cli("search", *args, *fmt, "--root", served_root, "-q")
                remote = run_cli("search", *args, *fmt, "--server", url, "-q")
                assert local[0] == remote[0] == 0 and local[1] == remote[1] and local[1]
        code, _, err = run_cli("search", "nope", "x", "--server", url)
        assert code == 2 and "404" in err and "nope" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("search", "docs", "x", "--server", url)
    assert code == 2 and "cannot reach" in err
    code, _, err = run_cli("serve", "--host", "0.0.0.0", "--root", served_root)
    assert code == 2 and "--api-key" in err


def test_image_builds_record_their_files_and_add_keeps_them(tmp_path, sample_photos):
    import shutil

    from engine.core.collection import IMAGE_FILES
    folder = tmp_path / "photos"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(sample_photos["coffee"], folder / "coffee.png")
    shutil.copy(sample_photos["rocket"], folder / "sub" / "rocket.jpg")
    col = Collection.build("pics", images=folder, root=tmp_path / "idx")
    shutil.copy(sample_photos["horse"], folder / "horse.png")
    col = Collection.build("pics", images=folder, root=tmp_path / "idx", add=True)
    files = col.document(IMAGE_FILES)
    assert files == {i: str((folder / p).resolve()) for i, p in
                     [("coffee", "coffee.png"), ("sub/rocket", "sub/rocket.jpg"), ("horse", "horse.png")]}
    with TestClient(create_app(ServeOptions(root=tmp_path / "idx"))) as c:
        assert c.get("/items/pics/sub/rocket").json()["thumb"] == "/thumb/pics/sub%2Frocket"
        for item in ("coffee", "sub/rocket"):
            assert c.get(f"/thumb/pics/{item}").headers["content-type"] == "image/jpeg"
        (folder / "horse.png").unlink()  # an indexed file gone since: a one-line 422, not a 500
        assert "no longer be read" in one_line_refusal(c.get("/thumb/pics/horse"), 422)


def test_health_names_the_rerankers_the_page_may_offer(served_root, tiny_cross):
    with TestClient(create_app(ServeOptions(root=served_root))) as c:
        assert c.get("/health").json()["rerankers"] == []
    spec = f"cross:{tiny_cross}"
    with TestClient(create_app(ServeOptions(root=served_root, rerank=(spec,)))) as c:
        assert c.get("/health").json()["rerankers"] == [spec]
