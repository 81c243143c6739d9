"""EVENTA pipeline cost at scale: per-stage latency, whole-submission time, index memory, build-time estimate.

    python benchmarks/eventa_bench.py [--articles 10000] [--queries 3000] [--latency-queries 300]
    python benchmarks/eventa_bench.py --articles 2000 --queries 1000   # scaled down, extrapolated to 10k / 3000

- Database: `--articles` generated news articles (OpenEvents layout, 2 image ids each) and captions
  naming an article's people and place (engine.tasks.eventa.fixture).
- Images: encoding 20k photos does not fit a shared 2-core machine, so the image collection holds
  stand-in vectors in the same space (short subject descriptions embedded by the image model's own
  text tower). Search cost and memory depend only on count × dim, so latency and memory are those of
  real images; the image *build* rate is measured separately on `--rate-images` real photos
  (coco-mini when present, otherwise the fixture's) and used for the OpenEvents estimate.
- Latency: each stage timed per query (batch of one) on `--latency-queries` captions → p50/p95;
  the whole submission (all `--queries`, batched, CSV + zip written) timed end to end.
- Memory: bytes of each index (FAISS + embeddings + item table, BM25 folder, article → images map) per 100k
  articles/images.

Prints a table and writes benchmarks/results/eventa_bench.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OPENEVENTS = {"articles": 202_000, "images": 400_000}


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def stage_names(timings: dict[str, list[float]]) -> dict[str, float]:
    """Seconds per step of the default pipeline, named as the stage table names them."""
    out: dict[str, float] = {}
    for text, secs in timings.items():
        if text.startswith("retrieve(") and "group=" in text:
            name = "articles_dense"
        elif text.startswith("retrieve(") and 'mode="bm25"' in text:
            name = "articles_bm25"
        elif text.startswith("retrieve("):
            name = "images_global"
        else:
            name = {"fuse": "article_fusion", "expand": "expand", "similarity": "image_scoring",
                    "rerank": "article_rerank"}.get(text.split("(")[0].split(" ")[-1], "other")
        out[name] = out.get(name, 0.0) + sum(secs)
    return out


def _percentiles(values: list[float]) -> dict[str, float]:
    ms = np.asarray(values) * 1000.0
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "mean_ms": round(float(ms.mean()), 2)}


def measure_image_rate(model: str, n: int, work: Path) -> dict:
    """Images per second of the image model on real photos (decode + preprocess + forward)."""
    from engine.core.encoders.registry import load_encoder
    from engine.core.images import find_images
    coco = ROOT.parent / "shared" / "data" / "coco-mini" / "images"
    if coco.is_dir():
        paths, source = [str(p) for p in find_images(coco)][:n], "coco-mini (640×480 JPEG)"
    else:
        from engine.tasks.eventa.fixture import make_eventa_fixture
        fx = make_eventa_fixture(work / "rate", n_articles=max(1, n // 2), image_size=256, broken_image=False)
        paths, source = [str(p) for p in find_images(fx.images)][:n], "generated fixture (256 px JPEG)"
    enc = load_encoder(model)
    enc.encode_images(paths[:4])  # warm-up
    t0 = time.perf_counter()
    res = enc.encode_images(paths, batch_size=32, workers=2)
    seconds = time.perf_counter() - t0
    return {"images": len(res.ok), "seconds": round(seconds, 2), "per_second": round(len(res.ok) / seconds, 2),
            "source": source, "model": enc.spec}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--articles", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=3_000)
    ap.add_argument("--latency-queries", type=int, default=300)
    ap.add_argument("--rate-images", type=int, default=80)
    ap.add_argument("--model", default="conse", help="Image–text model whose text tower makes the stand-ins.")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 keeps latency stable on a shared machine).")
    ap.add_argument("--extrapolate-to", type=int, default=10_000,
                    help="Also report search latency scaled linearly to this many articles (exact search is linear).")
    ap.add_argument("--target-queries", type=int, default=3_000, help="Captions the whole-submission estimate is for.")
    ap.add_argument("--work", type=Path, default=None, help="Scratch folder (default: a temporary one).")
    ap.add_argument("--out", type=Path, default=RESULTS / "eventa_bench.json")
    args = ap.parse_args(argv)

    from engine.core.storage.index.bm25 import BM25Index
    from engine.core.collection import Collection
    from engine.core.encoders.registry import DEFAULT_TEXT_SPEC, load_encoder
    from engine.core.encoders.base import configure_threads
    from engine.core.sources import Item
    from engine.io.atomic import write_json
    from engine.progress import set_quiet
    from engine.tasks.eventa.build import ARTICLE_IMAGES, BM25, IMAGES, commit_articles, encode_passages
    from engine.tasks.eventa.data import read_database
    from engine.tasks.eventa.fixture import THEMES, captions_for, generated_articles
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.run import run_pipeline
    from engine.tasks.eventa.rank import RankParams
    from engine.tasks.eventa.stages import default_pipeline, parts
    from engine.tasks.eventa.submission import write_eventa_submission
    set_quiet(True)
    configure_threads(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="eventa-bench-"))
    folder = work / "indexes" / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    out: dict = {"articles": args.articles, "queries": args.queries, "cpu_threads": os.cpu_count(),
                 "torch_threads": args.threads, "load_average_at_start": round(os.getloadavg()[0], 2)}

    print(f"generating {args.articles} articles in {work}", file=sys.stderr)
    db = generated_articles(args.articles, images_per_article=2)
    write_json(work / "database.json", db)
    articles = read_database(work / "database.json")

    image_spec = load_encoder(args.model).spec
    text_spec = load_encoder(DEFAULT_TEXT_SPEC).spec
    print("building the image stand-ins", file=sys.stderr)
    phrases = [p for ps in THEMES.values() for p in ps]
    rng = np.random.default_rng(0)
    stand_ins = [Item(iid, f"{phrases[int(rng.integers(len(phrases)))]} {a.title.split(' in ')[-1]}")
                 for a in articles for iid in a.images]
    t0 = time.perf_counter()
    images_col = Collection.build(IMAGES, items=stand_ins, kind="text", root=folder, model=image_spec, force=True,
                                  batch_size=256)
    out["build_image_stand_ins"] = {"images": len(stand_ins), "seconds": round(time.perf_counter() - t0, 1)}

    print("building the article passages + BM25", file=sys.stderr)
    t0 = time.perf_counter()
    passages = encode_passages(folder, articles, text_spec)
    bm25 = BM25Index.build([a.id for a in articles], [a.text for a in articles])
    text_s = time.perf_counter() - t0
    commit_articles(passages, articles, bm25, images_col, {"database": str(work / "database.json"),
                                                          "images": "stand-ins", "counts": {}})
    n_passages = len(passages)
    out["build_articles"] = {"articles": len(articles), "passages": n_passages, "seconds": round(text_s, 1),
                             "articles_per_second": round(len(articles) / text_s, 1),
                             "passages_per_second": round(n_passages / text_s, 1)}

    print(f"measuring image encoding on {args.rate_images} real photos", file=sys.stderr)
    out["image_rate"] = measure_image_rate(args.model, args.rate_images, work)

    qs = captions_for(db, args.queries)
    params = RankParams()
    stage = parse_pipeline(default_pipeline(params, "bench"))
    opened: dict = {}
    print(f"per-query latency on {args.latency_queries} captions", file=sys.stderr)
    run_pipeline(stage, [Query("warm", qs[0][1])], Context(root=folder.parent, opened=opened))  # lazy loads
    calls: dict[str, list[float]] = {}
    for _, text, _ in qs[:args.latency_queries]:
        ctx = Context(root=folder.parent, opened=opened)
        t0 = time.perf_counter()
        run_pipeline(stage, [Query("q", text)], ctx)
        calls.setdefault("total", []).append(time.perf_counter() - t0)
        for name, secs in stage_names(ctx.timings).items():
            calls.setdefault(name, []).append(secs)
    out["latency_per_query"] = {name: _percentiles(v) for name, v in calls.items()}
    if args.extrapolate_to and args.extrapolate_to != args.articles:
        factor = args.extrapolate_to / args.articles
        searched = ("articles_dense", "articles_bm25", "images_global")
        scaled = {s: {k: round(v * factor, 2) for k, v in out["latency_per_query"][s].items()} for s in searched}
        scaled.update({s: out["latency_per_query"][s] for s in out["latency_per_query"] if s not in searched
                       and s != "total"})
        scaled["total"] = {k: round(sum(scaled[s][k] for s in scaled), 2) for k in ("p50_ms", "p95_ms", "mean_ms")}
        out["latency_extrapolated"] = {"articles": args.extrapolate_to, "stages": scaled,
                                       "note": "search stages × articles ratio (exact search and BM25 are linear); "
                                               "the other stages do not depend on the database size; total = sum "
                                               "of the stages' percentiles (an upper bound)"}

    print(f"whole submission: {len(qs)} captions", file=sys.stderr)
    t0 = time.perf_counter()
    ctx = Context(root=folder.parent, opened=opened)
    run = run_pipeline(stage, [Query(q, t) for q, t, _ in qs], ctx)
    write_eventa_submission(work / "submission", {q: run[q].pairs() for q, _, _ in qs}, [q for q, _, _ in qs])
    whole = time.perf_counter() - t0
    out["submission"] = {"queries": len(qs), "seconds": round(whole, 1),
                         "ms_per_query": round(whole / len(qs) * 1000, 2),
                         "stage_seconds": {k: round(v, 2) for k, v in stage_names(ctx.timings).items()}}
    if args.extrapolate_to != args.articles or args.target_queries != len(qs):
        factor = args.extrapolate_to / args.articles
        st = out["submission"]["stage_seconds"]
        search = sum(st[s] for s in ("articles_dense", "articles_bm25", "images_global"))
        per_query = (whole - search + search * factor) / len(qs)
        out["submission_extrapolated"] = {
            "articles": args.extrapolate_to, "queries": args.target_queries,
            "seconds": round(per_query * args.target_queries, 1),
            "note": "measured per-caption time, its search stages scaled by the articles ratio, × target captions"}
    articles_run = run_pipeline(parse_pipeline(parts(params, "bench")["_articles"]), [Query(q, t) for q, t, _ in qs],
                                ctx)
    gold = [a for _, _, a in qs]
    hits = [g in articles_run[q].ids[:10] for g, (q, _, _) in zip(gold, qs)]
    out["article_recall_at_10"] = round(float(np.mean(hits)), 4)

    from engine.tasks.eventa.rank import EventaIndex
    index = EventaIndex.open("bench", folder.parent)
    passages_col = index.passages
    bm25_bytes = _folder_bytes(passages_col.file(BM25))
    map_bytes = passages_col.file(ARTICLE_IMAGES).stat().st_size
    mem = {
        "images": {"count": len(index.images), "bytes": _folder_bytes(index.images.path),
                   "faiss_bytes": index.images.manifest.get("index_bytes")},
        "articles": {"count": len(articles), "passages": len(passages_col),
                     "bytes": _folder_bytes(passages_col.path) - bm25_bytes - map_bytes,
                     "faiss_bytes": passages_col.manifest.get("index_bytes")},
        "bm25": {"count": len(articles), "bytes": bm25_bytes},
        "article_images": {"bytes": map_bytes},
    }
    for part in ("images", "articles", "bm25"):
        mem[part]["mb_per_100k"] = round(mem[part]["bytes"] / mem[part]["count"] * 100_000 / 2**20, 1)
    mem["article_images"]["mb_per_100k_articles"] = round(mem["article_images"]["bytes"] / len(articles) * 1e5 / 2**20,
                                                          1)
    out["disk_and_memory"] = mem

    img_rate = out["image_rate"]["per_second"]
    art_rate = out["build_articles"]["articles_per_second"]
    est_img, est_art = OPENEVENTS["images"] / img_rate, OPENEVENTS["articles"] / art_rate
    out["openevents_build_estimate"] = {**OPENEVENTS, "images_hours": round(est_img / 3600, 2),
                                        "articles_hours": round(est_art / 3600, 2),
                                        "total_hours": round((est_img + est_art) / 3600, 2),
                                        "memory_gb": round((mem["images"]["mb_per_100k"] * 4 +
                                                            (mem["articles"]["mb_per_100k"] + mem["bm25"]["mb_per_100k"]
                                                             + mem["article_images"]["mb_per_100k_articles"]) * 2.02)
                                                           / 1024, 2)}
    write_json(args.out, out)
    print(format_report(out))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def format_report(r: dict) -> str:
    lines = [f"EVENTA pipeline, {r['articles']} articles ({r['build_articles']['passages']} passages), "
             f"{r['disk_and_memory']['images']['count']} images, {r['queries']} captions; {r['cpu_threads']} CPU "
             f"cores, torch threads {r['torch_threads']}, load average {r['load_average_at_start']} at start",
             "", "| stage | p50 ms | p95 ms | mean ms |", "|---|---|---|---|"]
    for stage, v in r["latency_per_query"].items():
        lines.append(f"| {stage} | {v['p50_ms']} | {v['p95_ms']} | {v['mean_ms']} |")
    if "latency_extrapolated" in r:
        x = r["latency_extrapolated"]
        lines += ["", f"extrapolated to {x['articles']} articles ({x['note']}):", "",
                  "| stage | p50 ms | p95 ms | mean ms |", "|---|---|---|---|"]
        lines += [f"| {s} | {v['p50_ms']} | {v['p95_ms']} | {v['mean_ms']} |" for s, v in x["stages"].items()]
    s = r["submission"]
    lines += ["", f"whole submission: {s['queries']} captions in {s['seconds']} s ({s['ms_per_query']} ms/caption, "
              f"batched, zip written); article R@10 of the generated captions: {r['article_recall_at_10']}"]
    if "submission_extrapolated" in r:
        x = r["submission_extrapolated"]
        lines += [f"estimated whole submission for {x['queries']} captions over {x['articles']} articles: "
                  f"{x['seconds']} s ({x['note']})"]
    lines += ["", "| index | items | MB per 100k |", "|---|---|---|"]
    m = r["disk_and_memory"]
    lines += [f"| images (FAISS Flat + embeddings + ids) | {m['images']['count']} | {m['images']['mb_per_100k']} |",
              f"| articles (passages, FAISS Flat + embeddings + ids) | {m['articles']['count']} | "
              f"{m['articles']['mb_per_100k']} |",
              f"| BM25 (bm25s) | {m['bm25']['count']} | {m['bm25']['mb_per_100k']} |",
              f"| article → images map (JSON beside the passages) | {m['articles']['count']} | "
              f"{m['article_images']['mb_per_100k_articles']} |"]
    e, ir, ar = r["openevents_build_estimate"], r["image_rate"], r["build_articles"]
    lines += ["", f"rates: {ir['per_second']} images/s ({ir['model']}, {ir['source']}), {ar['articles_per_second']} "
              f"articles/s = {ar['passages_per_second']} passages/s (MiniLM + BM25)",
              f"OpenEvents estimate ({e['articles']} articles, {e['images']} images): images {e['images_hours']} h + "
              f"articles {e['articles_hours']} h = {e['total_hours']} h on this machine; indexes ≈ {e['memory_gb']} GB"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
