"""The service against what a hostile or careless client sends, and against writers committing while it
answers: every refusal a one-line 4xx, never a 500 or a traceback in the log, and no valid request refused
while `--add` and `--force` publish new generations."""
from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from engine.core.collection import MANIFEST, Collection
from engine.serve.app import create_app
from engine.serve.options import ServeOptions



def refusal(r, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    detail = r.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail
    return detail


def test_the_old_generation_answers_until_no_request_uses_it(docs_table, tmp_path, monkeypatch):
    """`id` and text queries from 4 clients while `--add` then `--force` commit: every one answered 200.
    Opening the new generation is slowed down, so requests keep answering from the old one after the commit
    deleted its files (on the old code, `id` queries then got 422 "rebuilt while it was open")."""
    import engine.serve.catalog as catalog
    root = tmp_path / "idx"
    Collection.build("docs", texts=docs_table.write(tmp_path / "a.csv", docs_table.rows[:5]), root=root)
    real = catalog.open_served
    monkeypatch.setattr(catalog, "open_served", lambda name, r: (time.sleep(0.4), real(name, r))[1])
    outcomes: Counter = Counter()
    stop = threading.Event()
    with TestClient(create_app(ServeOptions(root=root)), raise_server_exceptions=False) as c:
        def ask(worker: int) -> None:
            for n in range(600):  # bounded in count; `stop` ends it when the writers are done
                if stop.is_set():
                    return
                q = {"id": f"d{1 + (n + worker) % 5}"} if n % 3 else {"text": "bread and barbecue"}
                r = c.post("/search", json={"collection": "docs", "k": 3, **q})
                outcomes[(r.status_code, "id" if "id" in q else "text")] += 1
                if r.status_code != 200:
                    outcomes[r.text] += 1
        with ThreadPoolExecutor(4) as pool:
            workers = [pool.submit(ask, w) for w in range(4)]
            time.sleep(0.2)
            Collection.build("docs", texts=docs_table.write(tmp_path / "b.csv", docs_table.rows), root=root, add=True)
            time.sleep(0.6)
            Collection.build("docs", texts=docs_table.write(tmp_path / "c.csv", docs_table.rows[:5]), root=root, force=True)
            time.sleep(0.8)
            stop.set()
            for w in workers:
                w.result()
        assert c.get("/collections/docs").json()["manifest"]["generation"] == 3
    statuses = {key[0] for key in outcomes if isinstance(key, tuple)}
    assert statuses == {200}, outcomes
    assert outcomes[(200, "id")] > 20 and outcomes[(200, "text")] > 5, outcomes


def deep(n: int) -> bytes:
    return ('{"collection": "docs", "text": "x", "k": ' + "[" * n + "]" * n + "}").encode()


@pytest.mark.parametrize("body,status,word", [
    (deep(3000), 422, "nested"),
    (b'{"collection": "docs", "text": "a", "text": "b"}', 422, "twice"),
    (b'{"collection": "docs", "text": "a", "k": ' + b"7" * 5000 + b"}", 422, "characters"),
    (b'{"collection": "docs", "text": "a\\ud800b"}', 422, "surrogate"),
    (b'{"collection": "docs", "text": "a", "k": true}', 422, "k"),
    (b'{"collection": "docs", "text": "a", "k": 2.5}', 422, "k"),
    (b'{"collection": "docs", "text": "a", "k": NaN}', 422, "NaN"),
    (b'{"collection": "docs", "vector": [' + b",".join([b"-3.4e38"] * 384) + b"]}", 422, "overflow"),
    (b'{"collection": "docs", "vector": [' + b",".join([b"1e39"] * 384) + b"]}", 422, "infinite"),
    (b'{"collection": "do\\u0000cs", "text": "a"}', 404, "control"),
    (b'{"collection": "docs\\u0007", "text": "a"}', 404, "control"),
    (b'{"collection": "docs", "text": "a"', 400, "JSON"),
    (b'{"collection": "docs", "text": "\xff"}', 400, "UTF-8"),
    (b'{"collection": "docs", "k": 3, "queries": [{"text": "a\\udc00"}]}', 422, "surrogate"),
    (b'{"collection": "docs", "k": true, "queries": [{"text": "a"}]}', 422, "k"),
])
def test_bodies_are_read_by_the_strict_json_reader(client, body, status, word):
    path = "/search/batch" if b"queries" in body else "/search"
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    assert word in refusal(r, status)


def test_content_type_is_enforced_and_names_with_control_characters_are_404(client):
    body = json.dumps({"collection": "docs", "text": "bread"}).encode()
    assert "no Content-Type" in refusal(client.post("/search", content=body), 415)
    assert "text/plain" in refusal(client.post("/search", content=body, headers={"content-type": "text/plain"}),
                                   415)
    ok = client.post("/search", content=body, headers={"content-type": "Application/JSON; charset=utf-8"})
    assert ok.status_code == 200 and ok.json()["hits"][0]["id"] == "d1"
    for path in ("/collections/do%00cs", "/collections/docs%0A", "/items/do%00cs/d1", "/thumb/demo%00/chelsea",
                 "/items/docs/d%001"):
        refusal(client.get(path), 404)


def test_a_huge_query_vector_is_refused_and_scores_are_always_finite(client, served_root):
    emb = np.asarray(Collection.open("docs", served_root).embeddings)
    big = (emb[2] * 1e36).tolist()  # values up to ~1e36: inner products stay within float32
    hits = client.post("/search", json={"collection": "docs", "vector": big, "k": 7}).json()["hits"]
    assert hits[0]["id"] == "d3" and all(np.isfinite(h["score"]) for h in hits)
    r = client.post("/search", json={"collection": "docs", "vector": [-3.4e38] * 384, "k": 3})
    assert "overflow" in refusal(r, 422)


def poison(root, name: str) -> None:
    """Row 0 of the embeddings (the Flat index's rows, or also its own file's) set to NaN, the manifest's checksums updated (what a
    buggy writer would leave: a collection whose bytes all match)."""
    import faiss
    folder = root / name
    manifest = json.loads((folder / MANIFEST).read_text())
    emb_file, index_file = folder / manifest["roles"]["embeddings"], folder / manifest["roles"]["index"]
    emb = np.load(emb_file).copy()
    emb[0] = np.nan
    np.save(emb_file, emb)
    if manifest.get("index_vectors") != "embeddings":  # a Flat file holding the rows again (an older layout)
        index = faiss.IndexFlatIP(emb.shape[1])
        index.add(emb)
        faiss.write_index(index, str(index_file))
    for f in (emb_file, index_file):
        manifest["files"][f.name] = {"bytes": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_a_stored_nan_vector_fails_verify_and_is_never_served_silently(docs_table, run_cli, tmp_path, monkeypatch, capsys):
    root = tmp_path / "idx"
    Collection.build("one", texts=docs_table.write(tmp_path / "a.csv", docs_table.rows[:1]), root=root)
    Collection.build("docs", texts=docs_table.write(tmp_path / "b.csv", docs_table.rows), root=root)
    for name in ("one", "docs"):
        poison(root, name)
        capsys.readouterr()
        code, _, err = run_cli("verify", name, "--root", root, "-q")
        assert code != 0 and "row 0 holds a NaN" in err and len(err.strip().splitlines()) == 1, err
    with TestClient(create_app(ServeOptions(root=root)), raise_server_exceptions=False) as c:
        for name in ("one", "docs"):
            for q in ({"text": "bread"}, {"id": "d1"}, {"vector": [0.05] * 384}):
                assert "NaN" in refusal(c.post("/search", json={"collection": name, "k": 3, **q}), 422)


def test_openapi_documents_what_the_server_sends(client):
    schema = client.get("/openapi.json").json()

    def refs(obj):
        if isinstance(obj, dict):
            if "$ref" in obj:
                yield obj["$ref"]
            for v in obj.values():
                yield from refs(v)
        elif isinstance(obj, list):
            for v in obj:
                yield from refs(v)
    for ref in refs(schema):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in schema["components"]["schemas"]
    assert "$defs" not in json.dumps(schema)
    assert schema["components"]["schemas"]["Error"]["properties"]["detail"]["type"] == "string"
    for path in ("/search", "/search/batch"):
        responses = schema["paths"][path]["post"]["responses"]
        assert {"400", "404", "408", "413", "415", "422", "503"} <= set(responses)
        assert responses["422"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    batch = schema["paths"]["/search/batch"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert batch == {"$ref": "#/components/schemas/BatchRequest"}
    assert schema["components"]["schemas"]["BatchRequest"]["properties"]["queries"]["items"] == \
        {"$ref": "#/components/schemas/Query"}
    assert "404" in schema["paths"]["/collections/{collection}"]["get"]["responses"]
    # and the server sends what it documents: a 422 detail is one string
    assert isinstance(client.post("/search", json={"collection": "docs", "text": "x", "k": 0}).json()["detail"], str)


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def raw(url: str, head: bytes, body: bytes, close: bool, wait: float = 10) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        s.sendall(head + body)
        if close:
            return b""
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
        return b"".join(chunks)


def test_slow_and_short_bodies_are_dropped_in_one_log_line_within_the_timeout(served_root):
    from engine.serve.server import running
    lines = Lines()
    loggers = [logging.getLogger(n) for n in ("engine.serve", "uvicorn", "uvicorn.error")]
    for lg in loggers:
        lg.addHandler(lines)
    try:
        with running(ServeOptions(root=served_root, collections=("docs",), timeout_s=1.0)) as url:
            head = b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            t0 = time.monotonic()
            answer = raw(url, head, b'{"collection"', close=False)  # announces 100 bytes, sends 13, waits
            assert answer.startswith(b"HTTP/1.1 408") and b"timeout of 1 s" in answer
            assert time.monotonic() - t0 < 5
            raw(url, head, b'{"collection"', close=True)  # announces 100, sends 13, hangs up
            time.sleep(0.5)
            import httpx
            r = httpx.post(url + "/search", json={"collection": "docs", "text": "bread"})
            assert r.status_code == 200 and r.json()["hits"][0]["id"] == "d1"
    finally:
        for lg in loggers:
            lg.removeHandler(lines)
    dropped = [r for r in lines.records if "dropped" in r.getMessage()]
    assert len(dropped) == 2, [r.getMessage() for r in lines.records]
    assert not any(r.exc_info for r in lines.records), [r.getMessage() for r in lines.records]
    assert all("\n" not in r.getMessage() for r in lines.records)


@pytest.mark.parametrize("args,word", [
    (["--port", "70000"], "--port"), (["--port", "0"], "--port"), (["--timeout", "nan"], "--timeout"),
    (["--timeout", "0"], "--timeout"), (["--timeout", "1e9"], "--timeout"), (["--batch-window-ms", "-1"],
                                                                              "--batch-window-ms"),
    (["--batch-window-ms", "inf"], "--batch-window-ms"), (["--max-batch", "0"], "--max-batch"),
    (["--max-batch", "100000"], "--max-batch"), (["--max-k", "0"], "--max-k"), (["--max-k", "10000000"], "--max-k"),
    (["--max-upload-mb", "nan"], "--max-upload-mb"), (["--max-upload-mb", "0"], "--max-upload-mb"),
    (["--max-image-pixels", "0"], "--max-image-pixels"),
])
def test_serve_options_out_of_range_are_refused_in_one_line(run_cli, tmp_path, monkeypatch, capsys, args, word):
    code, _, err = run_cli("serve", "--root", tmp_path, *args)
    assert code == 2 and word in err and len(err.strip().splitlines()) == 1, err
