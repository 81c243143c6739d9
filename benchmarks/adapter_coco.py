"""Adapter over the offline default (`conse`) fitted on coco-mini caption–photo pairs: caption → image R@1 on
photos it never saw, repeated random splits by photo (mean ± std), with a paired test per split.

    flock /work/heavy.lock python benchmarks/adapter_coco.py [--splits 10] [--test-share 0.25]

Per split: the photos are split (train / test); the adapter is fitted on the train photos' captions (its
early stopping holds out a slice of those); test captions are ranked against every photo (the 80-photo
gallery, as the 0.415 baseline) and against the test photos alone. The fitted photos' scores are never shown.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

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


def r_at_1(q: np.ndarray, gallery: np.ndarray, gold: np.ndarray) -> np.ndarray:
    return (np.argmax(q @ gallery.T, axis=1) == gold).astype(float)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def main() -> None:
    from scipy.stats import wilcoxon

    from engine.core.adapters.fit import FitOptions, fit_maps
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--test-share", type=float, default=0.25)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/coco_mini_conse.npz"))
    args = ap.parse_args()
    caps, photos, owner = embeddings(args.cache)
    owner = np.array(owner)
    print(f"all 400 captions vs 80 photos, conse: R@1 {r_at_1(caps, photos, owner).mean():.3f}")
    rows = []
    for split in range(args.splits):
        rng = np.random.default_rng(1000 + split)
        test = np.sort(rng.choice(80, int(80 * args.test_share), replace=False))
        is_test = np.isin(owner, test)
        t0 = time.perf_counter()
        wl, wr, rep = fit_maps(caps[~is_test], photos[owner[~is_test]], [str(o) for o in owner[~is_test]],
                               shared=False, options=FitOptions(seed=split))
        secs = time.perf_counter() - t0
        q0, q1 = caps[is_test], unit(caps[is_test] @ wl)
        g1 = unit(photos @ wr)
        gold = owner[is_test]
        pos = {p: n for n, p in enumerate(test)}
        gold_t = np.array([pos[o] for o in gold])
        b_all, a_all = r_at_1(q0, photos, gold), r_at_1(q1, g1, gold)
        b_t, a_t = r_at_1(q0, photos[test], gold_t), r_at_1(q1, g1[test], gold_t)
        p = wilcoxon(a_all, b_all, zero_method="zsplit").pvalue if (a_all != b_all).any() else 1.0
        rows.append({"split": split, "base_r1_80": b_all.mean(), "adapted_r1_80": a_all.mean(),
                     "base_r1_test": b_t.mean(), "adapted_r1_test": a_t.mean(), "wilcoxon_p": float(p),
                     "steps": rep["steps"], "fit_s": secs})
        print(f"split {split}: R@1 (80 photos) {b_all.mean():.3f} → {a_all.mean():.3f}   "
              f"(test photos only) {b_t.mean():.3f} → {a_t.mean():.3f}   p={p:.3g}  steps={rep['steps']}")
    keys = ("base_r1_80", "adapted_r1_80", "base_r1_test", "adapted_r1_test")
    summary = {k: (float(np.mean([r[k] for r in rows])), float(np.std([r[k] for r in rows]))) for k in keys}
    print("\n| held-out captions | conse | conse + adapter |\n|---|---|---|")
    print(f"| R@1 vs all 80 photos | {summary['base_r1_80'][0]:.3f} ± {summary['base_r1_80'][1]:.3f} | "
          f"{summary['adapted_r1_80'][0]:.3f} ± {summary['adapted_r1_80'][1]:.3f} |")
    print(f"| R@1 vs the {int(80 * args.test_share)} test photos | {summary['base_r1_test'][0]:.3f} ± "
          f"{summary['base_r1_test'][1]:.3f} | {summary['adapted_r1_test'][0]:.3f} ± "
          f"{summary['adapted_r1_test'][1]:.3f} |")
    out = HERE / "results" / "adapter_coco.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"splits": rows, "summary": summary, "args": {k: str(v) for k, v in
                                                                           vars(args).items()}}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
