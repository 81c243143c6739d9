"""What `cross:` costs on onnxruntime against `CrossEncoder.predict(pairs, batch_size=32)` on torch, the same
pairs, in one process, alternated per query and paired (CPU seconds of the process, every thread), medians.

    python benchmarks/rerank_cross_floor.py [--queries 12] [--depth 100] [--threads 1]

The cross-encoder is MiniLM-L6-sized (6 layers, 384 wide; random weights, the MiniLM tokenizer: cost does not
depend on the weights), documents of 20–40 words. The ONNX export is made once before timing (into a temporary
engine cache). Both orders are compared per query: every two candidates torch
tells apart by more than twice the largest difference between the two runtimes must come in the same order
(random weights give scores close together; closer ones are ties at float precision).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=12)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rerank-cross-"))
    os.environ["ENGINE_CACHE"] = str(tmp / "cache")
    os.environ["ENGINE_ORT_THREADS"] = str(args.threads)
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import CrossEncoder

    from engine.core.encoders.device import set_device
    from engine.core.ranking.rerankers.spec import load_reranker
    from rerank_cost import WORDS, minilm_sized_cross_encoder
    torch.set_num_threads(args.threads)
    set_device("cpu")
    folder = minilm_sized_cross_encoder(tmp / "ce")
    rng = np.random.default_rng(0)
    queries = [" ".join(rng.choice(WORDS, 6)) for _ in range(args.queries + 1)]
    docs = [[" ".join(rng.choice(WORDS, int(rng.integers(20, 41)))) for _ in range(args.depth)]
            for _ in queries]
    reranker = load_reranker(f"cross:{folder}")
    assert reranker.info["runtime"] == "onnx", reranker.info
    ce = CrossEncoder(str(folder), device="cpu")
    times: dict[str, list[float]] = {"onnx": [], "torch": []}
    same, spread, diff = [], [], 0.0
    for n, (q, ds) in enumerate(zip(queries, docs)):  # the first query warms both up
        got = {}
        for which in (("onnx", "torch") if n % 2 == 0 else ("torch", "onnx")):
            t0 = time.process_time()
            if which == "onnx":
                got[which] = reranker.score(q, ds)
            else:
                got[which] = np.asarray(ce.predict([(q, d) for d in ds], batch_size=32, show_progress_bar=False,
                                                   activation_fn=torch.nn.Identity()), dtype=np.float64)
            if n:
                times[which].append(time.process_time() - t0)
        a, b = got["onnx"], got["torch"]
        gap = float(np.abs(a - b).max())
        apart = np.abs(b[:, None] - b[None, :]) > 2 * gap  # pairs torch tells apart by more than the difference
        same.append(bool((np.sign(a[:, None] - a[None, :]) == np.sign(b[:, None] - b[None, :]))[apart].all()))
        spread.append(float(np.ptp(b)))
        diff = max(diff, gap)
    ratios = [a / b for a, b in zip(times["onnx"], times["torch"])]
    row = {"model": "MiniLM-L6-sized cross-encoder (random weights)", "queries": args.queries, "depth": args.depth,
           "threads": args.threads, "onnx_cpu_s_per_query": statistics.median(times["onnx"]),
           "torch_cpu_s_per_query": statistics.median(times["torch"]), "cpu_ratio": statistics.median(ratios),
           "cpu_ratio_min_max": [min(ratios), max(ratios)], "same_order_every_query": all(same),
           "max_abs_diff": diff, "median_score_spread": statistics.median(spread), "loadavg": os.getloadavg()}
    print("| model | CPU s / query ONNX | CPU s / query CrossEncoder.predict | ONNX ÷ predict (median of paired; "
          "min–max) | same order (beyond ties) | max |Δ| | score spread |\n|---|---|---|---|---|---|---|")
    print(f"| {row['model']} | {row['onnx_cpu_s_per_query']:.3f} | {row['torch_cpu_s_per_query']:.3f} | "
          f"{row['cpu_ratio']:.3f} ({min(ratios):.3f}–{max(ratios):.3f}) | {all(same)} | {diff:.1e} | {row['median_score_spread']:.1e} |")
    print(f"{args.queries} queries × {args.depth} candidates, {args.threads} thread(s); load average "
          f"{row['loadavg'][0]:.2f}")
    out = HERE / "results" / "rerank_cross_floor.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(row, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
