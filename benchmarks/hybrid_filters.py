"""Hybrid search, metadata filters and deletes, each figure beside its reference in the same run.

Sections (all by default; `--sections hybrid,filter,delete`):

  hybrid  the planted rare-token / paraphrase set (tests/fixtures/planted.py) and, when ../shared/data is there,
          COCO-mini captions (one caption of each image indexed, the other four as queries: real paraphrases):
          dense, BM25, hybrid (weighted, rrf) as TREC runs scored side by side by `engine compare`;
          rare-token and paraphrase hits at rank 1. Goal: hybrid finds every rare-token doc at rank 1 where
          dense misses some, keeps dense's rank-1 results on paraphrases, never worse than the better half
          beyond noise.
  filter  N synthetic vectors (Collection.from_vectors) with a field matching 1 % of them: one query filtered
          vs unfiltered, alternated, medians; the filtered top-k checked against brute-force filtering of
          exact scores. Goal: within 2× of unfiltered, exact.
  delete  10 % of the N items deleted (`engine.core.storage.builder.update.delete_ids`) vs building the remaining 90 %
          afresh (`Collection.from_vectors`), for Flat and IVF; the result compared with the fresh build.
          Goal: well under the rebuild's time, equal results.

    python benchmarks/hybrid_filters.py [--n 1000000] [--dim 64] [--work /tmp/engine-hf]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))
from bench_core import synthetic  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
SHARED = next((p / "shared" / "data" for p in (REPO.parent, REPO.parent.parent) if (p / "shared" / "data").is_dir()),
              REPO.parent / "shared" / "data")  # ../shared/data (from a worktree one level deeper too)


def engine(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "engine.cli", *map(str, args)], env=ENV, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"engine {' '.join(map(str, args))} failed: {out.stderr.strip()[-500:]}")
    return out.stdout


def top1(run: Path) -> dict[str, str]:
    best: dict[str, str] = {}
    for line in run.read_text().splitlines():
        q, _, d, *_ = line.split()
        best.setdefault(q, d)
    return best


def hybrid_set(name: str, docs: Path, queries: Path, qrels: Path, work: Path) -> dict:
    """Build `name` with BM25, one run per mode, `engine compare` of the runs, rank-1 hits per query kind."""
    root = work / "idx"
    engine("build", name, "--texts", docs, "--bm25", "--root", root, "--force", "-q")
    runs = {}
    for label, args in (("dense", ["--mode", "dense"]), ("bm25", ["--mode", "bm25"]),
                        ("hybrid", ["--mode", "hybrid"]), ("hybrid_rrf", ["--mode", "hybrid", "--fusion", "rrf"])):
        runs[label] = work / f"{name}.{label}.run"
        engine("search", name, "--queries", queries, "--out", runs[label], "--run-id", label, "-k", "100",
               "--root", root, "-q", *args)
    table = engine("compare", qrels, *runs.values(), "-m", "ndcg@10,mrr,recall@10")
    data = json.loads(engine("compare", qrels, *runs.values(), "-m", "ndcg@10,mrr,recall@10", "--format", "json"))
    rel = {line.split()[0]: line.split()[2] for line in qrels.read_text().splitlines()}
    kinds = sorted({q[0] for q in rel})
    at1 = {label: {k: sum(top1(run).get(q) == d for q, d in rel.items() if q[0] == k) for k in kinds}
           for label, run in runs.items()}
    dense1 = top1(runs["dense"])
    kept = {label: sum(top1(run).get(q) == dense1.get(q) for q in rel if q[0] == "p") for label, run in runs.items()}
    return {"name": name, "queries": {k: sum(q[0] == k for q in rel) for k in kinds}, "rank1": at1,
            "paraphrase_top1_as_dense": kept, "compare": data, "table": table}


def coco_set(work: Path) -> tuple[Path, Path, Path] | None:
    """COCO-mini captions: the first caption of each image is its document, the others are paraphrase queries."""
    path = SHARED / "coco-mini" / "captions.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    by_image: dict[int, list[str]] = {}
    for a in data["annotations"]:
        by_image.setdefault(a["image_id"], []).append(" ".join(a["caption"].split()))
    docs, queries, qrels = ["id\ttext"], [], []
    for img, caps in sorted(by_image.items()):
        docs.append(f"img{img}\t{caps[0]}")
        for n, c in enumerate(caps[1:]):
            queries.append(f"p{img}_{n}\t{c}")
            qrels.append(f"p{img}_{n} 0 img{img} 1")
    work.mkdir(parents=True, exist_ok=True)
    for name, lines in (("coco_docs.tsv", docs), ("coco_queries.tsv", queries), ("coco_qrels.txt", qrels)):
        (work / name).write_text("\n".join(lines) + "\n")
    return work / "coco_docs.tsv", work / "coco_queries.tsv", work / "coco_qrels.txt"


def section_hybrid(work: Path) -> list[dict]:
    from fixtures.planted import write_planted
    out = [hybrid_set("planted", *write_planted(work / "planted"), work)]
    coco = coco_set(work / "coco")
    if coco is not None:
        out.append(hybrid_set("coco", *coco, work))
    for r in out:
        print(f"\n== {r['name']} ({r['queries']}) ==\n{r['table']}")
        print("rank-1 hits by query kind (r: rare token, p: paraphrase):", json.dumps(r["rank1"]))
        print("paraphrase queries whose rank-1 equals dense's:", json.dumps(r["paraphrase_top1_as_dense"]))
        del r["table"]
    return out


def _median_pair(f, g, repeat: int) -> tuple[float, float]:
    a, b = [], []
    for _ in range(repeat):
        for fn, acc in ((f, a), (g, b)):
            t = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t)
    return statistics.median(a), statistics.median(b)


def section_filter(work: Path, n: int, dim: int, repeat: int) -> dict:
    from engine.core.collection import Collection
    from engine.core.ranking.hybrid import filter_mask, search_rows
    vec, queries = synthetic(n, 20, dim)
    meta = [{"g": i % 100, "year": 2000 + i % 25} for i in range(n)]
    t = time.perf_counter()
    col = Collection.from_vectors("filt", [f"d{i}" for i in range(n)], vec, None, "text", root=work / "idx",
                                  meta=meta, force=True)
    built = time.perf_counter() - t
    del meta
    col = Collection.open("filt", work / "idx")
    where = "g == 7"
    search_rows(col, 10, vectors=queries[:1])  # warm: index loaded, columns mapped
    search_rows(col, 10, vectors=queries[:1], where=where)
    times = []
    exact = True
    emb = np.asarray(col.embeddings)
    mask = filter_mask(col, where)
    rows = np.flatnonzero(mask)
    for q in queries:
        qq = q[None]
        times.append(_median_pair(lambda: search_rows(col, 10, vectors=qq),
                                  lambda: search_rows(col, 10, vectors=qq, where=where), repeat))
        _, got = search_rows(col, 10, vectors=qq, where=where)
        s = emb[rows] @ q
        want = rows[np.lexsort((rows, -s))[:10]]
        exact &= got[0].tolist() == want.tolist()
    plain = statistics.median(t[0] for t in times)
    filt = statistics.median(t[1] for t in times)
    res = {"n": n, "dim": dim, "matching": int(mask.sum()), "build_s": round(built, 1),
           "unfiltered_ms": round(plain * 1000, 2), "filtered_ms": round(filt * 1000, 2),
           "ratio": round(filt / plain, 3), "exact": bool(exact), "queries": len(queries), "repeat": repeat}
    print(f"\n== filter over {n:,} items, {res['matching']:,} match ({where}) ==")
    print(f"unfiltered {res['unfiltered_ms']} ms, filtered {res['filtered_ms']} ms: {res['ratio']}× "
          f"(goal ≤ 2×); filtered top-10 = brute-force filtered exact top-10 on every query: {exact}")
    return res


def section_delete(work: Path, n: int, dim: int) -> list[dict]:
    from engine.core.storage.builder.update import delete_ids
    from engine.core.collection import Collection
    from engine.core.storage.index.faiss_index import SearchKnobs
    vec, queries = synthetic(n, 20, dim, seed=1)
    ids = [f"d{i}" for i in range(n)]
    gone = ids[::10]
    keep = np.asarray([i for i in range(n) if i % 10])
    out = []
    for index in ("Flat", "IVF1024,Flat"):
        root = work / f"del-{index.replace(',', '_')}"
        shutil.rmtree(root, ignore_errors=True)
        t = time.perf_counter()
        Collection.from_vectors("c", ids, vec, None, "text", root=root, index=index)
        full = time.perf_counter() - t
        t = time.perf_counter()
        delete_ids("c", gone, root=root)
        deleted = time.perf_counter() - t
        t = time.perf_counter()
        fresh = Collection.from_vectors("fresh", [ids[i] for i in keep], vec[keep], None, "text", root=root,
                                        index=index)
        rebuilt = time.perf_counter() - t
        after = Collection.open("c", root)
        knobs = SearchKnobs(nprobe=1024) if index != "Flat" else None
        same_items = after.ids == fresh.ids and np.array_equal(np.asarray(after.embeddings), np.asarray(fresh.embeddings))
        ra = after.hits(*after.search_vectors(queries, 10, knobs))
        rb = fresh.hits(*fresh.search_vectors(queries, 10, knobs))
        same = [[h.id for h in x] for x in ra] == [[h.id for h in x] for x in rb]
        res = {"index": index, "n": n, "deleted": len(gone), "build_all_s": round(full, 2),
               "delete_s": round(deleted, 2), "rebuild_rest_s": round(rebuilt, 2),
               "ratio": round(deleted / rebuilt, 3), "same_items": bool(same_items), "same_results": bool(same)}
        print(f"\n== delete 10 % of {n:,} ({index}) ==\ndelete {res['delete_s']} s vs rebuild of the rest "
              f"{res['rebuild_rest_s']} s: {res['ratio']}×; ids and vectors equal: {same_items}; "
              f"top-10 equal{' (exhaustive nprobe)' if knobs else ''}: {same}")
        out.append(res)
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="hybrid,filter,delete")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/engine-hf"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "hybrid_filters.json")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    sections = a.sections.split(",")
    result: dict = {"load_before": os.getloadavg()}
    if "hybrid" in sections:
        result["hybrid"] = section_hybrid(a.work)
    if "filter" in sections:
        result["filter"] = section_filter(a.work, a.n, a.dim, a.repeat)
    if "delete" in sections:
        result["delete"] = section_delete(a.work, a.n, a.dim)
    result["load_after"] = os.getloadavg()
    print(f"\nload average before {result['load_before']}, after {result['load_after']}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
