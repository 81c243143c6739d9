"""Held-out gain of `engine rerank train` on coco-mini caption texts, through the CLI as a user runs it.

    OMP_NUM_THREADS=2 python benchmarks/rerank_train_coco.py [--splits 5] [--setup single]

`--setup single` (the reported one): each photo's document is ONE caption (its 5th); its captions 1–4 are the
queries, so a query must match a different sentence about the same photo (BM25 is far from saturated).
`--setup joined` (the earlier one): a photo's captions 3–5 joined are its document, captions 1–2 the queries
(BM25 near-saturated there). For each of `--splits` random photo splits (60 train / 20 test): `engine rerank
train` with its default options fits the train photos' (query, document) pairs only; the test photos' queries
are searched over all 80 documents (`engine search --mode bm25`), that run is reranked (`engine rerank`, depth
20) with `cross:DIR`, and both runs go to `engine compare` (paired t-test and randomization test). Nothing of a
test photo is fitted. Prints a per-split table and the mean ± std over splits; JSON to benchmarks/results/.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
COCO = next((p for p in (HERE.parent.parent / "shared" / "data" / "coco-mini",
                          HERE.parent.parent.parent / "shared" / "data" / "coco-mini") if p.is_dir()),
            HERE.parent.parent / "shared" / "data" / "coco-mini")
METRICS = ("mrr", "recall@1", "ndcg@10")


def engine(*args: object) -> str:
    out = subprocess.run(["engine", *map(str, args)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"engine {' '.join(map(str, args))} failed:\n{out.stderr[-2000:]}")
    return out.stdout + out.stderr


def captions() -> dict[int, list[str]]:
    """Photo id → its captions in annotation order (coco-mini: 5 per photo)."""
    data = json.loads((COCO / "captions.json").read_text())
    caps: dict[int, list[str]] = {}
    for a in sorted(data["annotations"], key=lambda a: a["id"]):
        caps.setdefault(a["image_id"], []).append(a["caption"].strip())
    return caps


def texts(caps: dict[int, list[str]], setup: str) -> tuple[dict[int, str], dict[int, list[str]]]:
    """Per photo: its document and its queries."""
    if setup == "single":
        return {p: c[4] for p, c in caps.items()}, {p: c[:4] for p, c in caps.items()}
    return {p: " ".join(c[2:5]) for p, c in caps.items()}, {p: c[:2] for p, c in caps.items()}


def one_split(seed: int, setup: str, depth: int, extra: list[str], tmp: Path) -> dict:
    """Train on the split's train photos, rerank the test photos' BM25 run, compare; the numbers."""
    caps = captions()
    doc, queries = texts(caps, setup)
    photos = sorted(caps)
    rng = np.random.default_rng(seed)
    test = set(rng.choice(photos, len(photos) // 4, replace=False).tolist())
    tmp.mkdir(parents=True)
    with open(tmp / "docs.tsv", "w") as fh:
        fh.write("id\ttext\n" + "".join(f"p{p}\t{doc[p]}\n" for p in photos))
    with open(tmp / "pairs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["query", "document"])
        w.writerows((q, doc[p]) for p in photos if p not in test for q in queries[p])
    (tmp / "queries.tsv").write_text("".join(f"p{p}-{i}\t{q}\n" for p in sorted(test)
                                             for i, q in enumerate(queries[p])))
    (tmp / "qrels.txt").write_text("".join(f"p{p}-{i} 0 p{p} 1\n" for p in sorted(test)
                                           for i in range(len(queries[p]))))
    t0 = time.perf_counter()
    log = engine("rerank", "train", "--pairs", tmp / "pairs.csv", "--base", "all-MiniLM-L6-v2", "--out",
                 tmp / "ce", "--seed", seed, *extra)
    train_s = time.perf_counter() - t0
    report = json.loads((tmp / "ce" / "rerank-train.json").read_text())
    engine("build", "docs", "--texts", tmp / "docs.tsv", "--bm25", "--root", tmp / "idx", "-q")
    engine("search", "docs", "--queries", tmp / "queries.tsv", "--mode", "bm25", "-k", 100, "--out",
           tmp / "bm25.run", "--root", tmp / "idx", "-q")
    engine("rerank", tmp / "bm25.run", "--queries", tmp / "queries.tsv", "--docs", tmp / "docs.tsv", "--model",
           f"cross:{tmp / 'ce'}", "--depth", depth, "--out", tmp / "reranked.run", "-q")
    cmp = json.loads(engine("compare", tmp / "qrels.txt", tmp / "bm25.run", tmp / "reranked.run", "-m",
                            ",".join(METRICS), "--format", "json"))
    base = cmp["baseline"]
    other = next(k for k in cmp["runs"] if k != base)
    row = {"seed": seed, "train_s": train_s, "queries": cmp["queries"], "loadavg": os.getloadavg(),
           "train_log_last": log.strip().splitlines()[-1],
           "held_out_mrr_before": report["held_out_mrr_before"], "held_out_mrr_after": report["held_out_mrr_after"],
           "held_out_mrr_bm25": report["held_out_mrr_first_stage"], "best_epoch": report["best_epoch"]}
    for m in METRICS:
        r = cmp["runs"][other][m]
        row[m] = {"bm25": cmp["runs"][base][m]["mean"], "reranked": r["mean"], "t_p": r["t_p"],
                  "rand_p": r["randomization_p"], "wtl": f"{r['wins']}/{r['ties']}/{r['losses']}"}
    return row


def summary(rows: list[dict]) -> str:
    lines = ["| split | BM25 MRR | reranked MRR | p (t) | p (rand) | W/T/L | BM25 R@1 | reranked R@1 | "
             "train: held-out MRR base → best (BM25) | epoch | train s |", "|" + "---|" * 11]
    for r in rows:
        m, k = r["mrr"], r["recall@1"]
        lines.append(f"| {r['seed']} | {m['bm25']:.3f} | {m['reranked']:.3f} | {m['t_p']:.4f} | {m['rand_p']:.4f} | "
                     f"{m['wtl']} | {k['bm25']:.3f} | {k['reranked']:.3f} | {r['held_out_mrr_before']:.3f} → "
                     f"{r['held_out_mrr_after']:.3f} ({r['held_out_mrr_bm25']:.3f}) | {r['best_epoch']} | "
                     f"{r['train_s']:.0f} |")

    def ms(xs: list[float]) -> str:
        return f"{np.mean(xs):.3f} ± {np.std(xs, ddof=1) if len(xs) > 1 else 0:.3f}"
    gain = [r["mrr"]["reranked"] - r["mrr"]["bm25"] for r in rows]
    lines.append(f"| **mean ± std** | {ms([r['mrr']['bm25'] for r in rows])} | "
                 f"{ms([r['mrr']['reranked'] for r in rows])} | | | | {ms([r['recall@1']['bm25'] for r in rows])} | "
                 f"{ms([r['recall@1']['reranked'] for r in rows])} | | | |")
    lines.append(f"\nMRR gain over BM25: {ms(gain)} ({sum(g > 0 for g in gain)}/{len(gain)} splits above)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--setup", choices=("single", "joined"), default="single")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--tag", default="", help="Suffix of the JSON file (e.g. for non-default --train-args).")
    ap.add_argument("--train-args", default="", help="Extra `engine rerank train` options (default: none).")
    ap.add_argument("--budget-min", type=float, default=9.0, help="Start no new split after this many minutes "
                    "(a lock hold stays bounded); run again to go on: splits already in the JSON are kept.")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rerank-train-coco-"))
    out = HERE / "results" / f"rerank_train_coco_{args.setup}{'_' + args.tag if args.tag else ''}.json"
    old = json.loads(out.read_text()) if out.is_file() else {}
    same = old.get("train_args") == args.train_args and old.get("depth") == args.depth
    rows = [r for r in old.get("rows", []) if same]
    start = time.perf_counter()
    for seed in range(args.first_seed, args.first_seed + args.splits):
        if any(r["seed"] == seed for r in rows):
            continue
        if time.perf_counter() - start > args.budget_min * 60:
            print(f"budget of {args.budget_min} min spent: run again to go on")
            break
        rows.append(one_split(seed, args.setup, args.depth, args.train_args.split(), tmp / f"split{seed}"))
        rows.sort(key=lambda r: r["seed"])
        print(summary([r for r in rows if r["seed"] == seed]).splitlines()[2], flush=True)
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"setup": args.setup, "depth": args.depth, "train_args": args.train_args,
                                   "rows": rows}, indent=2))
    table = summary(rows)
    load = os.getloadavg()
    print(f"\nsetup {args.setup}, depth {args.depth}, train options: {args.train_args or 'defaults'}\n{table}\n"
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; files in {tmp}")
    out.write_text(json.dumps({"setup": args.setup, "depth": args.depth, "train_args": args.train_args,
                               "rows": rows, "table": table, "loadavg": load}, indent=2))


if __name__ == "__main__":
    main()
