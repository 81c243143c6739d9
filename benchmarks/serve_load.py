"""Load test of `engine serve`, loopback only and bounded in requests and time.

A 100k-item collection of clustered random 384-d vectors (`bench_core.synthetic`) that carries the MiniLM
encoder spec, so text queries go through the real model and an exact FAISS search over 100k rows (the
vectors are not MiniLM's, which changes no timing). The server runs as its own process (`engine serve`);
1, 8 and 32 concurrent clients (threads, one keep-alive connection each) send text queries, and the table
gives QPS, p50/p95/p99, errors and the server's RSS before and after. Side by side in the same run: the
in-process API's encode+search p50 for the same queries (the HTTP overhead ratio) and the CLI's cold single
query (`engine search NAME "text"`: a new process that imports, loads the model and the index).

    python benchmarks/serve_load.py [--n 100000] [--requests 1:1000,8:3000,32:6000] [--budget-s 900]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SPEC = "sbert:all-MiniLM-L6-v2"
SUBJECTS = ("a dog", "two cats", "a red car", "an old man", "a child", "a bicycle", "a sailing boat", "a horse",
            "a plate of pasta", "a city street", "a mountain lake", "a kitchen", "a football match", "a train")
SCENES = ("in the rain", "at night", "on a beach", "in a park", "next to a window", "under a bridge",
          "in the snow", "on a busy road", "in a museum", "at sunset")


def queries(n: int) -> list[str]:
    rng = np.random.default_rng(1)
    return [f"{SUBJECTS[rng.integers(len(SUBJECTS))]} {SCENES[rng.integers(len(SCENES))]}"
            + (f" with {SUBJECTS[rng.integers(len(SUBJECTS))]}" if i % 3 == 0 else "") for i in range(n)]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def started(cmd: list[str], env: dict, port: int) -> subprocess.Popen:
    """A server process answering GET /health on 127.0.0.1:`port` (SystemExit with its stderr if it does not)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = time.monotonic()
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() - t > 180:
            proc.kill()
            raise SystemExit(f"{' '.join(cmd[:4])} did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)


def post(conn: http.client.HTTPConnection, body: dict) -> tuple[int, bytes]:
    conn.request("POST", "/search", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def load(port: int, name: str, texts: list[str], clients: int, total: int, k: int, deadline: float) -> dict:
    """`total` requests spread over `clients` threads; latencies in ms, errors counted (non-200 or exception)."""
    lock = threading.Lock()
    issued = [0]
    lat: list[float] = []
    errors = [0]

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.monotonic() < deadline:
            with lock:
                if issued[0] >= total:
                    break
                i = issued[0]
                issued[0] += 1
            t = time.perf_counter()
            try:
                status, _ = post(conn, {"collection": name, "text": texts[i % len(texts)], "k": k})
            except (OSError, http.client.HTTPException):
                status = 0
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            ms = (time.perf_counter() - t) * 1e3
            with lock:
                lat.append(ms)
                if status != 200:
                    errors[0] += 1
        conn.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    a = np.asarray(lat)
    return {"clients": clients, "requests": len(lat), "planned": total, "errors": errors[0], "wall_s": wall,
            "qps": len(lat) / wall, "p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
            "p99_ms": float(np.percentile(a, 99))}


def in_process_p50(root: Path, name: str, texts: list[str], k: int) -> float:
    from engine.core.collection import Collection
    col = Collection.open(name, root)
    col.search(text=texts[0], k=k)
    times = []
    for t in texts:
        s = time.perf_counter()
        col.search(text=t, k=k)
        times.append((time.perf_counter() - s) * 1e3)
    return float(np.percentile(times, 50))


def cli_cold_s(root: Path, name: str, text: str, k: int, runs: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    out = []
    for _ in range(runs):
        s = time.perf_counter()
        subprocess.run([sys.executable, "-m", "engine.cli", "search", name, text, "--root", str(root), "-k", str(k),
                        "-q"], check=True, env=env, capture_output=True, timeout=300)
        out.append(time.perf_counter() - s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="items in the collection")
    ap.add_argument("--requests", default="1:1000,8:3000,32:6000", help="clients:requests, comma-separated")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=900, help="wall-clock bound of the whole load phase")
    ap.add_argument("--cli-runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=200, help="requests before the RSS 'before' reading")
    ap.add_argument("--in-process", type=int, default=300, help="queries timed through Collection.search")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "serve_load.json")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from bench_core import synthetic

    from engine.core.collection import Collection
    from engine.display import format_table
    levels = [tuple(int(x) for x in part.split(":")) for part in args.requests.split(",")]
    texts = queries(500)
    result: dict = {"n": args.n, "dim": 384, "encoder": SPEC, "index": "Flat", "k": args.k, "cpus": os.cpu_count(),
                    "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        root, name = Path(tmp), "load"
        xb, _ = synthetic(args.n, 1, 384)
        Collection.from_vectors(name, [f"doc{i}" for i in range(args.n)], xb, SPEC, "text", root=root,
                                meta=[{"cluster_doc": i % 1000} for i in range(args.n)])
        del xb
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
        start = time.monotonic()
        server = started([sys.executable, "-m", "engine.cli", "serve", "--root", str(root), "--port", str(port)],
                         env, port)
        try:
            result["server_start_s"] = time.monotonic() - start
            warm = load(port, name, texts, 4, args.warmup, args.k, time.monotonic() + 120)
            result["rss_before_mib"] = rss_mib(server.pid)
            deadline = time.monotonic() + args.budget_s
            result["levels"] = [load(port, name, texts, c, total, args.k, deadline) for c, total in levels]
            result["rss_after_mib"] = rss_mib(server.pid)
            result["warmup_errors"] = warm["errors"]
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics")
            metrics = conn.getresponse().read().decode()
            values = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
                      if line.startswith("engine_text_batch_size_")}
            result["mean_text_batch"] = values["engine_text_batch_size_sum"] / values["engine_text_batch_size_count"]
        finally:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
        result["in_process_p50_ms"] = in_process_p50(root, name, texts[:args.in_process], args.k)
        result["cli_cold_s"] = cli_cold_s(root, name, texts[0], args.k, args.cli_runs)
    result["load_average_after"] = os.getloadavg()
    single = result["levels"][0]
    result["http_over_in_process_p50"] = single["p50_ms"] / result["in_process_p50_ms"]
    result["cli_cold_over_http_p50"] = statistics.median(result["cli_cold_s"]) * 1e3 / single["p50_ms"]
    rows = [[str(r["clients"]), f"{r['requests']}/{r['planned']}", f"{r['qps']:.1f}", f"{r['p50_ms']:.1f}",
             f"{r['p95_ms']:.1f}", f"{r['p99_ms']:.1f}", str(r["errors"])] for r in result["levels"]]
    print(f"engine serve, {args.n:,} × 384 Flat, {SPEC}, k={args.k}, {os.cpu_count()} CPUs, loopback")
    print(format_table(["clients", "requests", "QPS", "p50 ms", "p95 ms", "p99 ms", "errors"], rows))
    total = sum(r["requests"] for r in result["levels"])
    print(f"server RSS {result['rss_before_mib']:.0f} → {result['rss_after_mib']:.0f} MiB over {total} requests; "
          f"mean text batch {result['mean_text_batch']:.2f}")
    print(format_table(["single query, p50", "ms", "× in-process"], [
        ["in-process encode+search (Collection.search)", f"{result['in_process_p50_ms']:.1f}", "1.00"],
        ["HTTP, 1 client", f"{single['p50_ms']:.1f}", f"{result['http_over_in_process_p50']:.2f}"],
        ["CLI cold `engine search` (median of runs)", f"{statistics.median(result['cli_cold_s']) * 1e3:.0f}",
         f"{statistics.median(result['cli_cold_s']) * 1e3 / result['in_process_p50_ms']:.0f}"]]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
