"""What a raised rerank depth costs with the kept pair scores: experiment 1 reranks each query's top 20, experiment
2 its top 30 with the same stage cache folder (so 20 of the 30 pairs per query are kept), against experiment 2
without any cache. The rerank stage's own seconds (`Context.timings`), medians of repeats, each repeat with a
fresh cache folder.

    python benchmarks/rerank_pair_cache.py [--queries 30] [--docs 500] [--repeats 3]

The cross-encoder is MiniLM-L6-sized with random weights (`rerank_cost.minilm_sized_cross_encoder`: latency does
not depend on the weights, nothing is downloaded); the collection is random text under the packaged sentence
model. CPU only here.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def stage_run(root: Path, text: str, queries, cache: Path | None):
    """(seconds of the rerank stage, its counts) of one pipeline run."""
    from engine.core.ranking.pipeline import Context
    from engine.core.ranking.pipeline.cache import StageCache
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.run import run_pipeline
    ctx = Context(root=root, cache=StageCache(cache) if cache is not None else None)
    stage = parse_pipeline(text)
    run_pipeline(stage, queries, ctx)
    rerank = stage.second
    return sum(ctx.timings[str(rerank)]), ctx.counts.get(id(rerank), {})


def main() -> None:
    from rerank_cost import WORDS, minilm_sized_cross_encoder

    from engine.core.collection import Collection
    from engine.core.encoders.device import set_device
    from engine.core.ranking.pipeline import Query
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--docs", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    set_device("cpu")
    rng = np.random.default_rng(0)
    tmp = Path(tempfile.mkdtemp(prefix="rerank-pairs-"))
    model = minilm_sized_cross_encoder(tmp / "ce")
    src = tmp / "docs.tsv"
    src.write_text("id\ttext\n" + "".join(f"d{i}\t{' '.join(rng.choice(WORDS, 40))}\n" for i in range(args.docs)))
    Collection.build("docs", texts=src, root=tmp / "idx")
    queries = [Query(f"q{n}", " ".join(rng.choice(WORDS, 6))) for n in range(args.queries)]
    text = 'retrieve("docs", mode="dense", k=30) >> rerank("cross:' + str(model) + '", depth={d})'
    stage_run(tmp / "idx", text.format(d=5), queries[:2], None)   # warm: the model and the query encoder loaded
    first, second, uncached, counts = [], [], [], {}
    for r in range(args.repeats):
        cache = tmp / f"cache{r}"
        t, counts["depth 20"] = stage_run(tmp / "idx", text.format(d=20), queries, cache)
        first.append(t)
        t, counts["depth 30, cached"] = stage_run(tmp / "idx", text.format(d=30), queries, cache)
        second.append(t)
        t, counts["depth 30, no cache"] = stage_run(tmp / "idx", text.format(d=30), queries, None)
        uncached.append(t)
    med = statistics.median
    rows = [("depth 20 (first experiment)", first, counts["depth 20"]),
            ("depth 30, kept scores (second experiment)", second, counts["depth 30, cached"]),
            ("depth 30, no cache", uncached, counts["depth 30, no cache"])]
    print("| rerank stage | s (median) | pairs scored | pairs kept |\n|---|---|---|---|")
    for name, ts, c in rows:
        print(f"| {name} | {med(ts):.2f} | {c.get('pairs_scored', 0)} | {c.get('pairs_cached', 0)} |")
    ratio = med(second) / med(first)
    print(f"second / first experiment: {ratio:.2f}; second / uncached depth 30: {med(second) / med(uncached):.2f}")
    load = os.getloadavg()
    print(f"{args.queries} queries over {args.docs} docs, {args.repeats} repeats, CPU; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    out = HERE / "results" / "rerank_pair_cache.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"queries": args.queries, "docs": args.docs, "repeats": args.repeats,
                               "seconds": {"depth20": first, "depth30_kept": second, "depth30_uncached": uncached},
                               "counts": counts, "second_over_first": ratio,
                               "second_over_uncached": med(second) / med(uncached), "loadavg": load}, indent=2))
    print(f"wrote {out}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
