"""The service under hostile requests and concurrent writers, and the tally of what each got.

`engine serve` runs as its own process on 127.0.0.1 over a small MiniLM text collection. Phase 1 sends
hand-made hostile requests to every endpoint (strict-JSON cases, Content-Type, names with control
characters, huge k, vectors that overflow, slow and short bodies over raw sockets) and counts the answers
per endpoint and status. Phase 2 runs valid `id`, text and batch queries from several clients, bounded in
count and time, while `engine build --add` and `engine build --force` commit new generations from the CLI,
and counts any valid request that was not answered 200. The server's log is scanned for tracebacks.

    python benchmarks/serve_hostile.py [--clients 6] [--requests 6000] [--seconds 120] [--out benchmarks/results/serve_hostile.json]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

ROWS = [(f"d{i}", f"Document {i} about {topic}", topic) for i, topic in
        enumerate(["bread", "neural networks", "rome", "scotland", "barbecue", "deep learning", "castles", "tea",
                   "rockets", "horses", "coffee", "coins"], 1)]


def write_docs(path: Path, rows) -> Path:
    path.write_text("id,text,topic\n" + "".join(f'{i},"{t}",{g}\n' for i, t, g in rows))
    return path


def engine(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=600)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hostile_cases(dim: int) -> list[tuple[str, str, dict]]:
    """(method, path, httpx kwargs) for every endpoint."""
    j = {"content-type": "application/json"}
    body = lambda s: {"content": s.encode() if isinstance(s, str) else s, "headers": j}  # noqa: E731
    cases = []
    for path in ("/search", "/search/batch"):
        wrap = (lambda q: '{"collection": "docs", "k": 3, "queries": [' + q + ']}') if path.endswith("batch") \
            else (lambda q: '{"collection": "docs", ' + q[1:])
        for q in ('{"text": "a", "x": ' + "[" * 3000 + "]" * 3000 + "}", '{"text": "a", "text": "b"}', '{"text": "a\\ud800"}',
                  '{"text": "a\\udfff\\ud800"}', '{"text": "\\u0000"}', '{"id": "d1\\u0000"}', '{"text": 1}',
                  '{"vector": [' + ",".join(["-3.4e38"] * dim) + "]}", '{"vector": [' + ",".join(["3e38"] * dim) + "]}",
                  '{"vector": [' + ",".join(["1e39"] * dim) + "]}", '{"vector": [NaN]}', '{"vector": []}',
                  '{"vector": [true]}', '{"id": "nope"}', '{"text": ""}', '{"text": "' + "x" * 5000 + '"}',
                  '{"id": 5}', '{"text": "a", "extra": 1}', '{"text": {"o": 1}}', '{"text": ["a"]}'):
            cases.append(("POST", path, body(wrap(q))))
        for k in ("true", "false", "2.5", '"3"', "0", "-1", "1001", "7" * 5000, "1e3", "null", "[3]"):
            base = '{"collection": "docs", "text": "a", "k": ' if path == "/search" \
                else '{"collection": "docs", "queries": [{"text": "a"}], "k": '
            cases.append(("POST", path, body(base + k + "}")))
        for name in ("do\\u0000cs", "docs\\n", "\\u0007", "", "../docs", "docs/", ".docs", "x" * 5000, "\\ud800"):
            cases.append(("POST", path, body('{"collection": "' + name + '", "text": "a", "queries": [{"text": "a"}]}'
                                             if path.endswith("batch") else '{"collection": "' + name + '", "text": "a"}')))
        for raw in (b"", b"{", b"[]", b"null", b"1", b'"x"', b"\xff\xfe", b'{"collection": "docs", "text": "a"} x',
                    b"[" * 100000, b'{"a":' * 50000):
            cases.append(("POST", path, {"content": raw, "headers": j}))
        good = json.dumps({"collection": "docs", "text": "a", "queries": [{"text": "a"}]}).encode()
        for ctype in (None, "text/plain", "application/x-www-form-urlencoded", "application/jsonx", "json"):
            cases.append(("POST", path, {"content": good, "headers": {"content-type": ctype} if ctype else {}}))
    for name in ("docs%00", "do%0Acs", "%07", "nope", "..%2Fdocs", "docs%ED%A0%80"):
        cases.append(("GET", f"/collections/{name}", {}))
        cases.append(("GET", f"/items/{name}/d1", {}))
        cases.append(("GET", f"/thumb/{name}/d1", {}))
    for item in ("d1%00", "nope", "..%2F..%2Fetc%2Fpasswd", "d1?size=0", "d1?size=" + "9" * 5000):
        cases.append(("GET", f"/items/docs/{item}", {}))
        cases.append(("GET", f"/thumb/docs/{item}", {}))
    return cases


def raw_body(port: int, announced: int, sent: bytes, hang_up: bool) -> str:
    head = (f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {announced}"
            "\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(head + sent)
        if hang_up:
            return "hung up"
        data = s.recv(4096)
        return data.split(b" ", 2)[1].decode() if data else "closed"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--timeout", type=float, default=3)
    ap.add_argument("--out", default="benchmarks/results/serve_hostile.json")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="serve-hostile-"))
    root = tmp / "idx"
    r = engine("build", "docs", "--texts", str(write_docs(tmp / "a.csv", ROWS[:8])), "--root", str(root), "-q")
    assert r.returncode == 0, r.stderr
    port = free_port()
    log = open(tmp / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--root", str(root), "--port", str(port),
                               "--timeout", str(a.timeout)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        dim = httpx.get(url + "/collections/docs").json()["dim"]
        tally: Counter = Counter()
        bad_detail = 0
        with httpx.Client(base_url=url, timeout=30) as c:
            for method, path, kw in hostile_cases(dim):
                resp = c.request(method, path, **kw)
                endpoint = path.split("?")[0] if path.startswith("/search") else "/" + path.split("/")[1]
                tally[(endpoint, resp.status_code)] += 1
                if resp.status_code >= 400:
                    try:
                        detail = resp.json()["detail"]
                        bad_detail += not (isinstance(detail, str) and "\n" not in detail)
                    except (ValueError, KeyError):
                        bad_detail += 1
        for announced, sent, hang in ((100, b'{"collection"', False), (100, b'{"collection"', True),
                                      (10**6, b"", True), (50, b"{", False)):
            tally[("raw body", raw_body(port, announced, sent, hang))] += 1
        phase1 = {f"{e} {s}": n for (e, s), n in sorted(tally.items(), key=str)}

        # phase 2: valid queries while the CLI commits --add and --force
        outcomes: Counter = Counter()
        refused: list[str] = []
        stop = threading.Event()
        started = time.monotonic()
        lock = threading.Lock()

        def client(w: int) -> None:
            with httpx.Client(base_url=url, timeout=30) as c:
                for n in range(a.requests // a.clients):
                    if stop.is_set() or time.monotonic() - started > a.seconds:
                        return
                    kind = ("id", "text", "batch")[n % 3]
                    if kind == "id":
                        body = {"collection": "docs", "k": 3, "id": f"d{1 + (n + w) % 8}"}
                    elif kind == "text":
                        body = {"collection": "docs", "k": 3, "text": ROWS[n % 8][1]}
                    else:
                        body = {"collection": "docs", "k": 3, "queries": [{"id": "d2"}, {"text": "castles"}]}
                    resp = c.post("/search/batch" if kind == "batch" else "/search", json=body)
                    with lock:
                        outcomes[(kind, resp.status_code)] += 1
                        if resp.status_code != 200:
                            refused.append(resp.text[:200])

        threads = [threading.Thread(target=client, args=(w,)) for w in range(a.clients)]
        for t in threads:
            t.start()
        writes = []
        for n, (flag, rows) in enumerate([("--add", ROWS[:9]), ("--add", ROWS[:10]), ("--force", ROWS[:8]),
                                          ("--add", ROWS), ("--force", ROWS[:8]), ("--add", ROWS[:11])]):
            r = engine("build", "docs", "--texts", str(write_docs(tmp / f"w{n}.csv", rows)), "--root", str(root),
                       flag, "-q")
            writes.append((flag, r.returncode))
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        generation = httpx.get(url + "/collections/docs").json()["manifest"]["generation"]
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    text = (tmp / "server.log").read_text()
    result = {"phase1_hostile": phase1, "phase1_requests": sum(tally.values()), "phase1_5xx":
              sum(n for (_, s), n in tally.items() if isinstance(s, int) and s >= 500),
              "phase1_detail_not_one_line": bad_detail,
              "phase2": {f"{k} {s}": n for (k, s), n in sorted(outcomes.items())},
              "phase2_requests": sum(outcomes.values()), "phase2_refused": len(refused), "refused_examples": refused[:5],
              "writes": writes, "final_generation": generation,
              "server_log_tracebacks": text.count("Traceback"), "server_log_dropped_lines": text.count("dropped"),
              "load_average": os.getloadavg()}
    print(f"{'phase 1: hostile requests':40} {result['phase1_requests']:>6}")
    for key, n in phase1.items():
        print(f"  {key:38} {n:>6}")
    print(f"{'phase 2: valid requests during writes':40} {result['phase2_requests']:>6}")
    for key, n in result["phase2"].items():
        print(f"  {key:38} {n:>6}")
    for key in ("phase1_5xx", "phase1_detail_not_one_line", "phase2_refused", "writes", "final_generation",
                "server_log_tracebacks", "server_log_dropped_lines", "load_average"):
        print(f"{key:40} {result[key]}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
