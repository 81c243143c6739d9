"""The style image → LoRA comparison on a generated NTCIR-B-layout set (see make_style_set.py).

1. generates the set if it is not there yet (real photos × deterministic style transforms);
2. cross-validates every representation × scorer × content removal × text-prior weight on train.csv,
   grouped by content image (`engine lora eval`);
3. builds the adapter with the best CV configuration, submits the held-out test images
   (content-disjoint from train) and scores the run against the hidden answers (`engine lora
   build / submit`, `engine eval`).

Prints Markdown tables and writes benchmarks/results/lora_cv.json.

    python benchmarks/lora_cv.py [--set /tmp/engine-style-set] [--styles 32] [--contents 24] [--folds 5]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from make_style_set import COCO_MINI, make_style_set  # noqa: E402

from engine.eval.evaluate import evaluate_files  # noqa: E402
from engine.io.atomic import write_json  # noqa: E402
from engine.tasks.lora.cv import EvalOptions, cross_validate, cv_to_json, format_cv_table  # noqa: E402
from engine.tasks.lora.features import ExtractOptions  # noqa: E402
from engine.tasks.lora.model import LoraConfig  # noqa: E402
from engine.tasks.lora.pipeline import build_adapter, submit_run  # noqa: E402


def pivot_tables(rows: list[dict]) -> str:
    """Two compact Markdown tables: MRR / R@1 / R@5 of representation × scorer with content removal off and
    on (no text prior), and what the text prior does to each scorer's best configuration."""
    by = {(r["representation"], r["scorer"], r["content_removal"], r["text_weight"]): r for r in rows}
    reps = list(dict.fromkeys(r["representation"] for r in rows if r["scorer"] != "text"))
    scorers = list(dict.fromkeys(r["scorer"] for r in rows if r["scorer"] != "text"))
    weights = sorted({r["text_weight"] for r in rows if r["scorer"] != "text"})

    def cell(r: dict | None) -> str:
        return f"{r['mrr']:.3f} / {r['r@1']:.3f} / {r['r@5']:.3f}" if r else "-"

    out = ["| representation | scorer | content removal off: MRR / R@1 / R@5 | content removal on: MRR / R@1 / R@5 |",
           "|---|---|---|---|"]
    for rep in reps:
        for sc in scorers:
            out.append(f"| {rep} | {sc} | {cell(by.get((rep, sc, False, 0.0)))} | {cell(by.get((rep, sc, True, 0.0)))} |")
    out += ["", "| scorer (its best representation, content removal on) | "
            + " | ".join(f"text prior {w:g}" if w else "no text prior" for w in weights) + " |",
            "|---|" + "---|" * len(weights)]
    for sc in scorers:
        best_rep = max(reps, key=lambda rep: by.get((rep, sc, True, 0.0), {"mrr": -1})["mrr"])
        out.append(f"| {sc} ({best_rep}) | " + " | ".join(cell(by.get((best_rep, sc, True, w))) for w in weights) + " |")
    text = next((r for r in rows if r["scorer"] == "text"), None)
    if text:
        out.append(f"| text prior alone (zero-shot) | {cell(text)} |" + " |" * (len(weights) - 1))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", type=Path, default=Path(tempfile.gettempdir()) / "engine-style-set",
                    help="folder of the generated set (made when missing)")
    ap.add_argument("--photos", default=str(COCO_MINI) if COCO_MINI.is_dir() else "skimage")
    ap.add_argument("--styles", type=int, default=32)
    ap.add_argument("--contents", type=int, default=24)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--folds", type=int, default=EvalOptions.folds)
    ap.add_argument("--image-model", default=ExtractOptions.image_model)
    ap.add_argument("--text-model", default=ExtractOptions.text_model)
    ap.add_argument("--text-weights", default="0,0.25,0.5")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lora_cv.json")
    args = ap.parse_args(argv)

    started = time.time()
    if not (args.set / "train.csv").is_file():
        print(make_style_set(args.set, args.photos, args.styles, args.contents, args.size))
    weights = tuple(float(w) for w in args.text_weights.split(","))
    extract = ExtractOptions(image_model=args.image_model, text_model=args.text_model)
    cv = cross_validate(args.set / "train.csv", args.set / "images", args.set / "models.csv",
                        EvalOptions(folds=args.folds, text_weights=weights), extract)
    cv_seconds = time.time() - started
    print(f"\n{cv.n_images} training images, {cv.n_loras} LoRAs, {cv.n_contents} content images, {cv.folds}-fold "
          f"CV grouped by content ({cv.image_model}, text prior {cv.text_model})\n")
    print(pivot_tables(cv.rows))
    print("\nevery configuration, best first:\n")
    print(format_cv_table(cv, markdown=True))

    best = max((r for r in cv.rows if r["scorer"] != "text"), key=lambda r: r["mrr"])
    config = LoraConfig(rep=best["representation"], scorer=best["scorer"], content_removal=best["content_removal"],
                        text_weight=best["text_weight"])
    with tempfile.TemporaryDirectory() as tmp:
        build_adapter(args.set / "train.csv", args.set / "images", args.set / "models.csv", "bench", tmp, config,
                      extract)
        run = Path(tmp) / "test.run"
        submit_run(args.set / "test_image_ids_from_tree.txt", run, "bench", tmp, args.set / "images")
        test = evaluate_files(run, args.set / "test-qrels.txt", "mrr,recall@1,recall@5").means
    print(f"\nheld-out test ({config.label}): MRR {test['mrr']:.4f}  R@1 {test['recall@1']:.4f}  "
          f"R@5 {test['recall@5']:.4f}")
    write_json(args.out, {"set": {"folder": str(args.set), "photos": args.photos, "styles": cv.n_loras,
                                  "train_images": cv.n_images, "train_contents": cv.n_contents, "size": args.size},
                          "cv": cv_to_json(cv), "best": best, "test": test,
                          "seconds": round(time.time() - started, 1), "cv_seconds": round(cv_seconds, 1)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
