"""Hostile inputs on the newest surfaces, and the tally of what each got: a served reranker's transport
(truncated, garbled, trickled, oversized answers), pipeline files (arguments of the wrong type, names too long
for a folder, chains too deep, files that are no regular file), query files, `engine experiment`'s outputs,
`engine serve --pipeline` names, the service's thumbnail sizes and query vectors, delete lists, LoRA ids and
the ONNX exports' modes.

Command-line inputs run `engine …` in a process of their own (the fake encoder of tests/conftest.py, through
tests/hardening/writer.py), classed as benchmarks/hostile_inputs.py classes them (clear error, handled,
traceback, silent, blow-up, refused valid input, other); an input whose exit is right but whose result is
wrong (v4 still there after its delete, a p_holm that --stages moved) is `silent`. The service, the trickling
servers (with the deadline shortened), `serve --pipeline` and the exports run in this process.

    python benchmarks/hostile_surfaces.py [--out benchmarks/results/hostile_surfaces.json] [--timeout 60]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

from hostile_inputs import ERROR, OK, REPO, classify, run  # benchmarks/ is the script's folder

COLUMNS = ["clear error", "handled", "traceback", "silent", "blow-up", "refused valid input", "other"]
HELD = ("clear error", "handled")


# ---------------------------------------------------------------- fake reranker servers

class RawServer:
    """127.0.0.1 socket server answering every request with `reply`, one byte every `gap` s when gap > 0."""

    def __init__(self, reply: bytes, gap: float = 0.0, reset: bool = False):
        self.reply, self.gap, self.reset = reply, gap, reset
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(10)
                conn.recv(1 << 20)
                if self.reset:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    return
                if not self.gap:
                    conn.sendall(self.reply)
                    return
                for byte in self.reply:
                    conn.sendall(bytes([byte]))
                    time.sleep(self.gap)
            except OSError:
                return


GOOD = json.dumps({"choices": [{"text": "yes", "logprobs": {"top_logprobs": [{"yes": -0.1, "no": -2.3}]}}]}).encode()


def http(status: bytes, body: bytes, headers: bytes = b"") -> bytes:
    return b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n" + headers + \
        b"Content-Length: %d\r\n\r\n" % len(body) + body


TRANSPORT = {
    "a good answer": (http(b"200 OK", GOOD), OK),
    "truncated at 0 bytes": (b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n", ERROR),
    "truncated at 10 bytes": (b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n" + GOOD[:10], ERROR),
    "truncated one byte short": (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(GOOD) + 1) + GOOD, ERROR),
    "truncated in the headers": (b"HTTP/1.1 200 OK\r\nContent-Le", ERROR),
    "closed at once": (b"", ERROR),
    "reset at once": (b"", ERROR),
    "status line garbage": (b"\x00\xff garbage\r\n\r\n" + GOOD, ERROR),
    "status line HTPT": (b"HTPT/1.1 200 OK\r\n\r\n" + GOOD, ERROR),
    "status code text": (b"HTTP/1.1 abc OK\r\n\r\n" + GOOD, ERROR),
    "status code 4 digits": (b"HTTP/1.1 2000 OK\r\n\r\n" + GOOD, ERROR),
    "status line alone": (b"HTTP/1.1\r\n\r\n", ERROR),
    "ICY status": (b"ICY 200 OK\r\n\r\n" + GOOD, ERROR),
    "HTTP/0.9 body": (GOOD, ERROR),
    "chunk size not hex": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + GOOD + b"\r\n0\r\n\r\n",
                           ERROR),
    "chunk size negative": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nxxxxx\r\n0\r\n\r\n", ERROR),
    "chunk cut short": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\n" + GOOD[:20], ERROR),
    "chunk without its end": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(GOOD) + GOOD,
                              ERROR),
    "chunk size huge": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\nab", ERROR),
    "good chunks": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(GOOD) + GOOD
                    + b"\r\n0\r\n\r\n", OK),
    "101 headers": (b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(101))
                    + b"Content-Length: %d\r\n\r\n" % len(GOOD) + GOOD, ERROR),
    "a 70 kB header line": (b"HTTP/1.1 200 OK\r\nX-Long: " + b"y" * 70_000 + b"\r\n\r\n" + GOOD, ERROR),
    "body not JSON": (http(b"200 OK", b"<html>oops</html>"), ERROR),
    "body empty": (http(b"200 OK", b""), ERROR),
    "body invalid UTF-8": (http(b"200 OK", b'{"a": "\xff"}'), ERROR),
    "500 with HTML": (http(b"500 Internal Server Error", b"<html>" + b"x" * 5000 + b"</html>"), ERROR),
    "404 JSON": (http(b"404 Not Found", b'{"error": "no model"}'), ERROR),
    "302 redirect": (http(b"302 Found", b"", b"Location: http://127.0.0.1:9/v1/completions\r\n"), ERROR),
    "announces 10 GB": (b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n" + b"x" * 1000, ERROR),
    "streams 80 MB without a length": (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b" " * (80 << 20), ERROR),
    "answer JSON null": (http(b"200 OK", b"null"), ERROR),
    "answer without choices": (http(b"200 OK", b'{"choices": []}'), ERROR),
}


def transport_cases(w: Path) -> list[tuple]:
    docs = w / "rr-docs.tsv"
    docs.write_text("id\ttext\nd0\tcats\nd1\tdogs\n")
    (w / "rr-q.tsv").write_text("q1\tanimals\n")
    (w / "rr.run").write_text("q1 Q0 d0 1 2.0 bm25\nq1 Q0 d1 2 1.0 bm25\n")
    cases = []
    for name, (reply, expect) in TRANSPORT.items():
        url = RawServer(reply, reset=name.startswith("reset")).url
        out = w / f"rr-{len(cases)}.run"
        cases.append(("reranker transport", name, expect,
                      ["rerank", w / "rr.run", "--queries", w / "rr-q.tsv", "--docs", docs, "--model",
                       f"llm:{url}#judge", "--rerank-template", "qwen3-reranker", "--out", out, "-q"], out))
    for spec in ("llm:http://[::1/v1#m", "llm:http://127.0.0.1:99999/v1#m", "llm:http://127.0.0.1:9/v1#",
                 "llm:http://:80/v1#m", "llm:https://127.0.0.1:9/v1#m", "llm:http://no-such-host.invalid:80/v1#m",
                 "llm-list:http://127.0.0.1:9/v1#m"):
        out = w / f"rr-{len(cases)}.run"
        cases.append(("reranker transport", f"address {spec}", ERROR,
                      ["rerank", w / "rr.run", "--queries", w / "rr-q.tsv", "--docs", docs, "--model", spec,
                       "--out", out, "-q"], out))
    return cases


def trickle_results() -> list[dict]:
    """Servers that trickle the status line, the headers or the body: cut off at the (shortened) deadline."""
    from engine.core.ranking.rerankers import endpoint
    from engine.core.ranking.rerankers.spec import load_reranker
    from engine.errors import EngineError
    out = []
    old = endpoint.DEADLINE
    endpoint.DEADLINE = 2.0
    try:
        whole = http(b"200 OK", GOOD)
        head = whole.index(b"\r\n\r\n") + 4
        for name, reply in (("trickled status line", whole), ("trickled headers", whole),
                            ("trickled body", whole[:head] + GOOD)):
            url = RawServer(reply, gap=0.25).url
            t0 = time.perf_counter()
            try:
                load_reranker(f"llm:{url}#judge", template="qwen3-reranker").score("q", ["d"])
                outcome = "silent"
            except EngineError as exc:
                outcome = "clear error" if "no whole answer within 2 s" in str(exc) else "other"
            except Exception:  # noqa: BLE001
                outcome = "traceback"
            took = time.perf_counter() - t0
            out.append(result("reranker transport", name, ERROR, outcome if took < 6 else "blow-up", took, ""))
    finally:
        endpoint.DEADLINE = old
    return out


# ---------------------------------------------------------------- pipeline and query files

BAD_EXPRESSIONS = [
    'retrieve(["docs"])', "retrieve(5)", "retrieve(None)", "retrieve(True)", 'retrieve("docs", mode=5)',
    'retrieve("docs", mode=["dense"])', 'retrieve("docs", k="10")', 'retrieve("docs", k=[10])',
    'retrieve("docs", k=True)', 'retrieve("docs", k=1e999)', 'retrieve("docs", k=-1)', 'retrieve("docs", k=0)',
    'retrieve("docs", k=10**20)', 'retrieve("docs", k=5.0)', 'retrieve("docs", k=100000000000000000000)',
    'retrieve("docs", k=2.5)',
    'retrieve("docs", where=5)', 'retrieve("docs", where=["a"])', 'retrieve("docs", fusion=5)',
    'retrieve("docs", pooling=["mean"])', 'retrieve("docs", group=["a"])', 'retrieve("docs", group=5)',
    'retrieve("docs", group=True)', 'retrieve("docs", fetch="x")', 'retrieve("docs", fetch=[1])',
    'score("docs", by=5)', 'score("docs", array=["a"])', 'score("docs", agg=5)', 'score("docs", fields="title")',
    'score("docs", fields=[1])', 'score("docs", k="5")',
    'retrieve("docs") >> rerank(5)', 'retrieve("docs") >> rerank("cross:x", depth="5")',
    'retrieve("docs") >> rerank("cross:x", docs=5)', 'retrieve("docs") >> rerank("cross:x", docs=["docs"])',
    'retrieve("docs") >> rerank("cross:x", group=["a"])', 'retrieve("docs") >> rerank("cross:x", fields="x")',
    'retrieve("docs") >> rerank("cross:x", nope=1)', 'retrieve("docs") >> rerank("cross:x", depth=0)',
    'fuse(retrieve("docs"), retrieve("docs"), weights="x")',
    'fuse(retrieve("docs"), retrieve("docs"), weights=["a", "b"])',
    'fuse(retrieve("docs"), retrieve("docs"), method=5)', 'fuse(retrieve("docs"), retrieve("docs"), k="x")',
    'fuse(retrieve("docs"), retrieve("docs"), depth="x")',
    'fuse(retrieve("docs"), retrieve("docs"), informative="yes")', 'fuse(retrieve("docs"), 5)',
    'fuse("docs", "docs")', 'retrieve("docs") >> expand("docs", via=5)',
    'retrieve("docs") >> expand("docs", parent="p", top="x")',
    'retrieve("docs") >> similarity("docs", weight="x")', 'retrieve("docs") >> similarity("docs", fusion=5)',
    'retrieve("docs") >> similarity(["docs"])', 'retrieve("docs") % "x"', 'retrieve("docs") % 0',
    'retrieve("docs") % -1', 'retrieve("docs") % 1.5', 'retrieve("docs") % True', 'retrieve("docs") >> 5',
    'retrieve("docs") | "x"', 'retrieve("docs") ^ None',
    "retrieve(\"" + "x" * 256 + "\")", "retrieve(\"" + "x" * 300 + "\")", "retrieve(\"" + "x" * 10_000 + "\")",
    "retrieve(\"a/" + "y" * 300 + "\")", "retrieve(\"" + "é" * 200 + "\")", 'retrieve("nope")',
    'retrieve("../docs")', 'retrieve("/etc")',
    " >> ".join(['retrieve("docs")'] + ['similarity("docs")'] * 100),
    " >> ".join(['retrieve("docs")'] + ['similarity("docs")'] * 499),
    " >> ".join(['retrieve("docs")'] + ['similarity("docs")'] * 4_999),
    "(" * 1000 + 'retrieve("docs")' + ")" * 1000,
    'retrieve("docs").search()', '__import__("os").system("true")', "lambda: 1", "",
]
GOOD_EXPRESSIONS = [
    'retrieve("docs", k=5) % 3', 'retrieve("docs", mode="bm25", k=5)',
    " >> ".join(['retrieve("docs")'] + ['similarity("docs")'] * 99),
    "fuse(" + ", ".join(['retrieve("docs")'] * 30) + ")", "fuse(" + ", ".join(['retrieve("docs")'] * 300) + ")",
    'retrieve("docs") >> similarity("docs", weight=1)',
]


def pipeline_cases(w: Path, idx: Path) -> list[tuple]:
    cases = []
    q = w / "pq.tsv"
    q.write_text("q1\tbread\nq2\ttext 3\n")

    def run_args(pipe: Path, queries: Path = q) -> tuple[list, Path]:
        out = w / f"p-{len(cases)}.run"
        return ["pipeline", "run", pipe, "--queries", queries, "--root", idx, "--out", out, "--no-cache", "-q"], out

    for n, expr in enumerate(BAD_EXPRESSIONS + GOOD_EXPRESSIONS):
        pipe = w / f"p{n}.toml"
        pipe.write_text(f"pipeline = '''\n{expr}\n'''\n", encoding="utf-8")
        args, out = run_args(pipe)
        name = expr if len(expr) < 60 else f"{expr[:40]}… ({len(expr):,} chars)"
        cases.append(("pipeline files", name, OK if expr in GOOD_EXPRESSIONS else ERROR, args, out))
    good = w / "good.toml"
    good.write_text("pipeline = 'retrieve(\"docs\", k=5)'\n")
    fifo = w / "fifo.toml"
    os.mkfifo(fifo)
    link = w / "link.toml"
    link.symlink_to(fifo)
    specials = {"a FIFO": fifo, "a link to a FIFO": link, "/dev/zero": Path("/dev/zero"),
                "/dev/null": Path("/dev/null"), "a folder": w, "a missing file": w / "none.toml",
                "a dangling link": w / "dangling.toml"}
    (w / "dangling.toml").symlink_to(w / "nowhere.toml")
    files = {"empty": b"", "BOM": b"\xef\xbb\xbfpipeline = 'retrieve(\"docs\")'\n",
             "not UTF-8": b"pipeline = 'retrieve(\"d\xff\")'\n", "pipeline is a number": b"pipeline = 5\n",
             "pipeline in a table": b"[x]\npipeline = 'retrieve(\"docs\")'\n",
             "NUL in the string": b"pipeline = 'retrieve(\"do\x00cs\")'\n",
             "a 20 MB file": b"# " + b"x" * (20 << 20) + b"\npipeline = 'retrieve(\"docs\")'\n"}
    for n, (name, data) in enumerate(files.items()):
        p = w / f"f-{n}.toml"
        p.write_bytes(data)
        specials[name] = p
    for name, path in specials.items():
        args, out = run_args(path)
        expect = OK if name in ("BOM", "a 20 MB file") else ERROR
        cases.append(("pipeline files", f"pipeline file: {name}", expect, args, out))
    qfifo = w / "q.jsonl"
    os.mkfifo(qfifo)
    qfifo_tsv = w / "qf.tsv"
    os.mkfifo(qfifo_tsv)
    queries = {"a FIFO (.jsonl)": qfifo, "a FIFO (.tsv)": qfifo_tsv, "/dev/zero": Path("/dev/zero"),
               "/dev/null": Path("/dev/null"), "a folder": w}
    lines = {"an array": "[1, 2]", "a string": '"text"', "a number": "5", "null": "null", "true": "true",
             "an object without id": '{"text": "x"}', "an id that is a list": '{"qid": [1], "text": "x"}',
             "an id that is an object": '{"qid": {"a": 1}, "text": "x"}', "examples a string": '{"qid": "a", '
             '"examples": "d1"}', "examples of floats": '{"qid": "a", "examples": [1.5]}',
             "examples with null": '{"qid": "a", "examples": [null]}', "examples nested": '{"qid": "a", '
             '"examples": [["d1"]]}', "not JSON": "{qid: a}",
             "NaN": '{"qid": "a", "text": NaN}', "an array after examples": "[1]",
             "examples an object": '{"qid": "a", "examples": {"d1": 1}}', "a repeated id": '{"qid": "z", '
             '"text": "again"}', "examples of booleans": '{"qid": "a", "examples": [true]}',
             "an id that is a list, with examples": '{"qid": ["a"], "examples": []}',
             "text an object, with examples": '{"qid": "a", "text": {"o": 1}, "examples": []}'}
    for n, (name, line) in enumerate(lines.items()):
        p = w / f"ql{n}.jsonl"
        first = '{"qid": "z", "text": "bread", "examples": ["d1"]}\n' if "after examples" in name else \
            '{"qid": "z", "text": "bread"}\n'
        p.write_text(first + line + "\n")
        queries[f"a JSONL line: {name}"] = p
    for name, data in {"duplicate ids": b"q1\ta\nq1\tb\n", "invalid UTF-8": b"q1\t\xff\xfe\n", "empty": b"",
                       "blank lines only": b"\n\n\n", "no tab": b"q1 bread\n"}.items():
        p = w / f"qt-{len(queries)}.tsv"
        p.write_bytes(data)
        queries[name] = p
    for name, path in queries.items():
        args, out = run_args(good, path)
        cases.append(("query files", f"queries: {name}", ERROR, args, out))
    bom = w / "bom.tsv"
    bom.write_bytes(b"\xef\xbb\xbfq1\tbread\n")
    args, out = run_args(good, bom)
    cases.append(("query files", "queries: a BOM", OK, args, out))
    number = w / "number.jsonl"
    number.write_text('{"qid": "a", "text": 5}\n')   # a query text that is a number is that text ("5")
    args, out = run_args(good, number)
    cases.append(("query files", "queries: a JSONL text that is a number", OK, args, out))
    listed = w / "listed.jsonl"
    listed.write_text('{"qid": "a", "text": ["bread", "text"], "examples": []}\n')  # a list of texts is joined
    args, out = run_args(good, listed)
    cases.append(("query files", "queries: a JSONL text that is a list, with examples", OK, args, out))
    return cases


# ---------------------------------------------------------------- experiment outputs

def experiment_cases(w: Path, idx: Path) -> list[tuple]:
    (w / "eq.tsv").write_text("q1\tbread 1\nq2\ttext 3\nq3\tabout bread\nq4\ttext 7 about\nq5\t2\n")
    (w / "eqrels.txt").write_text("q1 0 d1 1\nq2 0 d3 1\nq3 0 d2 1\nq4 0 d7 1\nq5 0 d2 1\nq5 0 d5 1\n")
    pipes = []
    for name, expr in (("dense", 'retrieve("docs", mode="dense", k=8) % 3'),
                       ("bm25", 'retrieve("docs", mode="bm25", k=8) % 3'),
                       ("chain", 'retrieve("docs", mode="bm25", k=8) >> similarity("docs", weight=0.7) % 3')):
        (w / f"{name}.toml").write_text(f"pipeline = '{expr}'\n")
        pipes.append(w / f"{name}.toml")
    base = ["experiment", *pipes, "--queries", w / "eq.tsv", "--qrels", w / "eqrels.txt", "--root", idx,
            "--no-cache"]
    (w / "afile").write_text("x")
    (w / "plotdir").mkdir()
    (w / "old.png").write_bytes(b"old")
    (w / "nulllink.png").symlink_to("/dev/null")
    runs = w / "runs"
    cases = [
        ("experiment outputs", "--out a new folder", OK, base + ["--out", runs]),
        ("experiment outputs", "--out the same folder again", OK, base + ["--out", runs]),
        ("experiment outputs", "--out a file", ERROR, base + ["--out", w / "afile"]),
        ("experiment outputs", "--out under a file", ERROR, base + ["--out", w / "afile" / "runs"]),
        ("experiment outputs", "--out /proc", ERROR, base + ["--out", "/proc/engine-runs"]),
        ("experiment outputs", "--out /dev/null", ERROR, base + ["--out", "/dev/null"]),
        ("experiment outputs", "--plot a folder", ERROR, base + ["--plot", w / "plotdir"]),
        ("experiment outputs", "--plot under a file", ERROR, base + ["--plot", w / "afile" / "p.png"]),
        ("experiment outputs", "--plot /proc", ERROR, base + ["--plot", "/proc/engine.png"]),
        ("experiment outputs", "--plot a link to /dev/null", ERROR, base + ["--plot", w / "nulllink.png"]),
        ("experiment outputs", "--plot .jpg", ERROR, base + ["--plot", w / "p.jpg"]),
        ("experiment outputs", "--plot .PNG", OK, base + ["--plot", w / "p.PNG"]),
        ("experiment outputs", "--plot over an old file", OK, base + ["--plot", w / "old.png"]),
        ("experiment outputs", "--plot unwritable with --out", ERROR,
         base + ["--out", w / "runs2", "--plot", "/proc/x.png"], w / "runs2"),
    ]
    return [c if len(c) == 5 else (*c, None) for c in cases]


def holm_check(w: Path, idx: Path, timeout: float) -> list[dict]:
    """--stages must leave the pipelines' p and p_holm as they were (it once widened the Holm family)."""
    pipes = [w / f"{n}.toml" for n in ("dense", "bm25", "chain")]
    base = ["experiment", *pipes, "--queries", w / "eq.tsv", "--qrels", w / "eqrels.txt", "--root", idx,
            "--no-cache", "--json", "--metrics", "ndcg@3,recall@3,mrr"]
    a, b = run(base, 3, timeout), run(base + ["--stages"], 3, timeout)
    try:
        ra = {p["name"]: p for p in json.loads(a["out"])["pipelines"]}
        rb = {p["name"]: p for p in json.loads(b["out"])["pipelines"]}
        same = all(ra[n]["p_holm"] == rb[n]["p_holm"] for n in ("bm25", "chain")) and "chain[1]" in rb
        outcome = "handled" if same else "silent"
    except (ValueError, KeyError):
        outcome = classify(OK, b)
    return [result("experiment outputs", "--stages leaves the pipelines' p_holm", OK, outcome,
                   a["seconds"] + b["seconds"], "")]


# ---------------------------------------------------------------- delete lists

def delete_cases(w: Path) -> list[tuple]:
    from engine.core.collection import Collection
    cases = []
    lists = {"ids.txt": "\tv4\t\n", "spaces.txt": "  v4  \n", "crlf.txt": "\tv4\t\r\n", "nonl.txt": "\tv4\t",
             "bom.txt": "\ufeff\tv4\t\n", "two.txt": "v1\n\tv4\t\n", "ids.tsv": "\tv4\t\n",
             "h.csv": "id\n\tv4\t\n", "q.csv": 'id\n"\tv4\t"\n', "j.jsonl": '{"id": "\\tv4\\t"}\n',
             "nbsp.txt": "\u00a0v4\u00a0\n", "vt.txt": "\x0bv4\x0c\n", "blank-first.txt": "\n\n\tv4\t\n",
             "header.txt": "id\n\tv4\t\n"}
    texts = w / "del.csv"
    texts.write_text("id,text\n" + "".join(f"v{i},text {i}\n" for i in range(1, 9)))
    for n, (name, content) in enumerate(lists.items()):
        root = w / f"del{n}"
        Collection.build("c", texts=texts, root=root)
        p = w / f"del{n}-{name}"
        p.write_text(content, encoding="utf-8")
        gone = {"v4", "v1"} if name == "two.txt" else {"v4"}

        def check(root=root, gone=gone) -> bool:
            col = Collection.open("c", root)
            live = {col.ids[r] for r in col.live_rows()}
            return not (gone & live) and len(live) == 8 - len(gone)
        cases.append(("delete lists", f"`{content!r}` in {name}", OK, ["delete", "c", "--ids", p, "--root", root],
                      None, check))
    one = w / "one.csv"
    one.write_text("\tv4\t\n")
    root = w / "del-one"
    Collection.build("c", texts=texts, root=root)
    cases.append(("delete lists", "headerless one-line CSV", ERROR, ["delete", "c", "--ids", one, "--root", root],
                  None, None))
    return cases


# ---------------------------------------------------------------- in this process: serve, service, exports

def serve_name_results(w: Path) -> list[dict]:
    from engine.commands.serve import served_pipelines  # what `engine serve` calls before the server starts
    from engine.errors import EngineError
    f, g = w / "sf.toml", w / "sg.toml"
    f.write_text("pipeline = 'retrieve(\"docs\") % 3'\n")
    g.write_text("pipeline = 'retrieve(\"docs\") % 5'\n")
    fifo = w / "serve-fifo.toml"
    os.mkfifo(fifo)
    cases = {"a and ' a'": ([f"a={f}", f" a={g}"], ERROR), "a and 'a '": ([f"a={f}", f"a ={g}"], ERROR),
             "a and tab a": ([f"a={f}", f"\ta={g}"], ERROR), "a and a": ([f"a={f}", f"a={g}"], ERROR),
             "=F": ([f"={f}"], ERROR), "a=": (["a="], ERROR), "no =": ([str(f)], ERROR),
             "a FIFO file": ([f"a={fifo}"], ERROR), "/dev/zero": (["a=/dev/zero"], ERROR),
             "a missing file": ([f"a={w / 'none.toml'}"], ERROR), "a and A": ([f"a={f}", f"A={g}"], OK),
             "a and b": ([f"a={f}", f" b ={g}"], OK), "a unicode name": ([f"ä={f}"], OK)}
    out = []
    for name, (specs, expect) in cases.items():
        t0 = time.perf_counter()
        box: dict = {}

        def go(specs=specs, box=box) -> None:
            try:
                box["value"] = served_pipelines(specs)
            except EngineError as exc:
                box["error"] = str(exc)
            except Exception as exc:  # noqa: BLE001
                box["traceback"] = repr(exc)
        t = threading.Thread(target=go, daemon=True)
        t.start()
        t.join(20)
        if t.is_alive():
            outcome = "blow-up"
        elif "traceback" in box:
            outcome = "traceback"
        elif "error" in box:
            outcome = "clear error" if expect == ERROR and "\n" not in box["error"] else "refused valid input"
        else:
            outcome = "handled" if expect == OK and len(box["value"]) == len(specs) else "silent"
        out.append(result("serve --pipeline", name, expect, outcome, time.perf_counter() - t0,
                          box.get("error", "")))
    return out


def service_results(w: Path) -> list[dict]:
    from fastapi.testclient import TestClient
    from PIL import Image

    from engine.core.collection import Collection
    from engine.serve.app import create_app
    from engine.serve.options import ServeOptions
    root = w / "served"
    (w / "imgs").mkdir()
    for n, colour in enumerate(("red", "green", "blue")):
        Image.new("RGB", (64, 48), colour).save(w / "imgs" / f"i{n}.png")
    Collection.build("pics", images=w / "imgs", root=root)
    (w / "st.csv").write_text("id,text\n" + "".join(f"d{i},text {i}\n" for i in range(6)))
    Collection.build("docs", texts=w / "st.csv", root=root)
    out = []
    with TestClient(create_app(ServeOptions(root=root)), raise_server_exceptions=False) as c:
        dim = c.get("/collections/docs").json()["dim"]
        for size, expect in (("0", ERROR), ("-1", ERROR), ("1", ERROR), ("15", ERROR), ("16", OK), ("256", OK),
                             ("1024", OK), ("1025", ERROR), ("9" * 30, ERROR), ("abc", ERROR), ("1.5", ERROR),
                             ("", ERROR), ("true", ERROR), (None, OK)):
            t0 = time.perf_counter()
            r = c.get("/thumb/pics/i0" + (f"?size={size}" if size is not None else ""))
            out.append(result("service", f"thumb size={size}", expect, answered(r, expect, "image/jpeg"),
                              time.perf_counter() - t0, r.text[:200] if r.status_code != 200 else ""))
        vectors = {"booleans": [True] * dim, "one boolean": [1.0] * (dim - 1) + [False], "strings": ["1"] * dim,
                   "a null": [1.0] * (dim - 1) + [None], "nested": [[1.0]] * dim, "empty": [],
                   "an object": {"a": 1}, "a string": "1,2,3", "too short": [1.0] * (dim - 1),
                   "too long": [1.0] * (dim + 1), "1e39": [1e39] + [0.0] * (dim - 1), "whole numbers": [1] * dim,
                   "floats": [0.5] * dim}
        for name, vec in vectors.items():
            expect = OK if name in ("whole numbers", "floats") else ERROR
            for path, body in (("/search", {"collection": "docs", "vector": vec, "k": 2}),
                               ("/search/batch", {"collection": "docs", "queries": [{"vector": vec}], "k": 2})):
                t0 = time.perf_counter()
                r = c.post(path, json=body)
                out.append(result("service", f"{path} vector: {name}", expect, answered(r, expect, None),
                                  time.perf_counter() - t0, r.text[:200] if r.status_code != 200 else ""))
        t0 = time.perf_counter()
        r = c.post("/search", content=b'{"collection": "docs", "k": 2, "vector": [NaN' + b", 1" * (dim - 1) + b"]}",
                   headers={"content-type": "application/json"})
        out.append(result("service", "/search vector: NaN", ERROR, answered(r, ERROR, None),
                          time.perf_counter() - t0, r.text[:200]))
    return out


def answered(r, expect: str, ctype: str | None) -> str:
    if r.status_code >= 500:
        return "traceback"
    if expect == OK:
        ok = r.status_code == 200 and (ctype is None or r.headers.get("content-type") == ctype)
        return "handled" if ok else "refused valid input"
    if r.status_code == 200:
        return "silent"
    try:
        detail = r.json()["detail"]
    except ValueError:
        return "other"
    return "clear error" if r.status_code in (400, 404, 413, 422) and "\n" not in detail else "other"


def lora_results(w: Path, timeout: float) -> list[dict]:
    """LoRA ids written `0001` come out of `engine lora submit` as written and score against qrels that
    spell them so (they once came out as `1` and scored 0.0). The real extractor runs: `python -m engine`
    in a child, not the fake encoder this process installed."""
    import csv
    import importlib.util
    import subprocess
    spec = importlib.util.spec_from_file_location("make_style_set", REPO / "benchmarks" / "make_style_set.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_style_set"] = module
    spec.loader.exec_module(module)
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def engine(*argv) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "engine", *map(str, argv)], capture_output=True, text=True,
                              env=env, timeout=timeout * 3)
    out = []
    for name, pad in (("ids written 0001", 4), ("ids written 01", 2), ("ids written 1", 0)):
        t0 = time.perf_counter()
        folder = w / f"lora-{pad}"
        module.make_style_set(folder, "skimage", 5, 4, size=64, test_fraction=0.5)
        for fname, column in (("models.csv", "id"), ("train.csv", "model_id")):
            with open(folder / fname, newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
            for row in rows:
                row[column] = row[column].zfill(pad)
            with open(folder / fname, "w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        qrels = [line.split() for line in (folder / "test-qrels.txt").read_text().splitlines()]
        (folder / "test-qrels.txt").write_text("".join(f"{q} 0 {d.zfill(pad)} {r}\n" for q, _, d, r in qrels))
        steps = [("lora", "build", "--train", folder / "train.csv", "--images", folder / "images", "--models",
                  folder / "models.csv", "--name", "x", "--root", folder / "idx", "--quiet"),
                 ("lora", "submit", "--queries", folder / "test_image_ids_from_tree.txt", "--images",
                  folder / "images", "--out", folder / "x.run", "--name", "x", "--root", folder / "idx", "--quiet"),
                 ("eval", folder / "x.run", folder / "test-qrels.txt", "-m", "mrr", "--json")]
        try:
            done = [engine(*step) for step in steps]
            bad = next((d for d in done if d.returncode != 0), None)
            if bad is not None:
                outcome = "traceback" if "Traceback" in bad.stderr else "refused valid input"
                message = bad.stderr.strip().splitlines()[-1] if bad.stderr.strip() else ""
            else:
                ids = {line.split()[2] for line in (folder / "x.run").read_text().splitlines()}
                mrr = json.loads(done[-1].stdout)["mrr"]
                outcome = "handled" if all(len(i) == max(pad, 1) for i in ids) and mrr > 0.3 else "silent"
                message = f"MRR {mrr:.3f}, ids {sorted(ids)[:2]}"
        except subprocess.TimeoutExpired:
            outcome, message = "blow-up", "timed out"
        out.append(result("LoRA ids", name, OK, outcome, time.perf_counter() - t0, message))
    return out


def onnx_results(w: Path) -> list[dict]:
    from engine.core.encoders import onnx_text
    out = []
    for mask in (0o022, 0o002, 0o077):
        t0 = time.perf_counter()
        old_mask, old_cache = os.umask(mask), os.environ.get("ENGINE_CACHE")
        os.environ["ENGINE_CACHE"] = str(w / f"cache-{mask:o}")
        try:
            onnx_text.text_encoder("all-MiniLM-L6-v2")
            folder = onnx_text.export_dir("all-MiniLM-L6-v2")
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir() if p.is_file()}
            want = 0o666 & ~mask
            outcome = "handled" if modes and all(m == want for m in modes.values()) else "silent"
            message = ", ".join(f"{k} {v:o}" for k, v in sorted(modes.items()))
        except Exception as exc:  # noqa: BLE001
            outcome, message = "traceback", repr(exc)[:200]
        finally:
            os.umask(old_mask)
            if old_cache is None:
                os.environ.pop("ENGINE_CACHE", None)
            else:
                os.environ["ENGINE_CACHE"] = old_cache
        out.append(result("ONNX export modes", f"umask {mask:03o}", OK, outcome, time.perf_counter() - t0, message))
    return out


# ---------------------------------------------------------------- the run

def result(group: str, name: str, expect: str, outcome: str, seconds: float, message: str) -> dict:
    return {"group": group, "input": name, "expected": expect, "outcome": outcome, "seconds": round(seconds, 2),
            "message": " ".join(str(message).split())[:300]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "hostile_surfaces.json")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--memory", type=float, default=3.0, help="address-space cap per command, GiB")
    ap.add_argument("--skip", action="append", default=[], help="groups to leave out (repeatable)")
    args = ap.parse_args()
    sys.path[:0] = [str(REPO / "tests")]
    from conftest import install_fake_encoder

    from engine.core.collection import Collection
    install_fake_encoder()
    work = Path(tempfile.mkdtemp(prefix="hostile-surfaces-"))
    results: list[dict] = []
    try:
        idx = work / "idx"
        (work / "docs.csv").write_text("id,text\n" + "".join(f"d{i},text {i} about bread\n" for i in range(1, 9)))
        Collection.build("docs", texts=work / "docs.csv", root=idx, bm25=True)
        cli = [c for c in transport_cases(work) + pipeline_cases(work, idx) + experiment_cases(work, idx)
               + delete_cases(work) if c[0] not in args.skip]
        for case in cli:
            group, name, expect, argv, out_path = case[:5]
            check = case[5] if len(case) > 5 else None
            res = run(argv, args.memory, args.timeout)
            outcome = classify(expect, res)
            if outcome == "clear error" and out_path is not None and Path(out_path).exists():
                outcome = "other"   # refused, but it left its output behind
            if outcome == "handled" and check is not None and not check():
                outcome = "silent"
            results.append(result(group, name, expect, outcome, res["seconds"],
                                  (res["err"].strip().splitlines() or [""])[-1]))
            print(f"{outcome:12s} {group:20s} {name[:50]:50s} {res['seconds']:6.2f}s  {results[-1]['message'][:80]}",
                  flush=True)
        extra = [("reranker transport", trickle_results),
                 ("experiment outputs", lambda: holm_check(work, idx, args.timeout)),
                 ("serve --pipeline", lambda: serve_name_results(work)), ("service", lambda: service_results(work)),
                 ("LoRA ids", lambda: lora_results(work, args.timeout)),
                 ("ONNX export modes", lambda: onnx_results(work))]
        for group, fn in extra:
            if group in args.skip:
                continue
            for r in fn():
                results.append(r)
                print(f"{r['outcome']:12s} {r['group']:20s} {r['input'][:50]:50s} {r['seconds']:6.2f}s  "
                      f"{r['message'][:80]}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    groups: dict[str, dict[str, int]] = {}
    for r in results:
        groups.setdefault(r["group"], {c: 0 for c in COLUMNS})[r["outcome"]] += 1
    total = {c: sum(g[c] for g in groups.values()) for c in COLUMNS}
    print("\n| surface | tried | held | not held | " + " | ".join(COLUMNS) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(COLUMNS))
    for name, g in {**groups, "**all**": total}.items():
        held = sum(g[c] for c in HELD)
        print(f"| {name} | {sum(g.values())} | {held} | {sum(g.values()) - held} | "
              + " | ".join(str(g[c]) for c in COLUMNS) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"columns": COLUMNS, "groups": groups, "total": total, "inputs": results}, indent=1)
    args.out.write_text(text.replace(str(work), "WORK") + "\n")   # the temporary folder, not this machine's path
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
