"""The engine at 1M vectors on one machine, each figure beside its reference measured in the same run.

Sections (all by default; `--sections build,open,batch,store`):

  build   peak memory of `Collection.from_vectors` (1M × 512, Flat) in a fresh process / the vectors' bytes;
          goal ≤ 2×.
  open    one whole process: open the collection + one search + its hits' metadata, vs `faiss.read_index`
          + `np.load(mmap_mode='r')` + one search; wall and peak memory, medians of --repeat alternated runs;
          goal ≤ 1.2× wall, ≤ 1.1× memory. `verify` (every byte) is timed beside it.
  batch   exact search per query at batch sizes 1…1024: the engine (BLAS at every batch size) vs FAISS's
          default threshold; goal: every batch ≥ 64 within 1.3× of the best.
  store   `--store float32|float16|sq8`: recall@10 and per-query scan time at batch 64.

    python benchmarks/scale.py [--n 1000000] [--dim 512] [--work /tmp/engine-scale]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_core import synthetic

PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(HERE.parent)}


def run_timed(code: str) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB, stdout) of `python -c code` in a fresh process."""
    t = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-f", "%M", PY, "-c", code], env=ENV, capture_output=True, text=True,
                         check=True)
    wall = time.perf_counter() - t
    return wall, int(out.stderr.strip().splitlines()[-1]) / 1024, out.stdout


def section_build(work: Path, n: int, dim: int) -> dict:
    code = f"""
import sys; sys.path.insert(0, {str(HERE)!r})
import numpy as np, resource
from bench_core import synthetic
from engine.core.collection import Collection
x, _ = synthetic({n}, 1, {dim})
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
Collection.from_vectors("big", [f"doc{{i}}" for i in range(len(x))], x, None, "image", root={str(work)!r}, force=True,
                        meta=[{{"path": f"images/{{i:07d}}.jpg"}} for i in range(len(x))])
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
    t = time.perf_counter()
    wall, peak, out = run_timed(code)
    before = int(out.split()[0])
    vec_mib = n * dim * 4 / 2**20
    return {"n": n, "dim": dim, "vectors_mib": vec_mib, "peak_mib": peak, "peak_before_build_mib": before / 1024,
            "peak_over_vectors": peak / vec_mib, "build_s": time.perf_counter() - t, "wall_s": wall}


def section_open(work: Path, dim: int, repeat: int) -> dict:
    q = f"np.random.default_rng(1).standard_normal((1, {dim})).astype('float32')"
    folder = work / "big"
    manifest = json.loads((folder / "manifest.json").read_text())
    index, emb = folder / manifest["roles"]["index"], folder / manifest["roles"]["embeddings"]
    raw = (f"import faiss, numpy as np\nidx = faiss.read_index({str(index)!r})\n"
           f"e = np.load({str(emb)!r}, mmap_mode='r')\nD, I = idx.search({q}, 10)\nprint(I[0][0])")
    eng = (f"import numpy as np\nfrom engine.core.collection import Collection\n"
           f"c = Collection.open('big', {str(work)!r})\nhits = c.hits(*c.search_vectors({q}, 10))[0]\n"
           f"print(hits[0].id, hits[0].meta)")
    rows = {"raw": [], "engine": []}
    for _ in range(repeat):  # alternated so load changes hit both alike
        rows["raw"].append(run_timed(raw)[:2])
        rows["engine"].append(run_timed(eng)[:2])
    med = {k: (statistics.median(w for w, _ in v), statistics.median(m for _, m in v)) for k, v in rows.items()}
    t = time.perf_counter()
    code = f"from engine.core.collection import Collection\nCollection.open('big', {str(work)!r}).verify()"
    subprocess.run([PY, "-c", code], env=ENV, check=True)
    verify_s = time.perf_counter() - t
    total = sum(v["bytes"] for v in manifest["files"].values())
    return {"raw_wall_s": med["raw"][0], "engine_wall_s": med["engine"][0], "wall_ratio": med["engine"][0] / med["raw"][0],
            "raw_peak_mib": med["raw"][1], "engine_peak_mib": med["engine"][1],
            "peak_ratio": med["engine"][1] / med["raw"][1], "repeat": repeat, "verify_s": verify_s,
            "verify_gib": total / 2**30, "runs": rows}


def section_batch(work: Path, reps_vectors: int = 1024) -> list[dict]:
    import faiss

    from engine.core.collection import Collection
    from engine.core.storage.index.faiss_index import BLAS_MIN_BYTES
    col = Collection.open("big", work)
    index = col.index
    assert len(col) * col.dim * 4 >= BLAS_MIN_BYTES  # the engine's setting at this size is threshold 1
    q = np.ascontiguousarray(synthetic(1, reps_vectors, col.dim, seed=3)[1])
    rows = []
    for batch in (1, 4, 16, 64, 256, 1024):
        nq = max(batch * (1 if batch >= 256 else 2), 8)
        per = {}
        for label, threshold in (("engine", 1), ("faiss_default", 128000)):
            if label == "faiss_default" and batch * col.dim >= threshold:
                per[label] = per["engine"]  # FAISS uses BLAS here too: the same code path
                continue
            faiss.cvar.distance_compute_blas_threshold = threshold
            index.search(q[:batch], 10)
            t = time.perf_counter()
            done = 0
            while done < nq:
                index.search(q[done % len(q):done % len(q) + batch], 10)
                done += batch
            per[label] = (time.perf_counter() - t) / done * 1e3
        rows.append({"batch": batch, "faiss_default_ms_per_query": per["faiss_default"],
                     "engine_ms_per_query": per["engine"]})
    faiss.cvar.distance_compute_blas_threshold = 1
    best = min(r["engine_ms_per_query"] for r in rows)
    for r in rows:
        r["engine_over_best"] = r["engine_ms_per_query"] / best
        r["faiss_default_over_best"] = r["faiss_default_ms_per_query"] / best
    return rows


def section_store(work: Path, nq: int = 256) -> list[dict]:
    from engine.core.storage.index.auto import _recall, _truth
    from engine.core.collection import Collection
    from engine.core.storage.index.faiss_index import STORES, build_index, use_blas_for
    col = Collection.open("big", work)
    emb = col.embeddings
    q = np.ascontiguousarray(synthetic(1, nq, col.dim, seed=4)[1])
    truth = _truth(emb, q)
    rows = []
    for store, factory in STORES.items():
        index = col.index if factory == "Flat" else build_index(emb, factory)
        use_blas_for(index, 64)
        index.search(q[:64], 10)
        t = time.perf_counter()
        for lo in range(0, nq, 64):
            index.search(q[lo:lo + 64], 10)
        per = (time.perf_counter() - t) / nq * 1e3
        rows.append({"store": store, "factory": factory, "recall@10": _recall(index.search(q, 10)[1], truth),
                     "ms_per_query_batch64": per, "index_mib": index.ntotal * (index.code_size if hasattr(
                         index, "code_size") else col.dim * 4) / 2**20})
        del index
    base = rows[0]["ms_per_query_batch64"]
    for r in rows:
        r["time_vs_float32"] = r["ms_per_query_batch64"] / base
    return rows


def show(headers, rows, title: str) -> None:
    from engine.display import format_table
    print(f"\n{title}\n\n{format_table(headers, rows, markdown=True)}\n", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sections", default="build,open,batch,store")
    ap.add_argument("--work", type=Path, default=Path("/tmp/engine-scale"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "scale.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    sections = args.sections.split(",")
    result: dict = json.loads(args.out.read_text()) if args.out.is_file() else {}
    result["machine"] = {"cores": os.cpu_count(), "load_at_start": os.getloadavg()}

    def save() -> None:  # after every section: a run cut short keeps what it measured
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=float))
    if "build" in sections or not (args.work / "big" / "manifest.json").is_file():
        b = result["build"] = section_build(args.work, args.n, args.dim)
        show(["n × dim", "vectors MiB", "peak MiB", "peak / vectors", "build s"],
                                   [[f"{b['n']:,} × {b['dim']}", f"{b['vectors_mib']:.0f}", f"{b['peak_mib']:.0f}",
                                     f"{b['peak_over_vectors']:.2f}", f"{b['build_s']:.1f}"]],
                                   title="build from vectors: peak memory (goal ≤ 2×)")
        save()
    if "open" in sections:
        o = result["open"] = section_open(args.work, args.dim, args.repeat)
        show(
            ["", "raw mmap + read_index", "engine open + search + hits", "ratio"],
            [["wall s (median)", f"{o['raw_wall_s']:.2f}", f"{o['engine_wall_s']:.2f}", f"{o['wall_ratio']:.2f}"],
             ["peak MiB (median)", f"{o['raw_peak_mib']:.0f}", f"{o['engine_peak_mib']:.0f}", f"{o['peak_ratio']:.2f}"]],
            title=f"open + first search, whole process (goal ≤ 1.2× wall, ≤ 1.1× memory); "
                  f"verify of {o['verify_gib']:.2f} GiB: {o['verify_s']:.1f} s")
        save()
    if "batch" in sections:
        rows = result["batch"] = section_batch(args.work)
        show(["batch", "FAISS default ms/q", "× best", "engine ms/q", "× best"],
                                   [[r["batch"], f"{r['faiss_default_ms_per_query']:.2f}",
                                     f"{r['faiss_default_over_best']:.2f}", f"{r['engine_ms_per_query']:.2f}",
                                     f"{r['engine_over_best']:.2f}"] for r in rows],
                                   title="exact search per query by batch size (goal: within 1.3× of the best)")
        save()
    if "store" in sections:
        rows = result["store"] = section_store(args.work)
        show(["--store", "factory", "recall@10", "ms/q (batch 64)", "time vs float32", "MiB"],
                                   [[r["store"], r["factory"], f"{r['recall@10']:.3f}",
                                     f"{r['ms_per_query_batch64']:.2f}", f"{r['time_vs_float32']:.2f}",
                                     f"{r['index_mib']:.0f}"] for r in rows], title="exact-search stores")
        save()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
