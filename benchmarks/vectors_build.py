"""Builds that never hold all the vectors, each measured in a fresh process.

1. `engine build --vectors` of N × D float32 vectors (default 2M × 384 = 2.9 GiB, generated on disk block by
   block, deleted afterwards): whole-process peak RSS (the kernel's own peak, `ru_maxrss` from wait4) and peak
   anonymous memory, for the exact index and for IVF4096,Flat (lists on disk under --memory-budget); the exact
   collection's top-10 equal raw FAISS (`faiss.knn` over the normalized vectors), the IVF's stored recall@10 and
   its recall measured here against the same truth.
2. The Ray build's driver: peak memory at two sizes ≥ 4× apart (a fast hash "encoder" in the Ray workers, so
   the driver's own bookkeeping is what is measured), for this tree and, with --baseline DIR, an older tree;
   with --driver-local the same build without Ray (the hash encoder in the process).

    python benchmarks/vectors_build.py [--n 2000000] [--dim 384] [--ray-sizes 50000,200000]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GIB = 1024 ** 3


def write_vectors(path: Path, n: int, dim: int, block: int = 100_000, seed: int = 0) -> np.ndarray:
    """n clustered vectors (as `bench_core.synthetic` draws them) written block by block; returns 100 queries."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((64, dim)).astype(np.float32)
    centers = rng.standard_normal((1000, 64)).astype(np.float32)

    def draw(m: int) -> np.ndarray:
        z = centers[rng.integers(0, len(centers), m)] + 0.6 * rng.standard_normal((m, 64)).astype(np.float32)
        return (z @ basis + 0.3 * rng.standard_normal((m, dim)).astype(np.float32)).astype(np.float32)

    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (n, dim)})
        for lo in range(0, n, block):
            fh.write(draw(min(block, n - lo)).tobytes())
    return draw(100)


LAUNCH = """
import json, os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL)
with open(sys.argv[1], "w") as fh:
    fh.write(str(proc.pid))
_, status, usage = os.wait4(proc.pid, 0)
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "peak_rss": usage.ru_maxrss * 1024}))
"""
"""Starts the measured command from a fresh, small process and waits for it: a child started (vfork + exec)
by a process that has grown inherits that process's peak RSS as its own `ru_maxrss` — this benchmark's
process maps 2.9 GB of embeddings to compute the truth, which once showed up as a build's "peak"."""


def run_measured(cmd: list[str], env: dict | None = None) -> dict:
    """Run `cmd` (through `LAUNCH`); its peak RSS (ru_maxrss: every resident page, mapped files included) and
    peak RssAnon (sampled from /proc every 20 ms), seconds, exit status and the tail of its stderr."""
    err = tempfile.TemporaryFile()
    pid_file = Path(tempfile.mktemp(prefix="measured-pid-"))
    t = time.perf_counter()
    # run from the temporary folder: `python -c` puts the working directory first on sys.path, which would
    # import the tree the benchmark was started in instead of the one PYTHONPATH names (--baseline)
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCH, str(pid_file), *cmd], stdout=subprocess.PIPE,
                                stderr=err, env={**os.environ, **(env or {})}, cwd=tempfile.gettempdir())
    peak_anon = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set() and not (pid_file.is_file() and pid_file.read_text()):
            time.sleep(0.005)
        pid = pid_file.read_text() if pid_file.is_file() else ""
        while pid and not stop.is_set():
            try:
                for line in open(f"/proc/{pid}/status"):
                    if line.startswith("RssAnon:"):
                        peak_anon[0] = max(peak_anon[0], int(line.split()[1]) * 1024)
            except OSError:
                return
            time.sleep(0.02)
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    out, _ = launcher.communicate()
    stop.set()
    thread.join()
    pid_file.unlink(missing_ok=True)
    err.seek(0)
    got = json.loads(out) if launcher.returncode == 0 else {"rc": launcher.returncode, "peak_rss": 0}
    return {"seconds": time.perf_counter() - t, "peak_rss": got["peak_rss"], "peak_anon": peak_anon[0],
            "rc": got["rc"], "stderr": err.read().decode(errors="replace")[-2000:]}


ENGINE = [sys.executable, "-c", "import sys; from engine.cli import main; sys.argv[0] = 'engine'; main()"]


def vectors_builds(n: int, dim: int, tmp: Path, factories: list[str], budget: str) -> list[dict]:
    from engine.core.collection import Collection
    from engine.core.encoders.base import l2_normalize
    from engine.core.storage.index.faiss_index import exact_top_k
    from engine.core.storage.store.npy_rows import NpyRows
    vec = tmp / "vectors.npy"
    t = time.perf_counter()
    queries = l2_normalize(write_vectors(vec, n, dim))
    print(f"wrote {n:,} × {dim} float32 ({vec.stat().st_size / GIB:.2f} GiB) in {time.perf_counter() - t:.0f} s",
          flush=True)
    rows = []
    truth = None
    for factory in factories:
        name = factory.replace(",", "_")
        args = ["build", name, "--vectors", str(vec), "--root", str(tmp / "idx"), "--index", factory, "-q"]
        if factory != "Flat":
            args += ["--memory-budget", budget]
        r = run_measured(ENGINE + args)
        if r["rc"]:
            raise SystemExit(f"{factory} build failed:\n{r['stderr']}")
        col = Collection.open(name, tmp / "idx")
        if truth is None:  # raw FAISS: exact inner product over the normalized rows, block by block (read, not mapped)
            truth = exact_top_k(NpyRows.open([col.file("embeddings")]), queries, 10)[1]
        got = col.search_vectors(queries, 10)[1]
        measured = float(np.mean([len(set(g) & set(t)) / 10 for g, t in zip(got, truth)]))
        disk = sum(p.stat().st_size for p in col.path.rglob("*") if p.is_file())
        rows.append({"factory": factory, "n": n, "dim": dim, "seconds": r["seconds"], "peak_rss": r["peak_rss"],
                     "peak_anon": r["peak_anon"], "equal_raw_faiss": bool(np.array_equal(got, truth)),
                     "recall_measured": measured, "recall_stored": col.manifest.get("recall_at_10"),
                     "index": type(col.index).__name__, "disk_bytes": disk,
                     "memory_budget": budget if factory != "Flat" else None})
        print(json.dumps(rows[-1]), flush=True)
        del col
        shutil.rmtree(tmp / "idx" / name)
    vec.unlink()
    return rows


FAKE = """
import zlib
import numpy as np
from engine.core.encoders.base import Encoder
DIM = int({dim})
TABLE = np.random.default_rng(0).standard_normal((4096, DIM)).astype(np.float32)

def text_fn(texts, batch_size):
    h = np.array([zlib.crc32(t.encode()) for t in texts], dtype=np.uint64)
    return TABLE[h % 4096] + 0.01 * TABLE[(h >> 12) % 4096]

def load(spec):
    return Encoder(spec="fake-hash", dim=DIM, modalities=frozenset({{"text"}}), text_fn=text_fn)

def install():
    from engine.core.encoders import registry
    registry.load_encoder = load
"""

RAY_CHILD = """
import sys, time, ray
sys.path.insert(0, {tmp!r})
import fakehash
fakehash.install()
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
         runtime_env={{"worker_process_setup_hook": "fakehash.install", "env_vars": {{"PYTHONPATH": {path!r}}}}})
from engine.core.collection import Collection
from engine.progress import set_quiet
set_quiet(True)
Collection.build("r{n}", texts={table!r}, root={root!r}, model="fake-hash", chunk_size=2048, batch_size=512,
                 ray="local")
ray.shutdown()
"""


LOCAL_CHILD = """
import sys
sys.path.insert(0, {tmp!r})
import fakehash
fakehash.install()
from engine.core.collection import Collection
from engine.progress import set_quiet
set_quiet(True)
Collection.build("r{n}", texts={table!r}, root={root!r}, model="fake-hash", chunk_size=2048, batch_size=512)
"""


def ray_driver(sizes: list[int], dim: int, tmp: Path, trees: dict[str, Path], local: bool = False) -> list[dict]:
    (tmp / "fakehash.py").write_text(FAKE.format(dim=dim))
    rows = []
    for n in sizes:
        table = tmp / f"texts-{n}.csv"
        with open(table, "w") as fh:
            fh.write("id,text\n")
            for i in range(n):
                fh.write(f"t{i},item number {i} of the ray memory benchmark\n")
        for label, tree in trees.items():
            root = tmp / f"ray-{label}"
            path = os.pathsep.join([str(tmp), str(tree)])
            child = LOCAL_CHILD if local else RAY_CHILD
            code = child.format(tmp=str(tmp), path=path, n=n, table=str(table), root=str(root))
            r = run_measured([sys.executable, "-c", code], env={"PYTHONPATH": path})
            if r["rc"]:
                raise SystemExit(f"Ray build of {n} ({label}) failed:\n{r['stderr']}")
            rows.append({"tree": label, "mode": "local" if local else "ray", "items": n, "dim": dim, "seconds": r["seconds"], "peak_rss": r["peak_rss"],
                         "peak_anon": r["peak_anon"], "embedding_bytes": n * dim * 4})
            print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(root, ignore_errors=True)
        table.unlink()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--factories", default="Flat;IVF4096,Flat", help="';'-separated factory strings")
    ap.add_argument("--memory-budget", default="1G", help="--memory-budget of the non-exact builds")
    ap.add_argument("--ray-sizes", default="50000,200000")
    ap.add_argument("--baseline", type=Path, help="another tree (e.g. `git archive main`) for the Ray driver")
    ap.add_argument("--skip-vectors", action="store_true")
    ap.add_argument("--driver-local", action="store_true",
                    help="measure the same build without Ray (the encoder in the driver's process)")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "vectors_build.json")
    a = ap.parse_args()
    from engine.display import format_table
    tmp = Path(tempfile.mkdtemp(prefix="vectors-build-bench-", dir=a.tmp))
    result: dict = {"machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at start"}
    try:
        if not a.skip_vectors:
            rows = result["vectors"] = vectors_builds(a.n, a.dim, tmp, a.factories.split(";"), a.memory_budget)
            print(format_table(["--vectors build", "index", "seconds", "peak RSS GiB", "peak anon GiB",
                                "= raw FAISS", "recall@10 stored", "recall@10 measured", "disk GiB"], [
                [f"{r['n']:,} × {r['dim']}", f"{r['factory']} ({r['index']})", f"{r['seconds']:.0f}",
                 f"{r['peak_rss'] / GIB:.2f}", f"{r['peak_anon'] / GIB:.2f}", str(r["equal_raw_faiss"]),
                 "-" if r["recall_stored"] is None else f"{r['recall_stored']:.3f}", f"{r['recall_measured']:.3f}",
                 f"{r['disk_bytes'] / GIB:.2f}"] for r in rows]))
        if not a.skip_ray:
            trees = {"this": HERE.parent, **({"baseline": a.baseline} if a.baseline else {})}
            rows = result["ray_driver"] = ray_driver([int(s) for s in a.ray_sizes.split(",")], a.dim, tmp, trees,
                                                     a.driver_local)
            print(format_table(["local build" if a.driver_local else "Ray build driver", "items", "embeddings MiB", "seconds", "peak RSS MiB",
                                "peak anon MiB"], [
                [r["tree"], f"{r['items']:,}", f"{r['embedding_bytes'] / 2**20:.0f}", f"{r['seconds']:.0f}",
                 f"{r['peak_rss'] / 2**20:.0f}", f"{r['peak_anon'] / 2**20:.0f}"] for r in rows]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_at_end"] = os.getloadavg()[0]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
