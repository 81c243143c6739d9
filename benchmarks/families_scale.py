"""The model families where the other encoders go, measured side by side: each family's build locally, on a
local Ray (`--ray`) and locally in bfloat16 (`--dtype bfloat16`), end to end as a user sees it (Ray's start,
actor start-up and model loads included), and how far each build's output is from the local float32 build's.

    python benchmarks/families_scale.py [--docs 1000] [--images 128] [--clip DIR] [--splade DIR] [--colbert DIR]

Builds: an image collection of an image–text sentence-transformers model (its processor sizes the images:
on Ray its actors read them), and the learned roles of a text collection (`--sparse`, `--multivector`; the
dense side the same CLIP's text tower, so the roles' encoding is what differs). Without model folders the
models are tiny random-weight ones (tests/fixtures/tiny_families.py): the figures then measure the engine's path
around a model and Ray's fixed cost, not a real model's forward pass. Documents are benchmarks/multivector.py's
corpus, images random RGB of 64–256 pixels a side. "max |Δ|" is the largest difference of an embedding (image
build), a sparse weight or a token vector component from the local float32 build's; "top-10 overlap" the mean
share of text queries' top 10 the two builds agree on. Each family's models are loaded once before the timed
builds (the driver's; Ray's actors load their own, which is part of Ray's cost). Writes benchmarks/results/families_scale.json.
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

MODES = {"local": {}, "ray": {"ray": "local"}, "bfloat16": {"dtype": "bfloat16", "device": "cpu"}}


def sparse_rows(folder: Path) -> dict[tuple[int, int], float]:
    from engine.core.storage.index.sparse import SparseIndex
    index = SparseIndex.load(next(folder.glob("sparse*")))
    out = {}
    for n, term in enumerate(index.terms):
        lo, hi = int(index.offsets[n]), int(index.offsets[n + 1])
        out.update({(int(r), int(term)): float(w) for r, w in zip(index.rows[lo:hi], index.weights[lo:hi])})
    return out


def overlap(a: np.ndarray, b: np.ndarray, k: int = 10) -> float:
    return float(np.mean([len(set(np.argsort(-x)[:k]) & set(np.argsort(-y)[:k])) / k for x, y in zip(a, b)]))


def compare(kind: str, base: Path, other: Path, queries: list[str], models: dict) -> tuple[float, float]:
    """(max |Δ| against the local float32 build, mean top-10 overlap of the queries)."""
    from engine.core.collection import Collection
    from engine.core.encoders.device import set_dtype
    from engine.core.storage.index.multivector import MultiVectorIndex
    set_dtype("float32")
    if kind == "image–text":
        a, b = (Collection.open("c", r) for r in (base, other))
        q = a.encoder.encode_texts(queries)
        x, y = np.asarray(a.embeddings), np.asarray(b.embeddings)
        return float(np.abs(x - y).max()), overlap(q @ x.T, q @ y.T)
    if kind == "sparse":
        from engine.core.encoders.sparse import encode_sparse
        x, y = sparse_rows(base / "c"), sparse_rows(other / "c")
        delta = max(abs(x.get(key, 0.0) - y.get(key, 0.0)) for key in set(x) | set(y))
        docs = 1 + max(r for r, _ in x)
        scores = []
        for rows in (x, y):
            m = np.zeros((len(queries), docs))
            for n, (terms, weights) in enumerate(encode_sparse(str(models["splade"]), queries, query=True)):
                w = dict(zip(terms.tolist(), weights.tolist()))
                for (r, t), v in rows.items():
                    m[n, r] += w.get(t, 0.0) * v
            scores.append(m)
        return delta, overlap(*scores)
    from engine.core.encoders.multivector import encode_tokens, maxsim
    x, y = (MultiVectorIndex.load(next((r / "c").glob("multivector*"))) for r in (base, other))
    rows = range(int(x.meta["count"]))
    tx, ty = [x.row_tokens(r) for r in rows], [y.row_tokens(r) for r in rows]
    delta = max(float(np.abs(p - q).max()) for p, q in zip(tx, ty))
    qt = encode_tokens(str(models["colbert"]), queries, query=True)
    return delta, overlap(np.stack([maxsim(q, tx) for q in qt]), np.stack([maxsim(q, ty) for q in qt]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--images", type=int, default=128)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--chunk-size", type=int, default=256)
    ap.add_argument("--clip", type=Path, help="An image–text sentence-transformers model folder.")
    ap.add_argument("--splade", type=Path, help="A SparseEncoder folder.")
    ap.add_argument("--colbert", type=Path, help="A MultiVectorEncoder folder.")
    ap.add_argument("--out", default="families_scale.json", help="File name under benchmarks/results/.")
    args = ap.parse_args()
    from families_bench import images
    from multivector import corpus

    from engine.core.collection import Collection
    from engine.core.encoders.device import set_dtype
    from engine.display import format_table
    from fixtures.tiny_families import build_tiny_clip, build_tiny_colbert, build_tiny_splade
    tmp = Path(tempfile.mkdtemp(prefix="families-scale-"))
    models = {"clip": args.clip or build_tiny_clip(tmp / "clip"),
              "splade": args.splade or build_tiny_splade(tmp / "splade"),
              "colbert": args.colbert or build_tiny_colbert(tmp / "colbert")}
    docs, queries = corpus(args.docs, args.queries)
    (tmp / "docs.csv").write_text("id,text\n" + "".join(f"d{i},{t}\n" for i, t in enumerate(docs)))
    photos = images(tmp / "photos", args.images)
    clip = f"sbert:{models['clip']}"
    builds = {"image–text": dict(images=photos, model=clip),
              "sparse": dict(texts=tmp / "docs.csv", model=clip, sparse=f"sparse:{models['splade']}"),
              "multivector": dict(texts=tmp / "docs.csv", model=clip, multivector=f"multivector:{models['colbert']}")}
    results, table = [], []
    for kind, settings in builds.items():
        seconds = {}
        Collection.build("c", root=tmp / kind / "warm", chunk_size=args.chunk_size, **settings)  # models loaded
        for mode, extra in MODES.items():
            set_dtype("auto")
            t = time.perf_counter()
            Collection.build("c", root=tmp / kind / mode, chunk_size=args.chunk_size, **settings, **extra)
            seconds[mode] = time.perf_counter() - t
        for mode in ("ray", "bfloat16"):
            delta, top = compare(kind, tmp / kind / "local", tmp / kind / mode, queries, models)
            n = args.images if kind == "image–text" else args.docs
            results.append({"family": kind, "build": mode, "items": n, "seconds": seconds[mode],
                            "local_seconds": seconds["local"], "max_abs_delta": delta, "top10_overlap": top})
            table.append([kind, mode, str(n), f"{seconds['local']:.1f}", f"{seconds[mode]:.1f}", f"{delta:.2g}",
                          f"{top:.3f}"])
    print(format_table(["family", "build", "items", "local s", "this s", "max |Δ|", "top-10 overlap"], table,
                       markdown=True, left=3))
    out = HERE / "results" / args.out
    out.parent.mkdir(exist_ok=True)
    text = json.dumps({"docs": args.docs, "images": args.images, "queries": args.queries,
                       "chunk_size": args.chunk_size,
                       "models": {k: str(getattr(args, k) or f"tiny random {k}") for k in ("clip", "splade", "colbert")},
                       "results": results}, indent=2)
    out.write_text(text.replace(str(tmp), "TMP"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
