"""The image build pipeline (decode threads running ahead + model) vs the raw model forward on the same decoded
batches, under glibc's default allocator settings and under the engine's (`images.keep_freed_memory`).

Each allocator setting runs in its own process (mallopt is process-wide); inside it, the raw forward and the
pipeline are timed alternately, --repeat times, medians. Goal: pipeline ≥ 0.95× raw forward.

    python benchmarks/image_pipeline.py [--images DIR] [--model conse] [--batch 32] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(images: Path, model: str, batch: int, repeat: int, workers: int) -> dict:
    import resource

    import torch

    from engine.core.encoders.registry import load_encoder
    from engine.core.images import (
        encode_image_files,
        find_images,
        keep_freed_memory,
        load_image,
    )
    tuned = keep_freed_memory()
    paths = [str(p) for p in find_images(images)]
    enc = load_encoder(model)
    tensors = [enc.preprocess(load_image(p)) for p in paths]
    stacked = [torch.stack(tensors[i:i + batch]) for i in range(0, len(tensors), batch)]
    enc.encode_image_batch(stacked[0])  # warm-up
    raw, pipe, faults = [], [], []
    for _ in range(repeat):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = time.perf_counter()
        for b in stacked:
            enc.encode_image_batch(b)
        raw.append(len(paths) / (time.perf_counter() - t))
        faults.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / len(paths))
        t = time.perf_counter()
        encode_image_files(enc, paths, batch_size=batch, workers=workers)
        pipe.append(len(paths) / (time.perf_counter() - t))
    return {"allocator_tuned": tuned, "images": len(paths), "raw_img_s": statistics.median(raw),
            "pipeline_img_s": statistics.median(pipe), "ratio": statistics.median(pipe) / statistics.median(raw),
            "page_faults_per_image_raw": statistics.median(faults), "raw_runs": raw, "pipeline_runs": pipe}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    coco = HERE.parent.parent / "shared" / "data" / "coco-mini" / "images"
    ap.add_argument("--images", type=Path, default=coco if coco.is_dir() else None)
    ap.add_argument("--model", default="conse")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "image_pipeline.json")
    args = ap.parse_args()
    if args.images is None:
        raise SystemExit("give --images DIR (../shared/data/coco-mini/images is not here)")
    if args.child:
        print(json.dumps(measure(args.images, args.model, args.batch, args.repeat, args.workers)))
        return
    from engine.display import format_table
    result = {"model": args.model, "batch": args.batch, "workers": args.workers, "cores": os.cpu_count()}
    rows = []
    for label, malloc in (("glibc defaults", "0"), ("engine (mallopt)", "1")):
        out = subprocess.run([sys.executable, __file__, "--child", "--images", str(args.images), "--model", args.model,
                              "--batch", str(args.batch), "--repeat", str(args.repeat), "--workers", str(args.workers)],
                             env={**os.environ, "ENGINE_MALLOC": malloc, "PYTHONPATH": str(HERE.parent)},
                             capture_output=True, text=True, check=True)
        r = result[label] = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append([label, f"{r['raw_img_s']:.1f}", f"{r['pipeline_img_s']:.1f}", f"{r['ratio']:.2f}",
                     f"{r['page_faults_per_image_raw']:.0f}"])
    result["load_after"] = os.getloadavg()
    print(f"\nimage pipeline vs raw forward ({args.model}, batch {args.batch}, {result[label]['images']} images, "
          f"{args.workers} decode threads, load {result['load_after'][0]:.1f} on {os.cpu_count()} cores)\n")
    print(format_table(["allocator", "raw forward img/s", "pipeline img/s", "pipeline / raw", "page faults / image"],
                       rows, markdown=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
