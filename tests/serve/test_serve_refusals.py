"""Requests the service must refuse in one line, not answer: a thumbnail of size 0 (it was read as "the
default") and a query vector of booleans or numeric strings (they were read as 1.0)."""
from __future__ import annotations

import pytest


def detail(r, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    text = r.json()["detail"]
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize("size, status", [("0", 422), ("15", 422), ("1025", 422), ("-1", 422), ("16", 200),
                                          (None, 200)])
def test_a_thumbnail_size_out_of_its_range_is_refused(client, size, status):
    r = client.get("/thumb/demo/chelsea" + (f"?size={size}" if size is not None else ""))
    if status == 200:
        assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    else:
        assert "size must be between 16 and 1024" in detail(r, 422) and f"(got {size})" in detail(r, 422)


def test_a_query_vector_of_booleans_or_strings_is_refused(client):
    dim = client.get("/collections/docs").json()["dim"]
    for bad in ([True] * dim, [1.0] * (dim - 1) + [False], ["1"] * dim):
        r = client.post("/search", json={"collection": "docs", "vector": bad, "k": 2})
        assert detail(r, 422).startswith("vector.")
        r = client.post("/search/batch", json={"collection": "docs", "queries": [{"vector": bad}], "k": 2})
        assert "vector" in detail(r, 422)
    r = client.post("/search", json={"collection": "docs", "vector": [1] * dim, "k": 2})   # whole numbers are numbers
    assert r.status_code == 200 and len(r.json()["hits"]) == 2


def test_a_served_error_names_the_request_field_not_the_command_flag(client, monkeypatch, tmp_path):
    """`engine serve` runs under the command line, which names options by their flags; once serving, an invalid
    `where` in a request is the request's field `where`, not `--where`."""
    from engine.errors import set_option_names
    from engine.serve import server
    set_option_names(lambda name: "--" + name.replace("_", "-"))   # as the CLI installs them
    seen = {}

    class Server:
        def __init__(self, config):
            pass

        def run(self):
            seen["detail"] = detail(client.post("/search", json={"collection": "docs", "text": "x",
                                                                  "where": "year >>"}), 422)

    monkeypatch.setattr(server, "_config", lambda options: None)
    monkeypatch.setattr(server, "announce", lambda options: None)
    monkeypatch.setattr(server, "_uvicorn", lambda: type("U", (), {"Server": Server}))
    try:
        server.serve(server.ServeOptions(root=tmp_path))
    finally:
        set_option_names(str)
    assert seen["detail"].startswith("where ") and "--where" not in seen["detail"]
