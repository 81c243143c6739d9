"""The engine side by side with its floors and peers on every path a user waits for, in one run.

Same texts (synthetic documents of 8–80 words), same MiniLM model, exact search. Every comparison is paired:
the cases of a section alternate run by run, the table gives medians, and each run records the load average
it saw (other processes share the CPUs; ratios of alternated runs are what to read).

    cold text query    `engine search NAME "text"` vs a bare tokenizers + onnxruntime + faiss script
                       (peers_floor.py bare) [vs txtai and LanceDB cold, with --peers-python]
    cold image query   `engine search NAME --image P` vs a text query on the same conse collection (20 photos)
    service            `engine serve` vs a minimal FastAPI + faiss + sentence-transformers app (peers_floor.py app),
                       1 / 8 / 32 loopback clients, rounds alternated
    text build         Collection.build over the texts vs one SentenceTransformer.encode over the same texts,
                       in one process, alternated

    python benchmarks/peers.py [--n 20000] [--build-n 20000] [--repeat 5] [--only cold,image,serve,build]
                               [--peers-python PATH/TO/PEERS-VENV/bin/python]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cold_query import timed  # noqa: E402  (benchmarks share their helpers)
from serve_load import free_port, load, queries, rss_mib, started  # noqa: E402

ENGINE = [sys.executable, "-m", "engine"]  # what the `engine` console script runs
MODEL = "sbert:all-MiniLM-L6-v2"
WORDS = ("history", "river", "engine", "market", "garden", "music", "winter", "school", "science", "bridge",
         "station", "painting", "harbor", "forest", "village", "museum", "kitchen", "football", "mountain", "train")


def documents(n: int, seed: int = 0) -> list[str]:
    """n documents of 8–80 words: lengths vary, so batching by length matters as it does on real text."""
    rng = np.random.default_rng(seed)
    base = queries(200)
    return [f"{base[i % len(base)]}: " + " ".join(WORDS[j] for j in rng.integers(0, len(WORDS),
                                                                                   int(rng.integers(8, 80))))
            for i in range(n)]


def write_csv(path: Path, texts: list[str]) -> None:
    path.write_text("id,text\n" + "".join(f"d{i},{t}\n" for i, t in enumerate(texts)), encoding="utf-8")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used: what load does not inflate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def compiled_engine() -> None:
    """Byte-compile the engine's modules, as installing a wheel does (pip compiles at install time) and as a
    user's first run does by itself: a process started with PYTHONDONTWRITEBYTECODE=1 (set on some CI and
    sandbox machines) never writes them, and every cold start would compile ~50 modules from source (≈ 60 ms
    on 2 cores) while the libraries of the bare script come compiled from pip."""
    import compileall
    compileall.compile_dir(str(HERE.parent / "engine"), quiet=1)


def paired_ratio(result: dict, label: str, reference: str) -> float:
    """Median over repeats of run-by-run wall ratios (each pair ran back to back, under the same load)."""
    return statistics.median(a[0] / b[0] for a, b in zip(result[label]["runs"], result[reference]["runs"]))


def alternate(cases: dict[str, tuple[list[str], dict]], repeat: int) -> dict[str, dict]:
    """Run each case `repeat` times, the order reversed every other round; medians of wall, CPU, peak RSS,
    with each run's load."""
    runs: dict[str, list] = {k: [] for k in cases}
    for n in range(repeat):
        for label, (cmd, env) in (list(cases.items()) if n % 2 == 0 else list(cases.items())[::-1]):
            la = loadavg()
            runs[label].append([*timed(cmd, env), la])
            print(f"  {label}: {runs[label][-1][0]:.2f} s, {runs[label][-1][2]:.0f} MiB (load {la})", flush=True)
    return {label: {"wall_s": statistics.median(r[0] for r in vals), "cpu_s": statistics.median(r[1] for r in vals),
                    "peak_mib": statistics.median(r[2] for r in vals), "runs": vals} for label, vals in runs.items()}


def searched_collection(root: Path, docs: list[str], csv: Path, encode: bool) -> None:
    """The collection the cold queries and the services search: the documents with MiniLM's spec, over
    clustered random 384-d vectors unless `encode` (the query path's work is the same: encode one text, scan
    n × 384 exactly, read the hit rows; encoding 20,000 texts on 2 shared cores takes most of an hour)."""
    from bench_core import synthetic

    from engine.core.collection import Collection
    from engine.core.encoders.registry import prepare_queries
    if encode:
        Collection.build("docs", texts=csv, root=root, model=MODEL)
    else:
        Collection.from_vectors("docs", [f"d{i}" for i in range(len(docs))], synthetic(len(docs), 1, 384)[0],
                                MODEL, "text", root=root, meta=[{"text": t} for t in docs])
    prepare_queries(MODEL)


def cold_text(root: Path, env: dict, repeat: int, peers_python: str | None, tmp: Path) -> dict:
    from engine.core.collection import Collection
    from engine.core.encoders.onnx_text import export_dir
    col = Collection.open("docs", root)
    ids = tmp / "ids.txt"
    ids.write_text("\n".join(col.ids), encoding="utf-8")
    text = "a dog on a beach at sunset"
    cases = {"engine search": ([*ENGINE, "search", "docs", text, "--root", str(root), "-q", "--json", "-k", "10"], env),
             "bare onnxruntime + faiss": ([sys.executable, str(HERE / "peers_floor.py"), "bare",
                                          str(export_dir("all-MiniLM-L6-v2")), str(col.file("index")), str(ids), "10",
                                          text], env)}
    if peers_python:
        for peer in ("txtai", "lancedb"):
            if (tmp / peer).exists():
                cases[f"{peer} (cold)"] = ([peers_python, str(HERE / "peers_others.py"), peer, "query", str(tmp),
                                            text], env)
    for cmd, case_env in cases.values():  # once each, unmeasured: engine's first line caches its argument shape
        subprocess.run(cmd, env=case_env, check=True, capture_output=True)
    return alternate(cases, repeat)


def cold_image(env: dict, repeat: int, tmp: Path) -> dict:
    from PIL import Image, ImageOps

    from engine.core.demo import demo_photos
    folder = tmp / "photos"
    folder.mkdir()
    photos = demo_photos()
    for i in range(20):  # the bundled photos and their mirror images: 20 files
        img = Image.open(photos[i % len(photos)]).convert("RGB")
        (ImageOps.mirror(img) if i >= len(photos) else img).save(folder / f"p{i:02d}.jpg", quality=92)
    root = tmp / "img-indexes"
    subprocess.run([*ENGINE, "build", "photos", "--images", str(folder), "--root", str(root), "-q"], env=env,
                   check=True)
    base = [*ENGINE, "search", "photos", "--root", str(root), "-q", "--json", "-k", "5"]
    subprocess.run([*base, "--image", str(folder / "p00.jpg")], env=env, check=True, capture_output=True)
    return alternate({"engine search --image (conse)": ([*base, "--image", str(folder / "p03.jpg")], env),
                      "engine search text (same collection)": ([*base[:5], "a dog", *base[5:]], env)}, repeat)


def service(root: Path, env: dict, levels: list[tuple[int, int]], rounds: int, budget_s: float, tmp: Path) -> dict:
    from engine.core.collection import Collection
    from engine.core.encoders.sbert import resolve_model_path
    col = Collection.open("docs", root)
    np.save(tmp / "emb.npy", np.asarray(col.embeddings))
    (tmp / "ids.txt").write_text("\n".join(col.ids), encoding="utf-8")
    texts = queries(500)
    ports = {"engine serve": free_port(), "floor app": free_port()}
    servers = {"engine serve": started([*ENGINE, "serve", "--root", str(root), "--port", str(ports["engine serve"])],
                                     env, ports["engine serve"]),
               "floor app": started([sys.executable, str(HERE / "peers_floor.py"), "app", str(tmp / "emb.npy"),
                                   str(tmp / "ids.txt"), resolve_model_path("all-MiniLM-L6-v2"),
                                   str(ports["floor app"])], env, ports["floor app"])}
    out: dict = {label: {str(c): [] for c, _ in levels} for label in servers}
    deadline = time.monotonic() + budget_s
    try:
        for label, port in ports.items():  # warm-up
            load(port, "docs", texts, 4, 100, 10, time.monotonic() + 60)
        for _ in range(rounds):
            for clients, total in levels:
                for label, port in ports.items():
                    la, cpu = loadavg(), cpu_s(servers[label].pid)
                    r = load(port, "docs", texts, clients, total, 10, deadline)
                    r["load"] = la
                    r["cpu_ms_per_request"] = (cpu_s(servers[label].pid) - cpu) * 1e3 / max(1, r["requests"])
                    out[label][str(clients)].append(r)
                    print(f"  {label}, {clients} clients: {r['qps']:.1f} QPS, p50 {r['p50_ms']:.1f} ms, "
                          f"{r['cpu_ms_per_request']:.1f} CPU ms per request, {r['errors']} errors (load {la})",
                          flush=True)
        for label, proc in servers.items():
            out[label]["rss_mib"] = rss_mib(proc.pid)
    finally:
        for proc in servers.values():
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    return out


def build(n: int, repeat: int, tmp: Path) -> dict:
    """texts/s of Collection.build (whole build: encode, index, items, commit) vs SentenceTransformer.encode."""
    from engine.core.collection import Collection
    from engine.core.encoders.sbert import load_sentence_model
    from engine.progress import set_quiet
    set_quiet(True)
    texts = documents(n, seed=1)
    csv = tmp / "build.csv"
    write_csv(csv, texts)
    model = load_sentence_model("all-MiniLM-L6-v2", "cpu")
    model.encode(texts[:64])
    def engine_build() -> None:
        Collection.build("b", texts=csv, root=tmp / "build-indexes", model=MODEL, force=True)
        shutil.rmtree(tmp / "build-indexes")

    def raw_encode() -> None:
        model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)

    cases = {"engine build --texts": engine_build, "SentenceTransformer.encode": raw_encode}
    runs: dict[str, list] = {k: [] for k in cases}
    for rep in range(repeat):  # the order flips every other pair: neither side always runs on a warmer machine
        for label, work in (list(cases.items()) if rep % 2 == 0 else list(cases.items())[::-1]):
            la = loadavg()
            t, c = time.perf_counter(), time.process_time()
            work()
            runs[label].append([n / (time.perf_counter() - t), la, n / (time.process_time() - c)])
        print("  " + ", ".join(f"{k}: {v[-1][0]:.1f} texts/s ({v[-1][2]:.1f} per CPU second, load {v[-1][1]})"
                               for k, v in runs.items()), flush=True)
    return {k: {"texts_per_s": statistics.median(r[0] for r in v),
                "texts_per_cpu_s": statistics.median(r[2] for r in v), "runs": v} for k, v in runs.items()}



def report(result: dict) -> list[list[str]]:
    rows = []
    if "cold" in result:
        c = result["cold"]
        e, b = c["engine search"], c["bare onnxruntime + faiss"]
        peers = "; ".join(f"{k} {v['wall_s']:.2f} s" for k, v in c.items() if "(cold)" in k)
        rows.append(["cold `engine search`, text", f"{e['wall_s']:.2f} s, {e['peak_mib']:.0f} MiB",
                     f"bare onnxruntime + faiss {b['wall_s']:.2f} s, {b['peak_mib']:.0f} MiB" + (f"; {peers}" if peers else ""),
                     f"{e['wall_s'] / b['wall_s']:.2f} (paired {paired_ratio(c, 'engine search', 'bare onnxruntime + faiss'):.2f}; goal ≤ 1.1)"])
    if "image" in result:
        i, t = result["image"]["engine search --image (conse)"], result["image"]["engine search text (same collection)"]
        rows.append(["cold `engine search --image` (conse, 20 photos)", f"{i['wall_s']:.2f} s, {i['peak_mib']:.0f} MiB",
                     f"the same collection's text query {t['wall_s']:.2f} s, {t['peak_mib']:.0f} MiB",
                     f"{i['wall_s'] / t['wall_s']:.2f} (goal ≤ 1.5, ≤ 300 MiB)"])
    if "serve" in result:
        s = result["serve"]
        for clients in [k for k in s["engine serve"] if k != "rss_mib"]:
            e = s["engine serve"][clients]
            f = s["floor app"][clients]
            med = lambda runs, key: statistics.median(r[key] for r in runs)  # noqa: E731
            errors = sum(r["errors"] for r in e + f)
            if errors:
                rows.append([f"service, {clients} clients: ERRORS", str(sum(r["errors"] for r in e)),
                             str(sum(r["errors"] for r in f)), "results invalid"])
            if clients == "1":
                rows.append(["service, 1 client, p50", f"{med(e, 'p50_ms'):.1f} ms, {med(e, 'qps'):.0f} QPS",
                             f"floor app {med(f, 'p50_ms'):.1f} ms, {med(f, 'qps'):.0f} QPS",
                             f"{med(e, 'p50_ms') / med(f, 'p50_ms'):.2f} (goal ≤ 1.1)"])
            else:
                rows.append([f"service, {clients} clients, QPS", f"{med(e, 'qps'):.0f} (p50 {med(e, 'p50_ms'):.0f} ms)",
                             f"floor app {med(f, 'qps'):.0f} (p50 {med(f, 'p50_ms'):.0f} ms)",
                             f"{med(e, 'qps') / med(f, 'qps'):.2f} (goal ≥ 2)"])
            if all("cpu_ms_per_request" in r for r in e + f):
                rows.append([f"service, {clients} client{'s' * (clients != '1')}, server CPU ms per request",
                             f"{med(e, 'cpu_ms_per_request'):.1f}", f"floor app {med(f, 'cpu_ms_per_request'):.1f}",
                             f"{med(f, 'cpu_ms_per_request') / med(e, 'cpu_ms_per_request'):.2f} (floor / engine)"])
    if "engine_docs_build" in result:
        rows.append([f"engine build, {result['n']:,} docs, texts/s (model load included)",
                     f"{result['engine_docs_build']['texts_per_s']:.1f}", "—", "—"])
    for peer in result.get("peers_build", []):
        rows.append([f"{peer['peer']} build, {result['n']:,} docs, texts/s (model load included)", "—",
                     f"{peer['texts_per_s']:.1f}" if "texts_per_s" in peer else peer.get("error", "?"), "—"])
    if "build" in result:
        b, r = result["build"]["engine build --texts"], result["build"]["SentenceTransformer.encode"]
        rows.append([f"text build, {result['build_n']:,} texts, texts/s", f"{b['texts_per_s']:.1f}",
                     f"raw encode {r['texts_per_s']:.1f}", f"{b['texts_per_s'] / r['texts_per_s']:.2f} (paired "
                     f"{paired_ratio(result['build'], 'engine build --texts', 'SentenceTransformer.encode'):.2f}; goal ≥ 0.95)"])
        rows.append([f"text build, {result['build_n']:,} texts, texts per CPU second", f"{b['texts_per_cpu_s']:.1f}",
                     f"raw encode {r['texts_per_cpu_s']:.1f}", f"{b['texts_per_cpu_s'] / r['texts_per_cpu_s']:.2f}"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000, help="documents in the searched collection")
    ap.add_argument("--build-n", type=int, default=20_000, help="texts in the build comparison")
    ap.add_argument("--repeat", type=int, default=5, help="alternated runs of each cold query and build")
    ap.add_argument("--build-repeat", type=int, default=3, help="alternated runs of the build comparison")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of each service load level")
    ap.add_argument("--requests", default="1:200,8:600,32:1200", help="clients:requests per round")
    ap.add_argument("--budget-s", type=float, default=600, help="wall-clock bound of the service phase")
    ap.add_argument("--only", default="cold,image,serve,build")
    ap.add_argument("--encode-docs", action="store_true", help="encode the searched documents with MiniLM "
                    "(default: random vectors under MiniLM's spec, the same work per query)")
    ap.add_argument("--peers-python", help="a Python with txtai and lancedb (a separate venv) for their cold query")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "peers.json")
    args = ap.parse_args()
    only = set(args.only.split(","))
    counts = (args.n, args.build_n, args.repeat, args.build_repeat, args.rounds)
    if not only <= {"cold", "image", "serve", "build"} or min(counts) < 1:
        raise SystemExit("--only takes cold,image,serve,build; --n, --build-n, --repeat, --build-repeat, --rounds must be ≥ 1")
    from engine.display import format_table
    result: dict = {"n": args.n, "build_n": args.build_n, "cores": os.cpu_count(), "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "PYTHONPATH": str(HERE.parent), "ENGINE_CACHE": os.environ.get(
            "ENGINE_CACHE", str(tmp / "cache"))}
        os.environ["ENGINE_CACHE"] = env["ENGINE_CACHE"]
        compiled_engine()
        root = tmp / "indexes"
        if only & {"cold", "serve"}:
            docs = documents(args.n)
            write_csv(tmp / "docs.csv", docs)
            t = time.perf_counter()
            searched_collection(root, docs, tmp / "docs.csv", args.encode_docs)
            if args.encode_docs:  # in this process: the model load, the build and the query-side export
                result["engine_docs_build"] = {"texts_per_s": args.n / (time.perf_counter() - t), "load": loadavg()}
            if args.peers_python:
                from engine.core.encoders.sbert import resolve_model_path
                env["MINILM_PATH"] = resolve_model_path("all-MiniLM-L6-v2")
                out = subprocess.run([args.peers_python, str(HERE / "peers_others.py"), "all", "build", str(tmp),
                                      str(tmp / "docs.csv")], env=env, check=True, capture_output=True, text=True)
                result["peers_build"] = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
                print(f"peers built: {result['peers_build']}", flush=True)
        if "cold" in only:
            print("cold text query", flush=True)
            result["cold"] = cold_text(root, env, args.repeat, args.peers_python, tmp)
        if "image" in only:
            print("cold image query", flush=True)
            result["image"] = cold_image(env, args.repeat, tmp)
        if "serve" in only:
            print("service", flush=True)
            levels = [tuple(int(x) for x in part.split(":")) for part in args.requests.split(",")]
            result["serve"] = service(root, env, levels, args.rounds, args.budget_s, tmp)
        if "build" in only:
            print("text build", flush=True)
            result["build"] = build(args.build_n, args.build_repeat, tmp)
    result["load_after"] = os.getloadavg()
    print(f"\nengine vs floors and peers ({os.cpu_count()} cores, load {result['load_before'][0]:.1f} → "
          f"{result['load_after'][0]:.1f}; each run's load in the JSON)\n")
    print(format_table(["what a user waits for", "engine", "reference in the same run", "ratio"], report(result),
                       markdown=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
