"""The paths around the warm query, this checkout side by side with an earlier one (`--baseline DIR`, a copy of
the engine at another commit, e.g. `git archive BASE | tar -x -C DIR`), in one run.

Each measurement runs in a fresh process per side (`PYTHONPATH` = that side's checkout), the two sides
alternated run by run (which goes first alternates too); the table gives each side's median and the median of
the per-run ratios (head / baseline), and the JSON records the load average seen before and after (the
machine is shared: read the paired ratios).

    filter   N × DIM vectors (Collection.from_vectors) whose field `g` matches 1 % of them: a fresh process opens
             the collection and runs Q queries filtered by `g == 7` (the first one timed apart: it maps what
             the query reads), then Q unfiltered; p50 wall ms and CPU ms per query; the filtered top-10
             checked against brute-force filtering of exact scores
    bench    `engine bench` of a 16-photo EfficientNet collection with its defaults, wall seconds of the command
    delete   10 % of the N items deleted (`engine delete`'s function) on a fresh copy of the collection (each side's
             own build of it): wall
             and CPU seconds, then Q queries right after (p50 ms) against the same queries before the delete;
             the results checked against a search of the kept rows alone

    python benchmarks/floor_paths.py --baseline DIR [--sections filter,delete,bench] [--n 200000] [--dim 384]
                                     [--repeat 3] [--work /tmp/engine-floor]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def cpu() -> float:
    return time.process_time()  # this process's CPU seconds, all threads (what load does not inflate)


def vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(64, dim)).astype(np.float32)
    out = np.empty((n, dim), np.float32)
    for lo in range(0, n, 50_000):
        hi = min(n, lo + 50_000)
        out[lo:hi] = centers[rng.integers(0, 64, hi - lo)] + 0.5 * rng.normal(size=(hi - lo, dim))
    return out


# ---------------------------------------------------------------------------------------------- workers
def _timed(fn, items, rounds: int) -> tuple[float, float, list]:
    """p50 wall ms of `fn(item)` over `rounds` passes of `items`, and CPU ms per call from the whole loop's CPU
    time (the process clock ticks in milliseconds here: per-call CPU readings would be quantised)."""
    walls, out = [], []
    c = cpu()
    for r in range(rounds):
        for item in items:
            t = time.perf_counter()
            res = fn(item)
            walls.append(time.perf_counter() - t)
            if r == 0:
                out.append(res)
    return statistics.median(walls) * 1e3, (cpu() - c) * 1e3 / len(walls), out


def work_filter(root: Path, q: int) -> dict:
    from engine.core.collection import Collection
    from engine.core.ranking.hybrid import search_rows
    queries = np.load(root / "queries.npy")[:q]
    col = Collection.open("c", root)
    where = "g == 7"
    t = time.perf_counter()
    _, first_rows = search_rows(col, 10, vectors=queries[:1], where=where)
    first = time.perf_counter() - t
    filt, filt_cpu, got = _timed(lambda v: search_rows(col, 10, vectors=v[None], where=where)[1][0].tolist(),
                                 queries, 5)
    plain, plain_cpu, _ = _timed(lambda v: search_rows(col, 10, vectors=v[None]), queries, 2)
    return {"first_filtered_ms": first * 1e3, "filtered_p50_ms": filt, "filtered_cpu_ms": filt_cpu,
            "unfiltered_p50_ms": plain, "unfiltered_cpu_ms": plain_cpu, "rows": got}


def work_delete(root: Path, q: int) -> dict:
    from engine.core.storage.builder.update import delete_ids
    from engine.core.collection import Collection
    from engine.core.ranking.hybrid import search_rows
    queries = np.load(root / "queries.npy")[:q]
    n = len(Collection.open("c", root))
    before = Collection.open("c", root)
    b_wall, b_cpu, _ = _timed(lambda v: before.search_vectors(v[None], 10), queries, 2)
    gone = [f"d{i}" for i in range(0, n, 10)]
    t, c = time.perf_counter(), cpu()
    delete_ids("c", gone, root=root)
    wall, cpu_s = time.perf_counter() - t, cpu() - c
    col = Collection.open("c", root)
    a_wall, a_cpu, got = _timed(lambda v: [h.id for h in col.hits(*search_rows(col, 10, vectors=v[None]))[0]],
                                queries, 2)
    return {"delete_s": wall, "delete_cpu_s": cpu_s, "query_before_ms": b_wall, "query_before_cpu_ms": b_cpu,
            "query_after_ms": a_wall, "query_after_cpu_ms": a_cpu, "ids": got}


def work_bench(root: Path, q: int) -> dict:
    """`engine bench` of a 16-photo collection from the shell, its defaults (the baseline has no --seconds)."""
    import resource
    t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "engine.cli", "bench", "b", "--root", str(root), "-q", "--out",
                          str(root / "bench.json")], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"bench_s": time.perf_counter() - t, "bench_cpu_s": (after.ru_utime + after.ru_stime)
            - (before.ru_utime + before.ru_stime), "rows": []}


WORKERS = {"filter": work_filter, "delete": work_delete, "bench": work_bench}


def prepare_bench(work: Path) -> Path:
    """An image collection of scikit-image's 16 bundled photos (EfficientNet-Lite0: image → image queries, the
    collection's own photos), built once."""
    root = work / "bench"
    if not (root / "b" / "manifest.json").is_file():
        sys.path.insert(0, str(REPO))
        from engine.core.collection import Collection
        from engine.core.demo import demo_photos
        folder = work / "photos"
        folder.mkdir(parents=True, exist_ok=True)
        for photo in demo_photos():
            shutil.copy(photo, folder / photo.name)
        Collection.build("b", images=folder, root=root, model="effnet")
    return root


# ---------------------------------------------------------------------------------------------- driver
def prepare(work: Path, n: int, dim: int, q: int, name: str, side: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """The collection each side measures, built by that side's own code (a checkout writes the roles it
    knows: an older one could not delete from a collection carrying a newer role), once per side."""
    src = work / f"source-{name}"  # built again when --work is new: give a fresh --work per baseline
    x = vectors(n, dim)
    queries = vectors(q, dim, seed=1)
    if not (src / "c" / "manifest.json").is_file():
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        np.save(src / "x.npy", x)
        code = ("import numpy as np, sys; from engine.core.collection import Collection; "
                f"n = {n}; x = np.load({str(src / 'x.npy')!r}); "
                "Collection.from_vectors('c', [f'd{i}' for i in range(n)], x, None, 'text', "
                f"root={str(src)!r}, meta=[{{'g': i % 100}} for i in range(n)])")
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(side)})
        (src / "x.npy").unlink()
        np.save(src / "queries.npy", queries)
    return src, x / np.linalg.norm(x, axis=1, keepdims=True), queries / np.linalg.norm(queries, axis=1, keepdims=True)


def run_worker(side: Path, section: str, root: Path, q: int) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(HERE)!r}); import floor_paths as f; "
            f"from pathlib import Path; print(json.dumps(f.WORKERS[{section!r}](Path({str(root)!r}), {q})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(side)})
    if out.returncode:
        raise SystemExit(f"{section} worker on {side} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def brute_filtered(x: np.ndarray, queries: np.ndarray, n: int) -> list[list[int]]:
    rows = np.arange(7, n, 100)
    out = []
    for v in queries:
        s = x[rows] @ v
        out.append(rows[np.lexsort((rows, -s))[:10]].tolist())
    return out


def brute_kept(x: np.ndarray, queries: np.ndarray, n: int) -> list[list[str]]:
    rows = np.flatnonzero(np.arange(n) % 10 != 0)
    s = queries @ x[rows].T
    return [[f"d{rows[j]}" for j in np.lexsort((rows, -si))[:10]] for si in s]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the engine at another commit")
    ap.add_argument("--sections", default="filter,delete,bench")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/engine-floor"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "floor_paths.json")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    sides = {"baseline": a.baseline.resolve(), "head": REPO}
    sources = {}
    for name, side in sides.items():
        sources[name], x, queries = prepare(a.work, a.n, a.dim, a.queries, name, side)
    result: dict = {"n": a.n, "dim": a.dim, "queries": a.queries, "repeat": a.repeat, "baseline": str(a.baseline),
                    "load_before": os.getloadavg(), "sections": {}}
    for section in a.sections.split(","):
        runs: dict[str, list[dict]] = {"baseline": [], "head": []}
        for r in range(a.repeat):
            for name in (("baseline", "head") if r % 2 == 0 else ("head", "baseline")):
                root = prepare_bench(a.work) if section == "bench" else sources[name]
                if section == "delete":  # each delete on its own copy of the collection
                    root = a.work / f"copy-{name}"
                    shutil.rmtree(root, ignore_errors=True)
                    shutil.copytree(sources[name], root)
                    os.sync()  # the copy's dirty pages on disk first: the delete's own fsyncs wait for no one
                res = run_worker(sides[name], section, root, a.queries)
                if section == "bench":
                    res["exact"] = res.pop("rows") == []
                elif section == "filter":
                    res["exact"] = res.pop("rows") == brute_filtered(x, queries[:a.queries], a.n)
                else:
                    res["exact"] = res.pop("ids") == brute_kept(x, queries[:a.queries], a.n)
                runs[name].append(res)
                print(f"  {section} run {r + 1} {name}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float)
                                                                     else f"{k} {v}" for k, v in res.items()),
                      flush=True)
        keys = [k for k in runs["head"][0] if k != "exact"]
        table = {}
        print(f"\n== {section}: {a.n:,} × {a.dim}, medians of {a.repeat} runs per side ==")
        print(f"{'measure':24s} {'baseline':>10s} {'head':>10s} {'head/base (paired)':>20s}")
        for k in keys:
            b = statistics.median(r[k] for r in runs["baseline"])
            h = statistics.median(r[k] for r in runs["head"])
            pairs = [hr[k] / br[k] for hr, br in zip(runs["head"], runs["baseline"]) if br[k]]
            ratio = statistics.median(pairs) if pairs else float("nan")
            table[k] = {"baseline": round(b, 3), "head": round(h, 3), "ratio": round(ratio, 3)}
            print(f"{k:24s} {b:10.3f} {h:10.3f} {ratio:20.3f}")
        exact = {name: all(r["exact"] for r in rs) for name, rs in runs.items()}
        print(f"results equal brute force: {exact}")
        result["sections"][section] = {"table": table, "exact": exact, "runs": runs}
    result["load_after"] = os.getloadavg()
    print(f"\nload average before {result['load_before']}, after {result['load_after']}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
