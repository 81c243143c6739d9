"""Core benchmarks, measured side by side in one run (ratios are what to quote; absolute times are noisy).

1. exact search through the engine (Collection: FAISS + id/metadata mapping) vs a raw
   faiss.IndexFlatIP on the same vectors, single query and batch 64;
2. the build pipeline's images/s (decode threads + model) vs the raw model forward on
   pre-decoded tensors (same model, same batch size);
3. HNSW32 and IVF-PQ recall@10 and QPS vs exact search, at 100k and 1M vectors.

    python benchmarks/bench_core.py [--sizes 100000,1000000] [--dim 512] [--images DIR]
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def synthetic(n: int, nq: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Clustered unit vectors with low intrinsic dimension (like real embeddings), queries from the same law."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((64, dim)).astype(np.float32)
    centers = rng.standard_normal((1000, 64)).astype(np.float32)

    def draw(m: int) -> np.ndarray:
        out = np.empty((m, dim), np.float32)
        for s in range(0, m, 100_000):
            e = min(m, s + 100_000)
            z = centers[rng.integers(0, len(centers), e - s)] + 0.6 * rng.standard_normal((e - s, 64)).astype(np.float32)
            x = z @ basis + 0.3 * rng.standard_normal((e - s, dim)).astype(np.float32)
            out[s:e] = x / np.linalg.norm(x, axis=1, keepdims=True)
        return out

    return draw(n), draw(nq)


def timed(fn, repeat: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat


def bench_engine_vs_faiss(n: int, dim: int, root: Path) -> list[dict]:
    import faiss
    from engine.core.collection import Collection
    xb, xq = synthetic(n, 1000, dim)
    col = Collection.from_vectors("bench", [f"doc{i}" for i in range(n)], xb, "sbert:all-MiniLM-L6-v2", "text", root=root,
                       force=True)
    raw = faiss.IndexFlatIP(dim)
    raw.add(xb)
    rows = []
    for label, batch, reps in (("single query", 1, 200), ("batch 64", 64, 10)):
        q = xq[:batch]
        t_raw = timed(lambda: raw.search(q, 10), reps)
        t_eng = timed(lambda: col.hits(*col.search_vectors(q, 10)), reps)
        same = np.array_equal(raw.search(q, 10)[1], col.search_vectors(q, 10)[1])
        rows.append({"case": f"exact {n // 1000}k×{dim}, {label}", "raw_faiss_ms": t_raw * 1e3,
                     "engine_ms": t_eng * 1e3, "engine_over_raw": t_eng / t_raw, "same_results": bool(same)})
    return rows


def bench_build_pipeline(image_dir: Path | None, root: Path, batch: int = 32) -> dict:
    import torch
    from engine.core.collection import Collection
    from engine.core.encoders.registry import load_encoder
    from engine.core.images import find_images, load_image
    if image_dir is None:
        from engine.core.demo import demo_photos
        image_dir = root / "photos"
        image_dir.mkdir(parents=True, exist_ok=True)
        photos = demo_photos()
        for i in range(96):
            shutil.copy(photos[i % len(photos)], image_dir / f"{i:03d}{photos[i % len(photos)].suffix}")
    paths = find_images(image_dir)
    enc = load_encoder("conse")
    tensors = [enc.preprocess(load_image(p)) for p in paths]
    stacked = [torch.stack(tensors[i:i + batch]) for i in range(0, len(tensors), batch)]
    enc.encode_image_batch(stacked[0])  # warm-up
    t = time.perf_counter()
    for b in stacked:
        enc.encode_image_batch(b)
    raw_s = time.perf_counter() - t
    t = time.perf_counter()
    Collection.build("pipeline", images=image_dir, root=root, batch_size=batch, workers=2, force=True)
    build_s = time.perf_counter() - t
    return {"images": len(paths), "batch": batch, "raw_forward_images_per_s": len(paths) / raw_s,
            "build_images_per_s": len(paths) / build_s, "build_over_raw": (len(paths) / build_s) / (len(paths) / raw_s)}


def bench_ann(n: int, dim: int, factories: list[str]) -> list[dict]:
    import faiss
    from engine.core.storage.index.faiss_index import build_index
    xb, xq = synthetic(n, 1000, dim, seed=1)
    exact = faiss.IndexFlatIP(dim)
    exact.add(xb)
    t_exact = timed(lambda: exact.search(xq, 10), 1)
    _, truth = exact.search(xq, 10)
    rows = [{"n": n, "index": "Flat (exact)", "build_s": 0.0, "recall@10": 1.0, "qps": len(xq) / t_exact,
             "speedup_vs_exact": 1.0, "bytes": xb.nbytes}]
    for factory in factories:
        t = time.perf_counter()
        index = build_index(xb, factory)
        build_s = time.perf_counter() - t
        t_q = timed(lambda: index.search(xq, 10), 1)
        _, got = index.search(xq, 10)
        recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, got)]))
        rows.append({"n": n, "index": factory, "build_s": build_s, "recall@10": recall, "qps": len(xq) / t_q,
                     "speedup_vs_exact": t_exact / t_q, "bytes": int(faiss.serialize_index(index).nbytes)})

    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000", help="collection sizes for the ANN comparison")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--images", type=Path, default=None, help="image folder for the pipeline test "
                    "(default: ../shared/data/coco-mini/images if present, else bundled photos)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_core.json")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table
    console = Console()
    images = args.images
    coco = HERE.parent.parent / "shared" / "data" / "coco-mini" / "images"
    if images is None and coco.is_dir():
        images = coco
    result: dict = {"dim": args.dim}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        result["engine_vs_faiss"] = bench_engine_vs_faiss(100_000, args.dim, root)
        result["pipeline"] = bench_build_pipeline(images, root)
    factories = {100_000: ["HNSW32", "IVF1024,PQ64"], 1_000_000: ["HNSW32", "IVF4096,PQ64"]}
    result["ann"] = []
    for n in (int(s) for s in args.sizes.split(",")):
        result["ann"] += bench_ann(n, args.dim, factories.get(n, ["HNSW32", f"IVF{max(64, int(4 * n ** 0.5))},PQ64"]))

    t = Table(title="exact search: engine vs raw faiss.IndexFlatIP (same vectors)")
    for c in ("case", "raw ms", "engine ms", "engine/raw", "same top-10"):
        t.add_column(c)
    for r in result["engine_vs_faiss"]:
        t.add_row(r["case"], f"{r['raw_faiss_ms']:.3f}", f"{r['engine_ms']:.3f}", f"{r['engine_over_raw']:.2f}",
                  str(r["same_results"]))
    console.print(t)
    p = result["pipeline"]
    t = Table(title=f"image build pipeline vs raw forward (conse, batch {p['batch']}, {p['images']} images)")
    for c in ("raw forward img/s", "engine build img/s", "build/raw"):
        t.add_column(c)
    t.add_row(f"{p['raw_forward_images_per_s']:.1f}", f"{p['build_images_per_s']:.1f}", f"{p['build_over_raw']:.2f}")
    console.print(t)
    t = Table(title=f"approximate indexes vs exact ({args.dim}-d, 1000 queries, k=10)")
    for c in ("n", "index", "build s", "recall@10", "QPS", "× exact QPS", "MiB"):
        t.add_column(c)
    for r in result["ann"]:
        t.add_row(f"{r['n']:,}", r["index"], f"{r['build_s']:.1f}", f"{r['recall@10']:.3f}", f"{r['qps']:.0f}",
                  f"{r['speedup_vs_exact']:.1f}", f"{r['bytes'] / 2**20:.0f}")
    console.print(t)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
