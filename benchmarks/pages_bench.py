"""Page images with a page retriever (ColQwen2, ColPali) against a dense collection of the same pages: build time,
disk and query latency of an image collection with and without its multi-vector index, and recall@10 of the
`multivector(…)` stage's default candidates against exact MaxSim over every page, with what `engine bench`
reports for it (page encoding, the stage, a `maxsim:` reranker over the dense top 20).

    python benchmarks/pages_bench.py [--pages 200] [--queries 30] [--colqwen DIR] [--clip DIR]

Without model folders both models are tiny random-weight ones (tests/fixtures/tiny_families.py: a 2-layer ColQwen2
with 16-d token vectors and at most 16 image tokens a page, a 2-layer CLIP with 16-d projections for the dense
vectors): the figures then measure the engine's path around the models (encoding calls, the index, the stage),
not a real model's forward pass, and recall is that of the candidates' approximation of MaxSim on random
vectors. Pages are generated (tests/fixtures/tiny_families.py `page_images`), queries are word strings of the
tiny models' vocabulary. Writes benchmarks/results/pages.json and prints the table.
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

WORDS = ("annual report river company map old town tables music chess budget flood rain train bridge invoice "
         "figure chart revenue page summary").split()


def queries(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 7)))) for _ in range(n)]


def disk(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def stage_recall(root: Path, qs: list[str]) -> dict:
    """recall@10 of `multivector("pages")` (its defaults) against exact MaxSim over every page's stored tokens,
    and the stage's and brute force's ms a query."""
    from engine.core.collection import Collection
    from engine.core.encoders.multivector import encode_tokens, model_name
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.multivector import MultiVector
    from engine.core.ranking.pipeline.run import run_pipeline
    from engine.core.storage.index.multivector import MultiVectorIndex
    index = MultiVectorIndex.load(next((root / "pages").glob("multivector*")))
    ids = list(Collection.open("pages", root).ids)  # the index's rows are the collection's
    ctx, stage = Context(root=root), MultiVector("pages", k=10)
    recalls, stage_ms, exact_ms = [], [], []
    for i, q in enumerate(qs):
        t = time.perf_counter()
        got = run_pipeline(stage, [Query(f"q{i}", q)], ctx)[f"q{i}"]
        stage_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        vectors = encode_tokens(model_name(index.meta["spec"]), [q], query=True)[0]
        scores = index.maxsim(vectors, range(index.meta["count"]))
        exact_ms.append((time.perf_counter() - t) * 1000)
        order = np.argsort(-scores, kind="stable")[:10]
        recalls.append(len({ids[j] for j in order} & set(got.ids)) / 10)
    return {"recall@10": float(np.mean(recalls)), "recall@10_min": float(np.min(recalls)),
            "stage_ms_p50": float(np.median(stage_ms)), "brute_force_ms_p50": float(np.median(exact_ms))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=3.0, help="Time each measurement takes at most (about).")
    ap.add_argument("--colqwen", type=Path, help="A page retriever's folder (ColQwen2/ColPali, *ForRetrieval).")
    ap.add_argument("--clip", type=Path, help="An image–text sentence-transformers model folder (dense vectors).")
    ap.add_argument("--out", default="pages.json", help="File name under benchmarks/results/.")
    args = ap.parse_args()
    from engine.core.bench import bench_collection
    from engine.core.collection import Collection
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.display import format_table
    from fixtures.tiny_families import build_tiny_clip, build_tiny_colqwen2, page_images
    tmp = Path(tempfile.mkdtemp(prefix="pages-bench-"))
    colqwen = args.colqwen or build_tiny_colqwen2(tmp / "colqwen2", words=" ".join(WORDS))
    clip = args.clip or build_tiny_clip(tmp / "clip")
    page_images(tmp / "pages", n=args.pages)
    qs = queries(args.queries)
    builds, sizes = {}, {}
    for name, extra in (("dense", {}), ("pages", {"multivector": f"multivector:{colqwen}"})):
        root = tmp / name
        t = time.perf_counter()
        Collection.build("pages", images=tmp / "pages", root=root, model=f"sbert:{clip}", **extra)
        builds[name], sizes[name] = time.perf_counter() - t, disk(root / "pages")
    late = bench_collection(Collection.open("pages", tmp / "pages"), qs, n=args.queries, batch=8,
                            seconds=args.seconds, rerank=RerankerSpec.parse(f"maxsim:{colqwen}"), rerank_depth=20)
    recall = stage_recall(tmp / "pages", qs)
    from engine.display import family_rows
    table = [["dense only", "build (s)", f"{builds['dense']:.1f}"], ["dense only", "disk", f"{sizes['dense']:,} B"],
             ["+ multivector", "build (s)", f"{builds['pages']:.1f}"],
             ["+ multivector", "disk", f"{sizes['pages']:,} B"],
             ["both", "encode text query (single) p50 ms", f"{late['encode_single']['p50_ms']:.2f}"],
             ["both", "dense search (single) p50 ms", f"{late['search_single']['p50_ms']:.2f}"]]
    table += [["+ multivector", f"{label} p50 ms".replace(str(colqwen), "COLQWEN"), f"{s['p50_ms']:.2f}"]
              for label, s in family_rows(late.get("families") or {})]
    table += [["+ multivector", "multivector stage (defaults) recall@10 vs exact MaxSim", f"{recall['recall@10']:.3f}"],
              ["+ multivector", "brute-force MaxSim (every page, query encoding included) p50 ms",
               f"{recall['brute_force_ms_p50']:.2f}"]]
    print(format_table(["collection", "measurement", "value"], table, markdown=True, left=2))
    out = HERE / "results" / args.out
    out.parent.mkdir(exist_ok=True)
    text = json.dumps({"pages": args.pages, "queries": args.queries,
                       "models": {"colqwen": str(args.colqwen or "tiny random ColQwen2"),
                                  "clip": str(args.clip or "tiny random CLIP")},
                       "build_seconds": builds, "disk_bytes": sizes, "recall": recall, "bench": late}, indent=2)
    out.write_text(text.replace(str(tmp), "TMP"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
