"""How onnxruntime's and FAISS's thread pools share the cores of one query: the settings `engine serve` uses
are chosen from this table, not assumed.

For each onnxruntime setting (its default: a thread per core, spinning; a thread per core, no spinning;
one thread) and each FAISS thread
count (1 / all cores), one text is encoded and then searched over an exact index (20k and 100k × 384), as
the service answers a query; batches of 1, 8 and 32 queries (what 1, 8 and 32 clients form). Medians of --repeat alternated rounds, in ms.

    python benchmarks/serve_threads.py [--repeat 10] [--sizes 20000,100000] [--batches 1,8,32]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from serve_load import queries  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--sizes", default="20000,100000")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "serve_threads.json")
    args = ap.parse_args()
    import faiss

    from engine.core.encoders.onnx_text import ORT_SPIN_ENV, ORT_THREADS_ENV, text_encoder
    from engine.display import format_table
    from engine.core.storage.index.faiss_index import search_index
    from engine.progress import set_quiet
    set_quiet(True)
    all_threads = faiss.omp_get_max_threads()
    encoders = {}
    for threads, spin in (("0", "1"), ("0", "0"), ("1", "0")):  # onnxruntime's default, no spinning, 1 thread
        os.environ[ORT_THREADS_ENV], os.environ[ORT_SPIN_ENV] = threads, spin
        encoders[(threads, spin)] = text_encoder("all-MiniLM-L6-v2")
    texts = queries(64)
    rng = np.random.default_rng(0)
    indexes = {}
    for n in (int(x) for x in args.sizes.split(",")):
        x = rng.normal(size=(n, 384)).astype(np.float32)
        faiss.normalize_L2(x)
        indexes[n] = faiss.IndexFlatIP(384)
        indexes[n].add(x)
    batches = [int(b) for b in args.batches.split(",")]
    cases = list(itertools.product(encoders, (1, all_threads), indexes, batches))
    times: dict = {c: ([], []) for c in cases}
    import engine.core.storage.index.faiss_index as fi
    fi.SINGLE_THREAD_WORK = 0  # this benchmark sets the thread count itself
    for r in range(args.repeat):
        print(f"round {r + 1}/{args.repeat} (load {os.getloadavg()[0]:.1f})", flush=True)
        for case in cases:
            ort_key, fthreads, n, b = case
            enc = encoders[ort_key]
            t0 = time.perf_counter()
            q = enc.encode_texts(texts[:b], batch_size=b)
            t1 = time.perf_counter()
            faiss.omp_set_num_threads(fthreads)
            fi._FAISS_BLAS["threads"] = fthreads
            search_index(indexes[n], q, 10)
            t2 = time.perf_counter()
            times[case][0].append((t1 - t0) * 1e3)
            times[case][1].append((t2 - t1) * 1e3)
    load = os.getloadavg()
    rows, result = [], {"repeat": args.repeat, "cores": os.cpu_count(), "load_after": load, "cases": []}
    for case in cases:
        (threads, spin), fthreads, n, b = case
        enc_ms, search_ms = (statistics.median(v) for v in times[case])
        result["cases"].append({"ort_threads": threads, "ort_spin": spin, "faiss_threads": fthreads, "n": n,
                                "batch": b, "encode_ms": enc_ms, "search_ms": search_ms})
        rows.append([threads, spin, str(fthreads), f"{n:,}", str(b), f"{enc_ms:.2f}", f"{search_ms:.2f}",
                     f"{enc_ms + search_ms:.2f}"])
    print(f"encode + exact search, medians of {args.repeat} (load {load[0]:.1f} on {os.cpu_count()} cores)\n")
    print(format_table(["ort threads", "ort spin", "faiss threads", "n", "batch", "encode ms", "search ms",
                        "total ms"], rows, markdown=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
