"""Held-out gain of `engine rerank train` on coco-mini caption texts, through the CLI as a user runs it.

    python benchmarks/rerank_train_coco.py [--seed 0] [--epochs 3]

Each photo is a text document (its captions 3–5 joined); its captions 1–2 are queries. The photos are split
(60 train / 20 test, by photo): the cross-encoder is fine-tuned from the installed MiniLM on the train photos'
(query, document) pairs only; the test photos' queries are searched with BM25 over all 80 documents (`engine
search --mode bm25`), that run is reranked (`engine rerank`, depth 20) and both runs go to `engine compare`
(paired t-test and randomization test). Nothing of the test photos is fitted.
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


def engine(*args: object) -> str:
    out = subprocess.run(["engine", *map(str, args)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"engine {' '.join(map(str, args))} failed:\n{out.stderr[-2000:]}")
    return out.stdout + out.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--depth", type=int, default=20)
    args = ap.parse_args()
    data = json.loads((COCO / "captions.json").read_text())
    caps: dict[int, list[str]] = {}
    for a in sorted(data["annotations"], key=lambda a: a["id"]):
        caps.setdefault(a["image_id"], []).append(a["caption"].strip())
    photos = sorted(caps)
    rng = np.random.default_rng(args.seed)
    test = set(rng.choice(photos, len(photos) // 4, replace=False).tolist())
    tmp = Path(tempfile.mkdtemp(prefix="rerank-train-coco-"))
    with open(tmp / "docs.tsv", "w") as fh:
        fh.write("id\ttext\n" + "".join(f"p{p}\t{' '.join(caps[p][2:5])}\n" for p in photos))
    with open(tmp / "pairs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["query", "document"])
        w.writerows((q, " ".join(caps[p][2:5])) for p in photos if p not in test for q in caps[p][:2])
    (tmp / "queries.tsv").write_text("".join(f"p{p}-{i}\t{caps[p][i]}\n" for p in sorted(test) for i in range(2)))
    (tmp / "qrels.txt").write_text("".join(f"p{p}-{i} 0 p{p} 1\n" for p in sorted(test) for i in range(2)))
    t0 = time.perf_counter()
    log = engine("rerank", "train", "--pairs", tmp / "pairs.csv", "--base", "all-MiniLM-L6-v2", "--out",
                 tmp / "ce", "--epochs", args.epochs, "--seed", args.seed)
    train_s = time.perf_counter() - t0
    print(log.strip().splitlines()[-1])
    engine("build", "docs", "--texts", tmp / "docs.tsv", "--bm25", "--root", tmp / "idx", "-q")
    engine("search", "docs", "--queries", tmp / "queries.tsv", "--mode", "bm25", "-k", 100, "--out",
           tmp / "bm25.run", "--root", tmp / "idx", "-q")
    engine("rerank", tmp / "bm25.run", "--queries", tmp / "queries.tsv", "--docs", tmp / "docs.tsv", "--model",
           f"cross:{tmp / 'ce'}", "--depth", args.depth, "--out", tmp / "reranked.run", "-q")
    table = engine("compare", tmp / "qrels.txt", tmp / "bm25.run", tmp / "reranked.run", "-m",
                   "mrr,recall@1,ndcg@10")
    print(table)
    load = os.getloadavg()
    print(f"train {train_s:.0f} s; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; files in {tmp}")
    out = HERE / "results" / f"rerank_train_coco_seed{args.seed}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"seed": args.seed, "compare": table, "train_log": log, "train_s": train_s,
                               "loadavg": load}, indent=2))


if __name__ == "__main__":
    main()
