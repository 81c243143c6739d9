"""What an `embed:` reranker over texts costs as a whole process: `embed:sbert:all-MiniLM-L6-v2` on its ONNX text
side (A) against the same reranker on sentence-transformers and torch (B: `ENGINE_ONNX=0`, how it ran before),
10 queries × depth 30, alternated A B A B and paired, medians of the paired CPU ratios.

    python benchmarks/rerank_embed_floor.py [--runs 5] [--queries 10] [--depth 30] [--threads 1]

Both processes score through `score_batch` as the rerank stage does and write their top 10 per query; the
table says whether they agree. The ONNX export is made once before the timed runs (as `engine models
--prepare` or the first query would). CPU seconds are the children's own user + system time (`os.wait4`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from rerank_floor import timed, top10, workload  # noqa: E402

SPEC = "embed:sbert:all-MiniLM-L6-v2"


def child(args) -> None:
    import time
    if args.threads:
        os.environ.setdefault("ENGINE_ORT_THREADS", str(args.threads))
    work = json.loads(Path(args.work).read_text())
    from engine.core.ranking.rerankers.spec import load_reranker
    t0 = time.process_time()
    reranker = load_reranker(SPEC)
    if reranker.info.get("runtime", "torch") == "torch":
        import torch
        torch.set_num_threads(args.threads)
    scores = reranker.score_batch([(q, d, "text") for q, d in zip(work["queries"], work["docs"])])
    Path(args.out).write_text(json.dumps({"top10": top10(scores), "scores": [s.tolist() for s in scores],
                                          "runtime": reranker.info.get("runtime", "torch"),
                                          "in_process_cpu_s": time.process_time() - t0}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--queries", type=int, default=10)
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    from engine.core.encoders.onnx_text import text_encoder
    if text_encoder("all-MiniLM-L6-v2") is None:
        raise SystemExit("onnxruntime is not installed (extra `fast`): nothing to compare")
    tmp = Path(tempfile.mkdtemp(prefix="rerank-embed-"))
    work_file = tmp / "work.json"
    work_file.write_text(json.dumps(workload(args.queries, args.depth)))
    cmd = lambda out: [sys.executable, __file__, "--child", "--work", str(work_file), "--out", str(out),  # noqa: E731
                       "--threads", str(args.threads)]
    a, b = [], []
    for n in range(args.runs + 1):
        for mode in (("onnx", "torch") if n % 2 == 0 else ("torch", "onnx")):
            if mode == "torch":
                os.environ["ENGINE_ONNX"] = "0"
            t = timed(cmd(tmp / f"{mode}.json"))
            os.environ.pop("ENGINE_ONNX", None)
            if n:
                (a if mode == "onnx" else b).append(t)
    ra, rb = (json.loads((tmp / f"{m}.json").read_text()) for m in ("onnx", "torch"))
    diff = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(ra["scores"], rb["scores"]))
    ratios = [x["cpu_s"] / y["cpu_s"] for x, y in zip(a, b)]
    row = {"spec": SPEC, "queries": args.queries, "depth": args.depth, "runs": args.runs,
           "runtimes": [ra["runtime"], rb["runtime"]],
           "onnx_cpu_s": statistics.median(x["cpu_s"] for x in a), "torch_cpu_s": statistics.median(x["cpu_s"] for x in b),
           "onnx_wall_s": statistics.median(x["wall_s"] for x in a),
           "torch_wall_s": statistics.median(x["wall_s"] for x in b),
           "cpu_ratio": statistics.median(ratios), "cpu_ratio_min_max": [min(ratios), max(ratios)],
           "same_top10": ra["top10"] == rb["top10"], "max_abs_diff": diff}
    load = os.getloadavg()
    print("| reranker | CPU s ONNX | CPU s torch (before) | ONNX / torch CPU (median of paired; min–max) | wall s ONNX "
          "| torch | same top 10 | max |Δ| |\n|---|---|---|---|---|---|---|---|")
    print(f"| {SPEC} | {row['onnx_cpu_s']:.2f} | {row['torch_cpu_s']:.2f} | {row['cpu_ratio']:.3f} "
          f"({min(ratios):.3f}–{max(ratios):.3f}) | {row['onnx_wall_s']:.2f} | {row['torch_wall_s']:.2f} | "
          f"{row['same_top10']} | {diff:.1e} |")
    print(f"whole processes, {args.runs} alternated pairs after one warm-up pair, {args.threads} thread(s), "
          f"{args.queries} queries × depth {args.depth}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    out = HERE / "results" / "rerank_embed_floor.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({**row, "threads": args.threads, "loadavg": load}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
