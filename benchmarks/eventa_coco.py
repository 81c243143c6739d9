"""The EVENTA pipeline on real photos: coco-mini as a news database.

One pseudo-article per COCO image made of four of its five captions; the fifth caption is the query.
Prints R@1/R@5/R@10, MRR and Overall for each stage alone and fused, for mean / max / full pooling,
and writes benchmarks/results/eventa_coco.json (and a Markdown table beside it).

    python benchmarks/eventa_coco.py [--coco ../shared/data/coco-mini] [--work /tmp/eventa-coco] [--model conse]
                                     [--poolings mean,max,full] [--sweep 0,0.5,0.9,1]
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coco", type=Path, default=ROOT.parent / "shared" / "data" / "coco-mini")
    ap.add_argument("--work", type=Path, default=Path("/tmp/eventa-coco"), help="Scratch folder for the index.")
    ap.add_argument("--model", default=None, help="Image–text model spec (default conse).")
    ap.add_argument("--poolings", default="mean,max,full")
    ap.add_argument("--article-weight", type=float, default=None, help="Default: the pipeline's.")
    ap.add_argument("--sweep", default="0,0.5,0.9,1", help="Other article weights to score the fused stage at.")
    ap.add_argument("--out", type=Path, default=RESULTS / "eventa_coco.json")
    args = ap.parse_args(argv)

    from engine.errors import EngineError
    from engine.io.atomic import atomic_open, write_json
    from engine.progress import set_quiet
    from engine.tasks.eventa.build import BuildOptions, build_eventa
    from engine.tasks.eventa.evaluate import eval_eventa, format_stage_table
    from engine.tasks.eventa.fixture import coco_as_eventa
    from engine.tasks.eventa.rank import RankParams
    set_quiet(True)
    if not args.coco.is_dir():
        print(f"{args.coco} not present: nothing to measure", file=sys.stderr)
        return 1
    try:
        paths = coco_as_eventa(args.coco, args.work / "data")
        t0 = time.perf_counter()
        build_eventa(paths.database, paths.images, "coco", args.work / "indexes",
                     BuildOptions(model=args.model, force=True))
        build_s = time.perf_counter() - t0
        params = RankParams() if args.article_weight is None else RankParams(article_weight=args.article_weight)
        t0 = time.perf_counter()
        table = eval_eventa(paths.labeled, "coco", args.work / "indexes", params, args.poolings.split(","),
                            sweep=[float(w) for w in args.sweep.split(",") if w.strip()])
        eval_s = time.perf_counter() - t0
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_stage_table(table))
    write_json(args.out, {"data": str(args.coco), "queries": paths.n_articles, "model": args.model or "conse",
                          "params": asdict(params), "build_seconds": round(build_s, 1),
                          "eval_seconds": round(eval_s, 1), "stages": table})
    with atomic_open(args.out.with_suffix(".md")) as fh:
        fh.write(format_stage_table(table, markdown=True) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
