"""Distributed builds, measured side by side in one run (ratios are what to quote; absolute times are noisy).

1. items/s of a local build vs the same build on a local Ray (`--ray`): the same texts, model, chunks;
   end to end as a user sees it (Ray's start, actor start-up and model loads included) — Ray's overhead
   ratio on this machine;
2. the driver's memory while building an IVF index over N vectors (default 1M × 384): shards filled in
   Ray tasks and merged on disk (`engine.core.storage.index.ondisk`) vs one index built in memory (`build_index`), each
   in a fresh process; peak anonymous memory (what the process itself holds) and peak RSS (with mapped
   file pages), and whether both indexes return the same neighbours.

    python benchmarks/ray_build.py [--items 3000] [--vectors 1000000] [--dim 384]
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
WORDS = ("apple river mountain neural bread castle ocean train music forest engine garden winter market violin "
         "desert harbor glacier circuit poem lantern meadow copper signal theatre").split()


def write_items(kind: str, n: int, tmp: Path) -> list[str]:
    """n generated texts (CSV rows) or n generated 256×256 photos-like PNGs (CSV rows id,path)."""
    rng = np.random.default_rng(0)
    if kind == "text":
        return [f"t{i},{' '.join(rng.choice(WORDS, 12))}\n" for i in range(n)]
    from PIL import Image
    folder = tmp / "images"
    folder.mkdir(exist_ok=True)
    rows = []
    for i in range(n):
        base = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)  # smooth blobs, not noise: decodes like a photo
        Image.fromarray(base).resize((256, 256), Image.BICUBIC).save(folder / f"i{i}.png")
        rows.append(f"i{i},{folder / f'i{i}.png'}\n")
    return rows


def build_rates(n: int, tmp: Path, cpus: int, kind: str = "text", small: int = 256) -> dict:
    """Seconds of a local and a Ray build of `small` and of n texts (the same texts, model and chunks):
    end to end, and the marginal items/s between the two sizes (start-up excluded: what more items cost)."""
    import ray

    from engine.core.collection import Collection
    from engine.progress import set_quiet
    set_quiet(True)
    rows = write_items(kind, n, tmp)
    header = "id,text\n" if kind == "text" else "id,path\n"
    source = "texts" if kind == "text" else "images"
    out: dict = {"kind": kind, "items": n, "small": small, "cpus": cpus}
    cols = {}
    for size in (small, n):
        table = tmp / f"items-{size}.csv"
        table.write_text(header + "".join(rows[:size]))
        t = time.perf_counter()
        cols["local", size] = Collection.build(f"local-{size}", **{source: table}, root=tmp, chunk_size=256,
                                               threads=cpus)
        out[f"local_s_{size}"] = time.perf_counter() - t
        t = time.perf_counter()
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        try:
            cols["ray", size] = Collection.build(f"ray-{size}", **{source: table}, root=tmp, chunk_size=256,
                                                 ray="local")
        finally:
            ray.shutdown()
        out[f"ray_s_{size}"] = time.perf_counter() - t
    local, dist = cols["local", n], cols["ray", n]
    out["same_ids"] = local.ids == dist.ids
    out["max_abs_diff"] = float(np.abs(np.asarray(local.embeddings) - np.asarray(dist.embeddings)).max())
    for mode in ("local", "ray"):
        out[f"{mode}_items_s"] = n / out[f"{mode}_s_{n}"]
        out[f"{mode}_marginal_items_s"] = (n - small) / max(1e-9, out[f"{mode}_s_{n}"] - out[f"{mode}_s_{small}"])
    out["ray_over_local_time"] = out[f"ray_s_{n}"] / out[f"local_s_{n}"]
    out["ray_over_local_marginal_rate"] = out["ray_marginal_items_s"] / out["local_marginal_items_s"]
    return out


class PeakMemory:
    """Peak RssAnon and VmRSS of this process, sampled every 20 ms from /proc."""

    def __init__(self) -> None:
        self.anon = self.rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> None:
        for line in open("/proc/self/status"):
            key, _, value = line.partition(":")
            if key == "RssAnon":
                self.anon = max(self.anon, int(value.split()[0]) * 1024)
            elif key == "VmRSS":
                self.rss = max(self.rss, int(value.split()[0]) * 1024)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._read()

    def __enter__(self) -> "PeakMemory":
        self._read()
        self.start_anon = self.anon
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._read()


def memory_child(mode: str, folder: Path, factory: str, cpus: int) -> None:
    """One measurement in a fresh process: prints a JSON line."""
    from engine.core.storage.index.faiss_index import build_index
    parts = sorted(folder.glob("part-*.npy"))
    queries = np.load(folder / "queries.npy")
    t = time.perf_counter()
    with PeakMemory() as peak:
        if mode == "memory":
            index = build_index(np.concatenate([np.load(p) for p in parts]), factory)
        else:
            import ray

            from engine.core.storage.index.ondisk import build_ivf_on_disk
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
            try:
                index = build_ivf_on_disk(parts, factory, folder / "ondisk", on_ray=True)
            finally:
                ray.shutdown()
    seconds = time.perf_counter() - t
    _, rows = index.search(queries, 10)
    np.save(folder / f"rows-{mode}.npy", rows)
    disk = sum(p.stat().st_size for p in (folder / "ondisk").iterdir()) if mode == "ondisk" else 0
    print(json.dumps({"mode": mode, "seconds": seconds, "start_anon": peak.start_anon, "peak_anon": peak.anon,
                      "peak_rss": peak.rss,
                      "disk_bytes": disk}))


def driver_memory(n: int, dim: int, factory: str, shards: int, cpus: int, tmp: Path) -> list[dict]:
    sys.path.insert(0, str(HERE))
    from bench_core import synthetic
    folder = tmp / "vectors"
    folder.mkdir()
    per = (n + shards - 1) // shards
    for s in range(shards):  # drawn shard by shard: this process never holds them all either
        x, q = synthetic(min(per, n - s * per), 100, dim, seed=s)
        np.save(folder / f"part-{s:03d}.npy", x)
        if s == 0:
            np.save(folder / "queries.npy", q)
        del x
    rows = []
    for mode in ("memory", "ondisk"):
        proc = subprocess.run([sys.executable, __file__, "--child", mode, "--folder", str(folder), "--factory",
                               factory, "--cpus", str(cpus)], capture_output=True, text=True, check=False)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode or not line:
            raise SystemExit(f"{mode} run failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(line[-1]))
    same = np.array_equal(np.load(folder / "rows-memory.npy"), np.load(folder / "rows-ondisk.npy"))
    for r in rows:
        r.update(vectors=n, dim=dim, factory=factory, shards=shards, same_results=bool(same))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=3000, help="items per build for the items/s comparison")
    ap.add_argument("--kind", choices=("text", "image"), default="text",
                    help="text: generated texts, MiniLM; image: generated PNGs, conse (EfficientNet-Lite0)")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--vectors", type=int, default=1_000_000, help="vectors for the driver-memory comparison")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--factory", default="IVF1024,Flat")
    ap.add_argument("--shards", type=int, default=8, help="shards the on-disk build fills and merges")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--skip-rates", action="store_true")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "ray_build.json")
    ap.add_argument("--child", choices=("memory", "ondisk"), help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return memory_child(a.child, a.folder, a.factory, a.cpus)
    from engine.display import format_table
    tmp = Path(tempfile.mkdtemp(prefix="ray-build-bench-"))
    result: dict = {"machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at start"}
    try:
        if not a.skip_rates:
            r = result["build"] = build_rates(a.items, tmp, a.cpus, a.kind)
            n, m = r["items"], r["small"]
            print(format_table([f"{a.kind} build", f"s ({m})", f"s ({n})", "items/s", "marginal items/s"], [
                [mode, f"{r[f'{mode}_s_{m}']:.1f}", f"{r[f'{mode}_s_{n}']:.1f}", f"{r[f'{mode}_items_s']:.0f}",
                 f"{r[f'{mode}_marginal_items_s']:.0f}"] for mode in ("local", "ray")]))
            print(f"Ray / local time at {n}: {r['ray_over_local_time']:.2f}×; Ray / local marginal rate: "
                  f"{r['ray_over_local_marginal_rate']:.2f}; same ids: {r['same_ids']}; "
                  f"max |Δembedding| {r['max_abs_diff']:.1e}\n")
        if not a.skip_memory:
            rows = result["driver_memory"] = driver_memory(a.vectors, a.dim, a.factory, a.shards, a.cpus, tmp)
            gib = 1024 ** 3
            print(format_table(["IVF build", "vectors", "seconds", "anon at start GiB", "peak anon GiB", "peak RSS GiB",
                                "disk GiB"], [
                [r["mode"], r["vectors"], f"{r['seconds']:.0f}", f"{r['start_anon'] / gib:.2f}",
                 f"{r['peak_anon'] / gib:.2f}",
                 f"{r['peak_rss'] / gib:.2f}", f"{r['disk_bytes'] / gib:.2f}"] for r in rows]))
            print(f"same top-10 for 100 queries: {rows[0]['same_results']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
