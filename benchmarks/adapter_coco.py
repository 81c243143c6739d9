"""Adapters over the offline default (`conse`) fitted on coco-mini caption–photo pairs: caption → image R@1 on
photos they never saw, repeated random splits by photo (mean ± std), with a paired test per split.

    python benchmarks/adapter_coco.py [--splits 10] [--test-share 0.25] [--cli 3]

Per split: the photos are split (train / test); each adapter is fitted on the train photos' captions only;
test captions are ranked against every photo (the 80-photo gallery, as the 0.415 baseline) and against the
test photos alone. The fitted photos' own captions are never scored.
- linear: `--form linear` (two maps, InfoNCE, early stopping holds out a slice of the train photos).
- conse-neighbours (`engine adapt`'s default for text,image pairs over conse): its knobs are chosen by its own
  5-fold cross-validation inside the train photos (nested: the test photos never choose anything). In the
  80-photo gallery every photo is encoded as the deployed adapter encodes it: a train photo's memory includes
  itself. The column "train as unseen" encodes each train photo without its own memory row instead.
- centring + 10 views: the same form with the memory off (alpha 0), a fixed form.
`--cli N` repeats the first N splits through the CLI as a user would (`engine adapt` on the split's pairs CSV,
`engine build --images` of all 80 photos with `--model adapted:DIR`, `engine search --queries`, `engine eval`)
and checks the R@1 equals the cached-feature figure.
"""
from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from engine.core.ranking.adapters.neighbours import r_at_1

HERE = Path(__file__).resolve().parent
COCO = next((p for p in (HERE.parent.parent / "shared" / "data" / "coco-mini",
                          HERE.parent.parent.parent / "shared" / "data" / "coco-mini") if p.is_dir()),
            HERE.parent.parent / "shared" / "data" / "coco-mini")  # ../shared from the project (or a worktree)


def embeddings(cache: Path) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """conse vectors of the 400 captions and 80 photos (cached), and each caption's photo row."""
    if cache.is_file():
        z = np.load(cache)
        return z["captions"], z["photos"], z["owner"].tolist()
    from engine.core.encoders.registry import load_encoder
    data = json.loads((COCO / "captions.json").read_text())
    photos = sorted(data["images"], key=lambda im: im["id"])
    row = {im["id"]: n for n, im in enumerate(photos)}
    anns = sorted(data["annotations"], key=lambda a: a["id"])
    enc = load_encoder("conse")
    caps = enc.encode_texts([a["caption"] for a in anns])
    res = enc.encode_images([str(COCO / "images" / im["file_name"]) for im in photos])
    assert not res.failed
    owner = [row[a["image_id"]] for a in anns]
    np.savez(cache, captions=caps, photos=res.embeddings, owner=np.array(owner))
    return caps, res.embeddings, owner


def photo_paths() -> list[str]:
    data = json.loads((COCO / "captions.json").read_text())
    return [str(COCO / "images" / im["file_name"]) for im in sorted(data["images"], key=lambda im: im["id"])]


def view_embeddings(cache: Path) -> tuple[np.ndarray, np.ndarray]:
    """The 80 photos' ConSE vectors and pooled features over 10 views, as `engine adapt` computes them."""
    if cache.is_file():
        z = np.load(cache)
        return z["conse"], z["pooled"]
    from engine.core.ranking.adapters.fit import embed_views
    from engine.core.encoders.registry import load_encoder
    conse, pooled = embed_views(load_encoder("conse"), photo_paths(), COCO)
    np.savez(cache, conse=conse, pooled=pooled)
    return conse, pooled


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def neighbours_split(caps, owner, conse, pooled, train, test, seed: int) -> dict:
    """conse-neighbours fitted on the train photos (knobs by its own CV inside them), scored on the test
    captions: deployed 80-photo gallery, train photos encoded as unseen, test photos alone; and its alpha-0
    form (centring + views, fixed)."""
    from engine.core.ranking.adapters.neighbours import fit_neighbours, remember
    fitted = np.isin(owner, train)
    local = {p: i for i, p in enumerate(train)}
    form, rep = fit_neighbours(caps[fitted], np.array([local[o] for o in owner[fitted]]), conse[train],
                               pooled[train], seed)
    held = ~fitted
    gold = owner[held]
    pos = {p: n for n, p in enumerate(test)}
    gold_t = np.array([pos[o] for o in gold])
    q = form.texts(caps[held])
    exclude = np.full(len(conse), -1)
    exclude[train] = np.arange(len(train))
    views_only = remember(caps, owner, conse, pooled, train)
    g0 = views_only.images(conse, pooled)
    g = form.images(conse, pooled)
    return {"nb_80": r_at_1(q, g, gold), "nb_80_unseen": r_at_1(q, form.images(conse, pooled, exclude), gold),
            "nb_test": r_at_1(q, g[test], gold_t), "views_80": r_at_1(views_only.texts(caps[held]), g0, gold),
            "views_test": r_at_1(views_only.texts(caps[held]), g0[test], gold_t), "chosen": rep["chosen"]}


def via_cli(split: int, train: np.ndarray, test: np.ndarray, work: Path) -> float:
    """R@1 (80-photo gallery) of the split's test captions through the CLI, as a user would run it."""
    import shutil
    import subprocess
    import sys
    data = json.loads((COCO / "captions.json").read_text())
    files = {im["id"]: im["file_name"] for im in data["images"]}
    ids = sorted(files)
    train_ids = {ids[i] for i in train}
    test_ids = {ids[i] for i in test}
    folder = work / f"split{split}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with open(folder / "pairs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "image"])
        w.writerows([a["caption"], str(COCO / "images" / files[a["image_id"]])]
                    for a in sorted(data["annotations"], key=lambda a: a["id"]) if a["image_id"] in train_ids)
    queries = [(f"q{a['id']}", a["caption"].replace("\t", " ").replace("\n", " "), files[a["image_id"]])
               for a in sorted(data["annotations"], key=lambda a: a["id"]) if a["image_id"] in test_ids]
    (folder / "queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t, _ in queries))
    root = folder / "idx"

    def engine(*args) -> str:
        done = subprocess.run([str(Path(sys.executable).parent / "engine"), *map(str, args)], capture_output=True,
                              text=True)
        if done.returncode:
            raise SystemExit(f"engine {' '.join(map(str, args))} failed: {done.stderr.strip()[-500:]}")
        return done.stdout
    engine("adapt", "--base", "conse", "--pairs", folder / "pairs.csv", "--out", folder / "adapter", "--seed", split,
           "-q")
    engine("build", "photos", "--images", COCO / "images", "--model", f"adapted:{folder / 'adapter'}", "--root", root,
           "-q")
    engine("search", "photos", "--queries", folder / "queries.tsv", "--out", folder / "run.trec", "-k", "80",
           "--root", root)
    ids = {Path(line.split()[2]).stem: line.split()[2] for line in (folder / "run.trec").read_text().splitlines()}
    (folder / "qrels.txt").write_text("".join(f"{q} 0 {ids[Path(f).stem]} 1\n" for q, _, f in queries))
    scores = json.loads(engine("eval", folder / "run.trec", folder / "qrels.txt", "-m", "recall@1", "--json"))
    return float(scores["recall@1"] if "recall@1" in scores else scores["all"]["recall@1"])


def main() -> None:
    from scipy.stats import wilcoxon

    from engine.core.ranking.adapters.fit import FitOptions, fit_maps
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--test-share", type=float, default=0.25)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/coco_mini_conse.npz"))
    ap.add_argument("--views-cache", type=Path, default=Path("/tmp/coco_mini_views.npz"))
    ap.add_argument("--no-linear", action="store_true", help="skip the linear form (its fit is the slow part)")
    ap.add_argument("--cli", type=int, default=0, help="repeat the first N splits through the CLI")
    ap.add_argument("--work", type=Path, default=Path("/tmp/adapter_coco_cli"))
    args = ap.parse_args()
    t_start = time.perf_counter()
    caps, photos, owner = embeddings(args.cache)
    owner = np.array(owner)
    conse10, pooled = view_embeddings(args.views_cache)
    print(f"all 400 captions vs 80 photos, conse: R@1 {r_at_1(caps, photos, owner).mean():.3f}")
    rows = []
    for split in range(args.splits):
        rng = np.random.default_rng(1000 + split)
        test = np.sort(rng.choice(80, int(80 * args.test_share), replace=False))
        train = np.setdiff1d(np.arange(80), test)
        is_test = np.isin(owner, test)
        gold = owner[is_test]
        pos = {p: n for n, p in enumerate(test)}
        gold_t = np.array([pos[o] for o in gold])
        q0 = caps[is_test]
        b_all, b_t = r_at_1(q0, photos, gold), r_at_1(q0, photos[test], gold_t)
        row = {"split": split, "base_r1_80": b_all.mean(), "base_r1_test": b_t.mean()}
        if not args.no_linear:
            t0 = time.perf_counter()
            wl, wr, rep = fit_maps(caps[~is_test], photos[owner[~is_test]], [str(o) for o in owner[~is_test]],
                                   shared=False, options=FitOptions(seed=split))
            q1, g1 = unit(q0 @ wl), unit(photos @ wr)
            row.update(linear_r1_80=r_at_1(q1, g1, gold).mean(), linear_r1_test=r_at_1(q1, g1[test], gold_t).mean(),
                       linear_steps=rep["steps"], linear_fit_s=time.perf_counter() - t0)
        t0 = time.perf_counter()
        nb = neighbours_split(caps, owner, conse10, pooled, train, test, seed=split)
        row.update(views_r1_80=nb["views_80"].mean(), views_r1_test=nb["views_test"].mean(),
                   nb_r1_80=nb["nb_80"].mean(), nb_r1_80_unseen=nb["nb_80_unseen"].mean(),
                   nb_r1_test=nb["nb_test"].mean(), nb_chosen=nb["chosen"], nb_fit_s=time.perf_counter() - t0)
        diff = nb["nb_80"] - b_all
        row["nb_wilcoxon_p"] = float(wilcoxon(diff, zero_method="zsplit").pvalue) if diff.any() else 1.0
        if split < args.cli:
            row["nb_r1_80_cli"] = via_cli(split, train, test, args.work)
        rows.append(row)
        print(f"split {split}: R@1 (80 photos) conse {b_all.mean():.3f}"
              + (f"  linear {row['linear_r1_80']:.3f}" if "linear_r1_80" in row else "")
              + f"  centring+views {row['views_r1_80']:.3f}  conse-neighbours {row['nb_r1_80']:.3f}"
              + (f" (CLI {row['nb_r1_80_cli']:.3f})" if "nb_r1_80_cli" in row else "")
              + f"  p={row['nb_wilcoxon_p']:.3g}  chosen {nb['chosen']['alpha']}/{nb['chosen']['k']}/"
              f"{nb['chosen']['tau']}", flush=True)
    keys = [k for k in rows[0] if k.endswith(("_80", "_test", "_unseen", "_cli"))]
    summary = {k: (float(np.mean([r[k] for r in rows if k in r])), float(np.std([r[k] for r in rows if k in r])))
               for k in keys}
    gain = np.array([r["nb_r1_80"] - r["base_r1_80"] for r in rows])
    summary["nb_gain_80"] = (float(gain.mean()), float(gain.std()))

    def cell(k: str) -> str:
        return f"{summary[k][0]:.3f} ± {summary[k][1]:.3f}" if k in summary else "–"
    n_test = int(80 * args.test_share)
    print(f"\n{args.splits} splits by photo ({80 - n_test} fitted, {n_test} unseen); mean ± std over splits\n")
    print(f"| adapter (fitted on the train photos' captions) | R@1 vs 80 photos | R@1 vs 80, train as unseen | "
          f"R@1 vs the {n_test} unseen photos |\n|---|---|---|---|")
    print(f"| conse (no adapter) | {cell('base_r1_80')} | {cell('base_r1_80')} | {cell('base_r1_test')} |")
    if not args.no_linear:
        print(f"| linear (`--form linear`) | {cell('linear_r1_80')} | – | {cell('linear_r1_test')} |")
    print(f"| centring + 10 views (memory off) | {cell('views_r1_80')} | {cell('views_r1_80')} | "
          f"{cell('views_r1_test')} |")
    print(f"| **conse-neighbours** (default; knobs by CV inside the train photos) | {cell('nb_r1_80')} | "
          f"{cell('nb_r1_80_unseen')} | {cell('nb_r1_test')} |")
    print(f"\npaired gain over conse (80 photos): {gain.mean():+.3f} ± {gain.std():.3f} (std of the mean "
          f"{gain.std(ddof=1) / np.sqrt(len(gain)):.3f}); std of the mean of conse-neighbours "
          f"{np.std([r['nb_r1_80'] for r in rows], ddof=1) / np.sqrt(len(rows)):.3f}")
    if args.cli:
        same = [(r["nb_r1_80"], r["nb_r1_80_cli"]) for r in rows if "nb_r1_80_cli" in r]
        print(f"through the CLI (first {len(same)} splits): " + ", ".join(f"{a:.3f} cached / {b:.3f} CLI"
                                                                          for a, b in same))
    print(f"run time {time.perf_counter() - t_start:.0f} s")
    out = HERE / "results" / "adapter_coco.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"splits": rows, "summary": summary, "args": {k: str(v) for k, v in
                                                                           vars(args).items()}}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
