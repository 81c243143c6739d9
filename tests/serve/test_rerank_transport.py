"""A served reranker's transport going wrong: a truncated body, a garbled status line, a broken chunk and a
server that trickles its answer. Each is one line naming the server, from the Python API, the command line
and the service (a clean 4xx, never a 500), and the trickle is cut off at the request's deadline."""
from __future__ import annotations

import socket
import threading
import time

import pytest

ANSWER = (b'{"choices": [{"text": "yes", "logprobs": {"top_logprobs": [{"yes": -0.1, "no": -2.0}]}}],'
          b' "padding": "' + b"x" * 200 + b'"}')

REPLIES = {
    "truncated": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n" + ANSWER[:40],
    "bad-status": b"HTPT/1.1 2OO fine\r\n\r\n" + ANSWER,
    "broken-chunk": (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"10\r\n" + ANSWER[:16] + b"\r\nzz-not-hex\r\n" + ANSWER[16:] + b"\r\n0\r\n\r\n"),
    "not-json": b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json!",
}
WHAT = {"truncated": "IncompleteRead", "bad-status": "BadStatusLine", "broken-chunk": "IncompleteRead",
        "not-json": "not JSON"}


def read_request(conn: socket.socket) -> bytes:
    """One HTTP request, its headers and its Content-Length body, however the client's segments fall."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class RawServer:
    """A socket server on 127.0.0.1 that reads a whole request and answers `reply` byte for byte (every `gap`
    seconds one byte, when gap > 0), then closes. The request is read to its last body byte first: a socket closed
    with unread bytes is reset, and the client would then see a reset instead of the reply under test."""

    def __init__(self, reply: bytes, gap: float = 0.0):
        self.reply, self.gap = reply, gap
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.stop = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(5)
                read_request(conn)
                if not self.gap:
                    conn.sendall(self.reply)
                    return
                for byte in self.reply:
                    if self.stop.is_set():
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(self.gap)
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture()
def raw_server():
    servers: list[RawServer] = []

    def start(reply: bytes, gap: float = 0.0) -> str:
        servers.append(RawServer(reply, gap))
        return servers[-1].url
    yield start
    for s in servers:
        s.close()


@pytest.mark.parametrize("case", sorted(REPLIES))
def test_a_damaged_answer_is_one_line_naming_the_server(raw_server, case):
    from engine.core.ranking.rerankers.spec import load_reranker
    from engine.errors import EngineError
    url = raw_server(REPLIES[case])
    with pytest.raises(EngineError) as info:
        load_reranker(f"llm:{url}#judge", template="qwen3-reranker").score("q", ["a doc"])
    message = str(info.value)
    assert "\n" not in message and url in message and WHAT[case] in message


def test_a_trickling_server_is_cut_off_at_the_deadline(raw_server, monkeypatch):
    from engine.core.ranking.rerankers import endpoint
    from engine.core.ranking.rerankers.spec import load_reranker
    from engine.errors import EngineError
    monkeypatch.setattr(endpoint, "DEADLINE", 1.5)
    # every byte comes well within a per-read timeout of 1.5 s; the whole answer would take about 80 s
    url = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ANSWER) + ANSWER, gap=0.3)
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"no whole answer within 1.5 s"):
        load_reranker(f"llm:{url}#judge", template="qwen3-reranker").score("q", ["a doc"])
    assert time.monotonic() - start < 5


def test_the_command_line_says_one_line(run_cli, raw_server, tmp_path):
    from engine.io.runs import write_run
    (tmp_path / "docs.tsv").write_text("id\ttext\nd0\tcats\nd1\tdogs\n")
    (tmp_path / "q.tsv").write_text("q1\tanimals\n")
    write_run(tmp_path / "a.run", {"q1": [("d0", 2.0), ("d1", 1.0)]}, "bm25")
    for case in ("truncated", "bad-status", "broken-chunk"):
        url = raw_server(REPLIES[case])
        code, _, err = run_cli("rerank", tmp_path / "a.run", "--queries", tmp_path / "q.tsv", "--docs",
                               tmp_path / "docs.tsv", "--model", f"llm:{url}#judge", "--rerank-template",
                               "qwen3-reranker", "--out", tmp_path / f"{case}.run", "-q")
        assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert url in err and WHAT[case] in err
        assert not (tmp_path / f"{case}.run").exists()


def test_the_service_answers_a_clean_error_not_a_500(served_root, raw_server):
    from fastapi.testclient import TestClient

    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    specs = tuple(f"llm:{raw_server(REPLIES[c])}#judge" for c in ("truncated", "bad-status", "broken-chunk"))
    with TestClient(create_app(ServeOptions(root=served_root, rerank=specs)), raise_server_exceptions=False) as c:
        for spec in specs:
            r = c.post("/search", json={"collection": "docs", "text": "bread", "k": 2, "rerank": spec})
            assert 400 <= r.status_code < 500, r.text
            detail = r.json()["detail"]
            assert "\n" not in detail and spec.split(":", 1)[1].split("#")[0] in detail


def test_an_answer_over_the_cap_is_refused_not_held(raw_server, monkeypatch):
    from engine.core.ranking.rerankers import endpoint
    from engine.core.ranking.rerankers.spec import load_reranker
    from engine.errors import EngineError
    monkeypatch.setattr(endpoint, "MAX_ANSWER_BYTES", 1000)
    body = b"x" * 5000
    known = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    unknown = raw_server(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body)
    chunked = raw_server(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + b"".join(b"3e8\r\n" + b"y" * 1000 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n")
    for url, words in ((known, "announced an answer of 5,000 bytes"), (unknown, "answered more than"),
                       (chunked, "answered more than")):
        with pytest.raises(EngineError, match=words):
            load_reranker(f"llm:{url}#judge", template="qwen3-reranker").score("q", ["a doc"])


@pytest.mark.parametrize("url", ["http://[::1/v1", "http://127.0.0.1:99999/v1", "http://:8000/v1"])
def test_a_server_address_that_cannot_be_one_is_refused_in_one_line(run_cli, tmp_path, url):
    from engine.io.runs import write_run
    (tmp_path / "docs.tsv").write_text("id\ttext\nd0\tcats\n")
    (tmp_path / "q.tsv").write_text("q1\tanimals\n")
    write_run(tmp_path / "a.run", {"q1": [("d0", 2.0)]}, "bm25")
    code, _, err = run_cli("rerank", tmp_path / "a.run", "--queries", tmp_path / "q.tsv", "--docs",
                           tmp_path / "docs.tsv", "--model", f"llm:{url}#judge", "--out", tmp_path / "x.run")
    assert code != 0 and "Traceback" not in err and "write llm:http://HOST:PORT/v1#MODEL" in err, err
