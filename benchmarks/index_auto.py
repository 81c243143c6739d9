"""`--index auto` at real size: what it measures, what it picks, and how that compares with exact search.

Two collections, each searched with the queries users send:

  synthetic   clustered unit vectors (bench_core.synthetic), queries drawn from the same law (held out);
  text→image  image vectors built the way the offline encoder (conse) builds them: each "image" is the
              probability-weighted mean of the MiniLM vectors of 20 ImageNet classes (a main class and its
              nearest neighbours, softmax at temperature 2); queries are the 400 real COCO captions of
              coco-mini, embedded by MiniLM. It also shows the known failure: an operating point tuned on
              image-vector queries, then searched with text.

Goal at 1M: ≥ 20× exact QPS at recall@10 ≥ 0.95.

    python benchmarks/index_auto.py [--n 1000000] [--dim 512] [--cases synthetic,text-image]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_core import synthetic


def conse_like(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(n image vectors shaped like conse's, COCO caption vectors)."""
    from engine.core.encoders.registry import load_encoder
    from engine.core.encoders.base import l2_normalize
    from engine.core.encoders.conse import class_embeddings
    text = load_encoder("sbert:all-MiniLM-L6-v2")
    classes = class_embeddings(text)
    near = np.argsort(-(classes @ classes.T), axis=1)[:, :60]
    rng = np.random.default_rng(seed)
    out = np.empty((n, classes.shape[1]), np.float32)
    for lo in range(0, n, 100_000):
        m = min(n, lo + 100_000) - lo
        main = rng.integers(0, len(classes), m)
        picks = np.take_along_axis(near[main], np.argsort(rng.random((m, 60)), axis=1)[:, :19], 1)
        members = np.concatenate([main[:, None], picks], axis=1)
        logits = rng.normal(0, 2.0, (m, 20))
        logits[:, 0] += 4.0
        p = np.exp(logits / 2.0)
        p /= p.sum(axis=1, keepdims=True)
        out[lo:lo + m] = l2_normalize(np.einsum("mk,mkd->md", p.astype(np.float32), classes[members]))
    coco = HERE.parent.parent / "shared" / "data" / "coco-mini" / "captions.json"
    caps = [a["caption"] for a in json.loads(coco.read_text())["annotations"]] if coco.is_file() else \
        __import__("engine.core.storage.builder.from_source", fromlist=["x"]).generic_captions(400)
    return out, text.encode_texts(caps)


def run_case(label: str, vectors: np.ndarray, queries: np.ndarray, target: float, own: np.ndarray | None) -> dict:
    from engine.core.storage.index.auto import choose
    from engine.core.storage.builder.from_source import show_choice
    from engine.progress import console
    t = time.perf_counter()
    index, choice = choose(vectors, queries, target, None, label)
    m = choice.manifest()
    m["seconds"] = time.perf_counter() - t
    show_choice(m)
    if own is not None:  # the failure --index auto avoids: tuned on image-vector queries, searched with text
        from engine.core.storage.index.auto import _recall, _truth
        _, c2 = choose(vectors, own, target, None, "image-vector queries")
        from engine.core.storage.index.faiss_index import apply_search_params, build_index
        idx2 = index if c2.factory == choice.factory else build_index(vectors, c2.factory)
        apply_search_params(idx2, c2.params)
        got = idx2.search(queries, 10)[1]
        m["tuned_on_image_queries"] = {"factory": c2.factory, "params": c2.params,
                                       "recall_on_image_queries": c2.recall,
                                       "recall_on_text_queries": _recall(got, _truth(vectors, queries))}
        console.print(f"tuned on image-vector queries: {c2.factory} {c2.params}: recall@10 {c2.recall:.3f} on "
                      f"them, {m['tuned_on_image_queries']['recall_on_text_queries']:.3f} on text queries")
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--recall", type=float, default=0.95)
    ap.add_argument("--cases", default="synthetic,text-image")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "index_auto.json")
    args = ap.parse_args()
    from engine.display import format_table
    result: dict = {"n": args.n, "cores": os.cpu_count(), "load_at_start": os.getloadavg(), "cases": {}}
    for case in args.cases.split(","):
        if case == "synthetic":
            x, q = synthetic(args.n, 500, args.dim, seed=7)
            result["cases"][case] = run_case("500 held-out synthetic queries", x, q, args.recall, None)
        elif case == "text-image":
            x, q = conse_like(args.n)
            rng = np.random.default_rng(1)
            own = x[rng.choice(len(x), 400, replace=False)]
            result["cases"][case] = run_case(f"{len(q)} COCO captions (text)", x, q, args.recall, own)
        del x
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=float))  # each case kept as it finishes
    rows = [[c, f"{args.n:,}", r["factory"], ", ".join(f"{k}={v:g}" for k, v in r["params"].items()) or "-",
             f"{r['recall@10']:.3f}", f"{r['qps']:.0f}", f"{r['exact_qps']:.0f}", f"{r['speedup']:.1f}"]
            for c, r in result["cases"].items()]
    print("\n" + format_table(["case", "n", "chosen", "knobs", "recall@10", "QPS", "exact QPS", "× exact"], rows,
                              markdown=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
