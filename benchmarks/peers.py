"""The engine side by side with its floors and peers on every path a user waits for, in one run.

Same texts (synthetic documents of 8–80 words), same MiniLM model, exact search. Every comparison is paired:
the cases of a section alternate run by run, the table gives medians, and each run records the load average
it saw (other processes share the CPUs; ratios of alternated runs are what to read).

    cold text query    `engine search NAME "text"` vs a bare tokenizers + onnxruntime + faiss script
                       (peers_floor.py bare) [vs txtai and LanceDB cold, with --peers-python]
    cold image query   `engine search NAME --image P` of a conse and of an `adapted:DIR` collection (20 photos)
                       vs a text query of each
    service            `engine serve` vs a minimal FastAPI + faiss + sentence-transformers app (peers_floor.py app),
                       1 / 8 / 32 loopback clients, rounds alternated
    text build         the CPU build path (ONNX, benchmarks/onnx_build.py) vs SentenceTransformer.encode vs a raw
                       onnxruntime loop over the same export, each in a fresh process, alternated
    vectors            the engine vs LanceDB over the same --vectors-n × 384 vectors, metadata and texts
                       (peers_vectors.py; a fresh process per side and run, sides alternated): p50 and CPU ms
                       per query of a 1 % and a 50 % metadata filter, dense, BM25 and hybrid (RRF) queries, the
                       first filtered query; then deleting every 10th item of a fresh copy and the dense queries
                       right after. Every filtered and dense top-10 checked against brute force; BM25 and hybrid
                       (each side's own scoring) compared with each other. Needs `pip install lancedb`.
    costs              the store's own costs beside LanceDB's and a numpy floor over the same --vectors-n × 384
                       vectors (peers_vectors.py costs; a fresh process per side and run, sides alternated): build,
                       delete every 10th id, compact (LanceDB: `compact_files` forced, old versions removed);
                       wall and CPU of each step, bytes on disk after it, the process's CPU and peak memory.
                       Needs `pip install lancedb pylance` (LanceDB's compaction is pylance's).

    python benchmarks/peers.py [--n 20000] [--build-n 20000] [--repeat 5] [--only cold,image,serve,build,vectors,costs,features]
                               [--peers-python PATH/TO/PEERS-VENV/bin/python] [--vectors-n 200000]
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
import warnings
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


def paired_ratio(result: dict, label: str, reference: str, field: int = 0) -> float:
    """Median over repeats of run-by-run ratios of wall (`field` 0) or CPU (1) seconds (each pair ran back to
    back, under the same load)."""
    return statistics.median(a[field] / b[field] for a, b in zip(result[label]["runs"], result[reference]["runs"]))


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
    """Cold image queries of a conse collection and of an `adapted:DIR` one (`engine adapt` over conse on the
    photos' captions: 10 views, centring, memory) against cold text queries of the same collections."""
    from PIL import Image, ImageOps

    from engine.core.demo import demo_photos
    folder = tmp / "photos"
    folder.mkdir()
    photos = demo_photos()
    for i in range(20):  # the bundled photos and their mirror images: 20 files
        img = Image.open(photos[i % len(photos)]).convert("RGB")
        (ImageOps.mirror(img) if i >= len(photos) else img).save(folder / f"p{i:02d}.jpg", quality=92)
    pairs = tmp / "pairs.csv"
    pairs.write_text("text,image\n" + "".join(f"{words} {photos[i % len(photos)].stem.replace('_', ' ')},"
                                              f"{folder / f'p{i:02d}.jpg'}\n" for i in range(20)
                                              for words in ("a photo of", "a picture showing")))
    root = tmp / "img-indexes"
    subprocess.run([*ENGINE, "adapt", "--base", "conse", "--pairs", str(pairs), "--out", str(tmp / "adapter"), "-q"],
                   env=env, check=True)
    cases = {}
    for name, model in (("photos", "conse"), ("adapted", f"adapted:{tmp / 'adapter'}")):
        subprocess.run([*ENGINE, "build", name, "--images", str(folder), "--model", model, "--root", str(root), "-q"],
                       env=env, check=True)
        base = [*ENGINE, "search", name, "--root", str(root), "-q", "--json", "-k", "5"]
        subprocess.run([*base, "--image", str(folder / "p00.jpg")], env=env, check=True, capture_output=True)
        label = "conse" if name == "photos" else "adapted:DIR"
        cases[f"engine search --image ({label})"] = ([*base, "--image", str(folder / "p03.jpg")], env)
        cases[f"engine search text ({label} collection)"] = ([*base[:5], "a dog", *base[5:]], env)
    return alternate(cases, repeat)


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


def build(n: int, repeat: int) -> dict:
    """Text build throughput: the engine's CPU build path vs SentenceTransformer.encode vs a raw onnxruntime loop
    over the same export, each in a fresh process, alternated (benchmarks/onnx_build.py's measurement)."""
    from onnx_build import section_encode
    return section_encode(n, repeat)

# ---------------------------------------------------------------------------------------------- vectors vs LanceDB
VOCABULARY = 5000


def vector_texts(n: int, seed: int = 2) -> tuple[list[str], list[str]]:
    """n documents of 8–60 words drawn from a Zipf law over VOCABULARY made-up words (so BM25's idf spreads as
    on real text), and 200 queries of 2–3 words of middling frequency."""
    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bdgklmnprstvz" for v in "aeiou"]  # 65: ≈ 270,000 words of 2–3
    words = sorted({"".join(rng.choice(syllables, int(rng.integers(2, 4)))) for _ in range(3 * VOCABULARY)})
    words = [words[i] for i in rng.permutation(len(words))[:VOCABULARY]]
    ranks = np.minimum(rng.zipf(1.3, size=n * 60), VOCABULARY) - 1
    lengths = rng.integers(8, 61, n)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    docs = [" ".join(words[j] for j in ranks[starts[i]:starts[i + 1]]) for i in range(n)]
    queries = [" ".join(words[j] for j in rng.integers(20, 500, int(rng.integers(2, 4)))) for _ in range(200)]
    return docs, queries


def vector_stores(folder: Path, n: int, nq: int) -> np.ndarray:
    """The same n × 384 vectors, metadata (`g`: 1 % of rows per value, `h`: 50 %) and texts in both stores:
    the engine's collections `v` (with BM25) and `d` (for the delete), LanceDB's tables `v` (with its
    full-text index and bitmap indexes on `g` and `h`) and `d`; the queries beside them. Exact search on
    both sides (a Flat index; LanceDB without a vector index). Returns the vectors (unit length)."""
    import lancedb
    import pyarrow as pa
    from bench_core import synthetic

    from engine.core.storage.builder.lexical import bm25_files, lexical_analyzer
    from engine.core.collection import Collection
    x, q = synthetic(n, nq, 384)
    docs, texts = vector_texts(n)
    ids = [f"d{i}" for i in range(n)]
    meta = [{"g": i % 100, "h": i % 2, "text": t} for i, t in enumerate(docs)]
    np.save(folder / "queries.npy", q)
    (folder / "query_texts.json").write_text(json.dumps(texts[:nq]))
    (folder / "sizes.json").write_text(json.dumps({"n": n}))
    root = folder / "engine"
    Collection.from_vectors("v", ids, x, None, "text", root=root, meta=meta,
                            files=bm25_files(ids, docs, lexical_analyzer(None, None)))
    Collection.from_vectors("d", ids, x, None, "text", root=root, meta=[{"g": m["g"], "h": m["h"]} for m in meta])
    db = lancedb.connect(str(folder / "lancedb"))
    vec = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 384)
    cols = {"id": pa.array(ids), "vector": vec, "g": pa.array([m["g"] for m in meta], pa.int64()),
            "h": pa.array([m["h"] for m in meta], pa.int64())}
    table = db.create_table("v", pa.table({**cols, "text": pa.array(docs)}))
    with warnings.catch_warnings():  # the older spellings of create_index(config=…): the same indexes
        warnings.simplefilter("ignore")
        table.create_fts_index("text")
        for field in ("g", "h"):  # what LanceDB advises for filtered search: its prefilter reads these
            table.create_scalar_index(field, index_type="BITMAP")
    db.create_table("d", pa.table(cols))
    return x


def brute(x: np.ndarray, q: np.ndarray, rows: np.ndarray) -> list[set[str]]:
    """The exact top-10 ids among `rows` of each query (inner product on unit vectors)."""
    scores = q @ x[rows].T
    return [{f"d{rows[j]}" for j in np.argsort(-s, kind="stable")[:10]} for s in scores]


def agreement(got: list[list[str]], want: list[set[str]]) -> float:
    """Mean share of the exact top-10 each query found (recall@10 against brute force)."""
    return float(np.mean([len(set(g) & w) / max(1, len(w)) for g, w in zip(got, want)]))


def vectors_vs_lancedb(n: int, nq: int, repeat: int, tmp: Path, env: dict) -> dict:
    folder = tmp / "vectors"
    folder.mkdir()
    t = time.perf_counter()
    x = vector_stores(folder, n, nq)
    print(f"  both stores written in {time.perf_counter() - t:.0f} s", flush=True)
    q = np.load(folder / "queries.npy")
    every = np.arange(n)
    want = {"filter_1pct": brute(x, q, every[every % 100 == 7]), "filter_50pct": brute(x, q, every[every % 2 == 1]),
            "dense": brute(x, q, every)}
    kept = brute(x, q, every[every % 10 != 0])
    sides = ("engine", "lancedb")
    runs: dict = {"queries": {s: [] for s in sides}, "delete": {s: [] for s in sides}}

    def worker(side: str, what: str, where: Path) -> dict:
        la = loadavg()
        out = subprocess.run([sys.executable, str(HERE / "peers_vectors.py"), side, what, str(where), str(nq)],
                             env={**env, "RUST_LOG": "error"}, capture_output=True, text=True)  # no per-query notices
        if out.returncode:
            raise SystemExit(f"{side} {what} failed:\n{out.stderr[-3000:]}")
        res = json.loads(out.stdout.strip().splitlines()[-1])
        res["load"] = [la, loadavg()]
        return res

    for r in range(repeat):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            res = worker(side, "queries", folder)
            for label, want_ids in want.items():
                res[label]["recall_vs_brute"] = agreement(res[label]["ids"], want_ids)
            runs["queries"][side].append(res)
            print(f"  queries {side}: " + ", ".join(f"{k} {v['p50_ms']:.1f} ms / {v['cpu_ms']:.1f} CPU ms"
                                                    for k, v in res.items() if isinstance(v, dict))
                  + f" (load {res['load'][0]})", flush=True)
    for r in range(repeat):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            copy = tmp / f"delete-{side}"
            shutil.rmtree(copy, ignore_errors=True)
            copy.mkdir()
            for f in ("queries.npy", "query_texts.json", "sizes.json"):
                shutil.copy(folder / f, copy / f)
            store = "engine/d" if side == "engine" else "lancedb/d.lance"
            shutil.copytree(folder / store, copy / store)
            os.sync()  # the copy's pages on disk first: the delete's own writes wait for no one
            res = worker(side, "delete", copy)
            res["before"]["recall_vs_brute"] = agreement(res["before"]["ids"], want["dense"])
            res["after"]["recall_vs_brute"] = agreement(res["after"]["ids"], kept)
            runs["delete"][side].append(res)
            print(f"  delete {side}: {res['delete_s']:.2f} s ({res['delete_cpu_s']:.2f} CPU s), dense before "
                  f"{res['before']['p50_ms']:.1f} ms, after {res['after']['p50_ms']:.1f} ms (load {res['load'][0]})",
                  flush=True)
    e, lq = runs["queries"]["engine"][0], runs["queries"]["lancedb"][0]
    overlap = {label: agreement(e[label]["ids"], [set(i) for i in lq[label]["ids"]]) for label in ("bm25", "hybrid")}
    return {"n": n, "queries": nq, "repeat": repeat, "runs": runs, "engine_lancedb_overlap_at_10": overlap}


def store_costs(n: int, repeat: int, tmp: Path, env: dict) -> dict:
    """Each side's build, delete of 10 % and compaction in a fresh process of its own, sides alternated run by
    run (the order reversed every other round)."""
    from bench_core import synthetic
    folder = tmp / "costs"
    folder.mkdir()
    np.save(folder / "vectors.npy", synthetic(n, 1, 384)[0])
    sides = ("engine", "lancedb", "numpy")
    runs: dict = {s: [] for s in sides}
    for r in range(repeat):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            os.sync()  # the previous run's writes on disk first
            la = loadavg()
            out = subprocess.run([sys.executable, str(HERE / "peers_vectors.py"), side, "costs", str(folder), "0"],
                                 env={**env, "RUST_LOG": "error"}, capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(f"{side} costs failed:\n{out.stderr[-3000:]}")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            res["load"] = [la, loadavg()]
            runs[side].append(res)
            print(f"  {side}: " + ", ".join(f"{k} {res[k + '_s']:.2f} s / {res[k + '_cpu_s']:.2f} CPU s, "
                                            f"{res[k + '_bytes'] / 2**20:.0f} MiB" for k in ("build", "delete", "compact"))
                  + f"; process {res['process_cpu_s']:.2f} CPU s, {res['peak_mib']:.0f} MiB (load {la})", flush=True)
    return {"n": n, "repeat": repeat, "runs": runs}


def costs_rows(v: dict) -> list[list[str]]:
    """Table rows: each step's medians per side (min–max), the medians of per-run ratios engine / LanceDB and
    engine / numpy (runs paired by round)."""
    med = statistics.median
    rows = []
    r = v["runs"]
    for key, label, fmt in (("build_cpu_s", "build, CPU s", "{:.2f}"), ("build_s", "build, wall s", "{:.2f}"),
                            ("delete_cpu_s", "delete 10 %, CPU s", "{:.3f}"), ("delete_s", "delete 10 %, wall s", "{:.3f}"),
                            ("compact_cpu_s", "compact, CPU s", "{:.2f}"), ("compact_s", "compact, wall s", "{:.2f}"),
                            ("process_cpu_s", "whole process (imports, build, delete, compact), CPU s", "{:.2f}"),
                            ("peak_mib", "whole process, peak MiB", "{:.0f}"),
                            ("build_bytes", "bytes on disk after the build, MiB", "{:.1f}"),
                            ("compact_bytes", "bytes on disk after the compaction, MiB", "{:.1f}")):
        scale = 2**20 if key.endswith("bytes") else 1
        e, lq, f = ([x[key] / scale for x in r[s]] for s in ("engine", "lancedb", "numpy"))
        cell = lambda vals: f"{fmt.format(med(vals))} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"  # noqa: E731
        rows.append([f"{v['n']:,} × 384, {label}", cell(e), f"LanceDB {cell(lq)}; numpy {cell(f)}",
                     f"{med(a / b for a, b in zip(e, lq)):.2f} × LanceDB, {med(a / b for a, b in zip(e, f)):.2f} × numpy"])
    return rows


def vectors_rows(v: dict) -> list[list[str]]:
    """Table rows: each measure's medians per side, the median of per-run ratios (engine / LanceDB)."""
    med = statistics.median
    rows = []
    q = v["runs"]["queries"]
    for label in ("filter_1pct", "filter_50pct", "dense", "bm25", "hybrid"):
        for key, unit in (("p50_ms", "ms p50"), ("cpu_ms", "CPU ms per query")):
            e = [r[label][key] for r in q["engine"]]
            lq = [r[label][key] for r in q["lancedb"]]
            ratio = med(a / b for a, b in zip(e, lq))
            check = ""
            if "recall_vs_brute" in q["engine"][0][label]:
                check = (f"; recall@10 vs brute force {med(r[label]['recall_vs_brute'] for r in q['engine']):.3f}"
                         f" / {med(r[label]['recall_vs_brute'] for r in q['lancedb']):.3f}")
            elif key == "p50_ms":
                check = f"; top-10 overlap {v['engine_lancedb_overlap_at_10'][label]:.2f}"
            rows.append([f"{v['n']:,} × 384, {label}, {unit}", f"{med(e):.2f} ({min(e):.2f}–{max(e):.2f})",
                         f"LanceDB {med(lq):.2f} ({min(lq):.2f}–{max(lq):.2f})", f"{ratio:.2f}{check}"])
    first_e = [r["first_filtered_ms"] for r in q["engine"]]
    first_l = [r["first_filtered_ms"] for r in q["lancedb"]]
    rows.append([f"{v['n']:,} × 384, first 1 % filtered query of a fresh process, ms", f"{med(first_e):.1f}",
                 f"LanceDB {med(first_l):.1f}", f"{med(a / b for a, b in zip(first_e, first_l)):.2f}"])
    d = v["runs"]["delete"]
    for key, label in (("delete_s", "delete 10 %, wall s"), ("delete_cpu_s", "delete 10 %, CPU s")):
        e, lq = [r[key] for r in d["engine"]], [r[key] for r in d["lancedb"]]
        rows.append([f"{v['n']:,} × 384, {label}", f"{med(e):.3f} ({min(e):.3f}–{max(e):.3f})",
                     f"LanceDB {med(lq):.3f} ({min(lq):.3f}–{max(lq):.3f})",
                     f"{med(a / b for a, b in zip(e, lq)):.2f} (goal ≤ 2)"])
    for side in ("engine", "lancedb"):
        runs = d[side]
        rows.append([f"{v['n']:,} × 384, {side}: dense before → right after the delete, ms p50 / CPU ms",
                     f"{med(r['before']['p50_ms'] for r in runs):.1f} / {med(r['before']['cpu_ms'] for r in runs):.1f}"
                     f" → {med(r['after']['p50_ms'] for r in runs):.1f} / {med(r['after']['cpu_ms'] for r in runs):.1f}",
                     f"first after {med(r['after_first_ms'] for r in runs):.1f} ms",
                     f"recall@10 vs brute force after {med(r['after']['recall_vs_brute'] for r in runs):.3f}"])
    return rows


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
        img = result["image"]
        text = "engine search text (conse collection)"
        for label in ("conse", "adapted:DIR"):
            i = img[f"engine search --image ({label})"]
            rows.append([f"cold `engine search --image` ({label}, 20 photos)", f"{i['wall_s']:.2f} s, "
                         f"{i['cpu_s']:.2f} CPU s, {i['peak_mib']:.0f} MiB",
                         f"conse collection's text query {img[text]['wall_s']:.2f} s, {img[text]['cpu_s']:.2f} CPU s",
                         f"{paired_ratio(img, f'engine search --image ({label})', text):.2f} paired "
                         f"(CPU {paired_ratio(img, f'engine search --image ({label})', text, 1):.2f}; goal ≤ 1.5)"])
        t = img["engine search text (adapted:DIR collection)"]
        rows.append(["cold `engine search` text (adapted:DIR collection)", f"{t['wall_s']:.2f} s, {t['cpu_s']:.2f} CPU s",
                     f"conse collection's text query {img[text]['wall_s']:.2f} s",
                     f"{paired_ratio(img, 'engine search text (adapted:DIR collection)', text):.2f} paired"])
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
        t = result["build"]["table"]
        for per, unit in (("per_s", "texts/s"), ("per_cpu_s", "texts per CPU second")):
            e = t["engine"]
            rows.append([f"text build, {result['build_n']:,} texts, {unit}", f"{e[per]:.1f}",
                         f"torch encode {t['torch'][per]:.1f}; raw onnxruntime loop {t['raw_onnx'][per]:.1f}",
                         f"{e['vs_torch' if per == 'per_s' else 'vs_torch_per_cpu_s']:.2f} × torch paired, "
                         f"{e[per] / t['raw_onnx'][per]:.2f} × raw (goal ≥ 1 × the faster)"])
    if "vectors" in result:
        rows.extend(vectors_rows(result["vectors"]))
    if "costs" in result:
        rows.extend(costs_rows(result["costs"]))
    if "features" in result:
        f = result["features"]
        rows.append([f"model-ranking features, {f['tasks']} tasks × {f['models']} checkpoints",
                     f"{f['median_s']['engine']:.1f} s (rerun over the cache {f['median_s']['cached']:.2f} s)",
                     f"bare transformers loop {f['median_s']['bare']:.1f} s",
                     f"{f['ratio_to_bare']['engine']:.2f} paired (goal ≤ 3; same features: {f['same_features']})"])
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
    ap.add_argument("--only", default="cold,image,serve,build",
                    help="sections: cold,image,serve,build,vectors,costs,features")
    ap.add_argument("--feature-tasks", type=int, default=21, help="tasks in the model-ranking feature path")
    ap.add_argument("--feature-models", type=int, default=20, help="tiny checkpoints in the feature path")
    ap.add_argument("--feature-texts", type=int, default=64, help="texts per task in the feature path")
    ap.add_argument("--vectors-n", type=int, default=200_000, help="stored vectors in the LanceDB comparison")
    ap.add_argument("--vectors-queries", type=int, default=40, help="queries per measure in the LanceDB comparison")
    ap.add_argument("--encode-docs", action="store_true", help="encode the searched documents with MiniLM "
                    "(default: random vectors under MiniLM's spec, the same work per query)")
    ap.add_argument("--peers-python", help="a Python with txtai and lancedb (a separate venv) for their cold query")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "peers.json")
    args = ap.parse_args()
    only = set(args.only.split(","))
    counts = (args.n, args.build_n, args.repeat, args.build_repeat, args.rounds, args.vectors_n, args.vectors_queries,
              args.feature_tasks, args.feature_models, args.feature_texts)
    if not only <= {"cold", "image", "serve", "build", "vectors", "costs", "features"} or min(counts) < 1:
        raise SystemExit("--only takes cold,image,serve,build,vectors,costs,features; --n, --build-n, --repeat, "
                         "--build-repeat, --rounds, --vectors-n, --vectors-queries, --feature-* must be ≥ 1")
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
            result["build"] = build(args.build_n, args.build_repeat)
        if "vectors" in only:
            print(f"vectors: the engine vs LanceDB, {args.vectors_n:,} × 384", flush=True)
            result["vectors"] = vectors_vs_lancedb(args.vectors_n, args.vectors_queries, args.repeat, tmp, env)
        if "costs" in only:
            print(f"the store's costs: the engine, LanceDB and numpy, {args.vectors_n:,} × 384", flush=True)
            result["costs"] = store_costs(args.vectors_n, args.repeat, tmp, env)
        if "features" in only:
            import feature_path
            print(f"model-ranking features: {args.feature_tasks} tasks × {args.feature_models} checkpoints", flush=True)
            result["features"] = feature_path.measure(tmp / "features", args.feature_tasks, args.feature_models,
                                                      args.feature_texts, args.build_repeat)
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
