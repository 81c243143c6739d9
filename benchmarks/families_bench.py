"""What `engine bench` reports for each model family, on generated data: a text collection (MiniLM dense) carrying
a learned sparse and a multi-vector index, timed with a `maxsim:` reranker, and an image collection of an
image–text sentence-transformers model, timed with its images.

    python benchmarks/families_bench.py [--docs 1000] [--images 64] [--clip DIR] [--splade DIR] [--colbert DIR]

Without model folders the families' models are tiny random-weight ones (tests/fixtures/tiny_families.py: a
2-layer CLIP with 16-d projections, a 2-layer SPLADE, a 2-layer ColBERT with a 128-d head): the figures then
measure the engine's path around a model (encoding calls, the index's search, the stage), not a real model's
forward pass. Documents are 8–24 words of the MiniLM vocabulary by a Zipf law (benchmarks/multivector.py's
corpus); images are random RGB of 64–256 pixels a side. Writes benchmarks/results/families.json and prints the
table.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))


def images(folder: Path, n: int) -> Path:
    from PIL import Image
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        h, w = (int(x) for x in rng.integers(64, 257, size=2))
        Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(folder / f"i{i:05d}.png")
    return folder


def rows(result: dict) -> list[list[str]]:
    from engine.display import family_rows
    out = []
    for key, label in (("encode_single", "encode query (single)"), ("search_single", "dense search (single)")):
        s = result[key]
        out.append([result["collection"], label, f"{s['p50_ms']:.2f}", f"{s['p95_ms']:.2f}", f"{s['qps']:.1f}"])
    for label, s in family_rows(result.get("families") or {}):
        out.append([result["collection"], label, f"{s['p50_ms']:.2f}", f"{s['p95_ms']:.2f}", f"{s['qps']:.1f}"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=3.0, help="Time each measurement takes at most (about).")
    ap.add_argument("--clip", type=Path, help="An image–text sentence-transformers model folder.")
    ap.add_argument("--splade", type=Path, help="A SparseEncoder folder.")
    ap.add_argument("--colbert", type=Path, help="A MultiVectorEncoder folder.")
    ap.add_argument("--out", default="families.json", help="File name under benchmarks/results/.")
    args = ap.parse_args()
    from multivector import corpus

    from engine.core.bench import bench_collection
    from engine.core.collection import Collection
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.display import format_table
    from fixtures.tiny_families import build_tiny_clip, build_tiny_colbert, build_tiny_splade
    tmp = Path(tempfile.mkdtemp(prefix="families-bench-"))
    clip = args.clip or build_tiny_clip(tmp / "clip")
    splade = args.splade or build_tiny_splade(tmp / "splade")
    colbert = args.colbert or build_tiny_colbert(tmp / "colbert")
    docs, queries = corpus(args.docs, args.queries)
    (tmp / "docs.csv").write_text("id,text\n" + "".join(f"d{i},{t}\n" for i, t in enumerate(docs)))
    (tmp / "queries.tsv").write_text("".join(f"q{i}\t{t}\n" for i, t in enumerate(queries)))
    root = tmp / "idx"
    builds = {}
    t = time.perf_counter()
    Collection.build("docs", texts=tmp / "docs.csv", root=root, sparse=f"sparse:{splade}",
                     multivector=f"multivector:{colbert}")
    builds["docs (MiniLM dense + sparse + multivector)"] = time.perf_counter() - t
    t = time.perf_counter()
    Collection.build("photos", images=images(tmp / "photos", args.images), root=root, model=f"sbert:{clip}")
    builds["photos (sbert image–text)"] = time.perf_counter() - t
    results = [bench_collection(Collection.open("docs", root), queries, n=args.queries, batch=16,
                                seconds=args.seconds, rerank=RerankerSpec.parse(f"maxsim:{colbert}"),
                                rerank_depth=20),
               bench_collection(Collection.open("photos", root), None, n=args.queries, batch=16,
                                seconds=args.seconds)]
    table = [r for res in results for r in rows(res)]
    print(format_table(["collection", "measurement", "p50 ms", "p95 ms", "QPS"], table, markdown=True, left=2))
    print("\n" + "\n".join(f"build {k}: {v:.1f} s" for k, v in builds.items()))
    out = HERE / "results" / args.out
    out.parent.mkdir(exist_ok=True)
    text = json.dumps({"docs": args.docs, "images": args.images, "queries": args.queries,
                       "models": {"clip": str(args.clip or "tiny random CLIP"),
                                  "splade": str(args.splade or "tiny random SPLADE"),
                                  "colbert": str(args.colbert or "tiny random ColBERT")},
                       "build_seconds": builds, "bench": results}, indent=2)
    out.write_text(text.replace(str(tmp), "TMP"))  # the run's temporary folder, named alike in every run
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
