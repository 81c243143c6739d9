"""Builds on the CPU: the ONNX sessions the queries use against torch's own encode, and a small build from the
shell against a cold query, in one run (sides alternated, medians, paired ratios, the load average recorded:
the machine is shared).

    encode   N synthetic documents of 8–80 words (benchmarks/peers.py's) embedded by MiniLM three ways, each
             in a fresh process after the model is loaded: torch (`SentenceTransformer.encode`), the engine's
             build path (`build_encoder` + the build's chunks: the ONNX session, longest texts first), and a raw
             onnxruntime loop over the same export (tokenizers, batches of 64 in order, mean pooling); texts per
             second and per CPU second, and the largest difference from torch's rows
    images   --images JPEGs (the bundled photos, mirrored, rotated, cropped) embedded by each --image-models
             spec two ways: torch (the whole encoder's `encode_images`) and the engine's CPU build path (ONNX)
    small    `engine build NAME --texts 50.csv --force` vs a cold `engine search NAME "…"` of the result, whole
             processes (the export cached, as after a first build); with --baseline DIR, that checkout's build
             of the same file too

    python benchmarks/onnx_build.py [--n 20000] [--images 256] [--image-models conse,effnet] [--repeat 3]
                                    [--baseline DIR] [--sections encode,images,small]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from cold_query import timed  # noqa: E402  (benchmarks share their helpers)
from peers import documents, write_csv  # noqa: E402

SPEC = "sbert:all-MiniLM-L6-v2"


def work_encode(way: str, n: int, out: str, spec: str = SPEC, photos: str = "") -> dict:
    """In a fresh process: encode n items one `way` (texts of `documents(n)`, or the image files in `photos`),
    timed after the model is loaded; the rows saved to `out`."""
    from engine.core.storage.builder.chunks import chunk_bounds, encode_local
    from engine.core.storage.builder.from_source import build_encoder
    from engine.core.storage.builder.options import BuildOptions
    from engine.core.encoders.registry import load_encoder
    from engine.core.sources import Item
    kind = "image" if photos else "text"
    sources = sorted(str(p) for p in Path(photos).iterdir())[:n] if photos else documents(n)
    o = BuildOptions()
    if way == "torch":  # the whole encoder: SentenceTransformer.encode, or the timm model's forward
        enc = load_encoder(spec)
        run = ((lambda: enc.encode_texts(sources, batch_size=64)) if kind == "text"  # noqa: E731
               else lambda: enc.encode_images(sources, batch_size=o.batch_size, workers=o.workers).embeddings)
    elif way == "engine":  # what `engine build` runs on the CPU: its encoder, its chunks, its batches
        enc = build_encoder(spec, kind, o)
        assert enc.info.get("runtime") == "onnx", enc.info
        items = [Item(str(i), t) for i, t in enumerate(sources)]
        todo = range(len(chunk_bounds(len(items), o.chunk_size)))
        run = lambda: np.concatenate([d["emb"] for _, d in encode_local(enc, kind, items, todo, o)])  # noqa: E731
    else:  # a raw onnxruntime loop over the same text export
        import onnxruntime as ort
        from tokenizers import Tokenizer
        from engine.core.encoders.onnx_text import export_dir
        folder = export_dir(spec.partition(":")[2])
        cfg = json.loads((folder / "config.json").read_text())
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.enable_truncation(max_length=cfg["max_seq_length"])
        tok.enable_padding(pad_id=cfg["pad_id"])
        sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])

        def run() -> np.ndarray:
            rows = []
            for lo in range(0, len(sources), 64):
                enc = tok.encode_batch(sources[lo:lo + 64])
                ids = np.asarray([e.ids for e in enc], np.int64)
                mask = np.asarray([e.attention_mask for e in enc], np.int64)
                feed = {"input_ids": ids, "attention_mask": mask,
                        "token_type_ids": np.asarray([e.type_ids for e in enc], np.int64)}
                hidden = sess.run(None, {k: feed[k] for k in cfg["inputs"]})[0]
                m = mask[..., None].astype(np.float32)
                pooled = (hidden * m).sum(1) / m.sum(1)
                rows.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
            return np.concatenate(rows)
    t, c = time.perf_counter(), time.process_time()
    emb = np.asarray(run(), dtype=np.float32)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    np.save(out, emb)
    return {"per_s": n / wall, "per_cpu_s": n / cpu, "load": os.getloadavg()[0]}


def write_photos(folder: Path, n: int) -> None:
    """n JPEG files from the bundled photos: each photo, mirrored, rotated and cropped in turn (no two alike)."""
    from PIL import Image, ImageOps

    from engine.core.demo import demo_photos
    folder.mkdir(parents=True, exist_ok=True)
    photos = [Image.open(p).convert("RGB") for p in demo_photos()]
    for i in range(n):
        img, turn = photos[i % len(photos)], i // len(photos)
        img = ImageOps.mirror(img) if turn % 2 else img
        img = img.rotate(90 * (turn // 2 % 4), expand=True)
        w, h = img.size
        cut = (turn // 8) % 10
        img.crop((cut, cut, w - cut, h - cut)).save(folder / f"p{i:05d}.jpg", quality=92)


def section_encode(n: int, repeat: int, spec: str = SPEC, photos: Path | None = None) -> dict:
    """The ways alternated, each run in a fresh process: items per second and per CPU second (medians), paired
    ratios to torch, the largest difference from torch's rows."""
    ways = ["torch", "engine"] + (["raw_onnx"] if photos is None else [])
    unit = "images" if photos is not None else "texts"
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeat):
            for way in (ways if r % 2 == 0 else ways[::-1]):
                out = f"{tmp}/{way}.npy"
                code = (f"import json, sys; sys.path.insert(0, {str(HERE)!r}); import onnx_build as b; "
                        f"print(json.dumps(b.work_encode({way!r}, {n}, {out!r}, {spec!r}, {str(photos or '')!r})))")
                p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})
                if p.returncode:
                    raise SystemExit(p.stderr[-3000:])
                res = json.loads(p.stdout.strip().splitlines()[-1])
                runs[way].append(res)
                print(f"  {spec} run {r + 1} {way}: {res['per_s']:.1f} {unit}/s, {res['per_cpu_s']:.1f} per CPU s "
                      f"(load {res['load']:.1f})", flush=True)
        ref = np.load(f"{tmp}/torch.npy")
        diff = {w: float(np.abs(np.load(f"{tmp}/{w}.npy") - ref).max()) for w in ways}

    def paired(w: str, key: str) -> float:
        return statistics.median(a[key] / b[key] for a, b in zip(runs[w], runs["torch"]))
    table = {w: {"per_s": statistics.median(x["per_s"] for x in runs[w]),
                 "per_s_min_max": [min(x["per_s"] for x in runs[w]), max(x["per_s"] for x in runs[w])],
                 "per_cpu_s": statistics.median(x["per_cpu_s"] for x in runs[w]),
                 "vs_torch": paired(w, "per_s"), "vs_torch_per_cpu_s": paired(w, "per_cpu_s"),
                 "max_abs_diff_vs_torch": diff[w]} for w in ways}
    print(f"\n== CPU encode, {spec}, {n:,} {unit}, medians of {repeat} (min–max) ==")
    print(f"{'way':10s} {unit + '/s':>20s} {'per CPU s':>10s} {'× torch':>8s} {'× torch per CPU s':>18s} "
          f"{'max |Δ| vs torch':>17s}")
    for w in ways:
        t = table[w]
        span = f"{t['per_s']:.1f} ({t['per_s_min_max'][0]:.1f}–{t['per_s_min_max'][1]:.1f})"
        print(f"{w:10s} {span:>20s} {t['per_cpu_s']:10.1f} {t['vs_torch']:8.2f} {t['vs_torch_per_cpu_s']:18.2f} "
              f"{t['max_abs_diff_vs_torch']:17.2e}")
    return {"n": n, "spec": spec, "unit": unit, "table": table, "runs": runs}


def section_small(repeat: int, baseline: Path | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "50.csv"
        write_csv(csv, documents(50))
        root = Path(tmp) / "idx"
        build = [sys.executable, "-m", "engine", "build", "c", "--texts", str(csv), "--root", str(root), "-q",
                 "--force"]
        search = [sys.executable, "-m", "engine", "search", "c", "a garden by the river", "--root", str(root),
                  "-q", "--json"]
        timed(build, env)  # the export cached, the collection there
        timed(search, env)  # the search's argument shape cached, as after any first search
        cases = {"build": (build, env), "search": (search, env)}
        if baseline is not None:
            base_build = build[:-4] + ["--root", str(Path(tmp) / "base"), "-q", "--force"]
            cases["baseline_build"] = (base_build, {**os.environ, "PYTHONPATH": str(baseline.resolve())})
            timed(*cases["baseline_build"])
        runs: dict[str, list] = {k: [] for k in cases}
        for r in range(repeat):
            for name in (list(cases) if r % 2 == 0 else list(cases)[::-1]):
                wall, cpu, mib = timed(*cases[name])
                runs[name].append({"wall_s": wall, "cpu_s": cpu, "peak_mib": mib})
                print(f"  small run {r + 1} {name}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
    table = {k: {m: statistics.median(x[m] for x in v) for m in ("wall_s", "cpu_s", "peak_mib")}
             for k, v in runs.items()}
    for k in table:
        table[k]["vs_search_wall"] = statistics.median(a["wall_s"] / b["wall_s"] for a, b in zip(runs[k], runs["search"]))
        table[k]["vs_search_cpu"] = statistics.median(a["cpu_s"] / b["cpu_s"] for a, b in zip(runs[k], runs["search"]))
    print(f"\n== 50 short texts: engine build vs a cold engine search, medians of {repeat} ==")
    print(f"{'command':16s} {'wall s':>8s} {'CPU s':>7s} {'MiB':>6s} {'× search wall':>14s} {'× search CPU':>13s}")
    for k, t in table.items():
        print(f"{k:16s} {t['wall_s']:8.2f} {t['cpu_s']:7.2f} {t['peak_mib']:6.0f} {t['vs_search_wall']:14.2f} "
              f"{t['vs_search_cpu']:13.2f}")
    return {"table": table, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="encode,images,small")
    ap.add_argument("--n", type=int, default=20_000, help="texts encoded")
    ap.add_argument("--images", type=int, default=256, help="images encoded")
    ap.add_argument("--image-models", default="conse,effnet")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "onnx_build.json")
    a = ap.parse_args()
    result: dict = {"load_before": os.getloadavg(), "cores": os.cpu_count()}
    if "encode" in a.sections:
        result["encode"] = section_encode(a.n, a.repeat)
    if "images" in a.sections:
        with tempfile.TemporaryDirectory() as tmp:
            write_photos(Path(tmp), a.images)
            result["images"] = [section_encode(a.images, a.repeat, spec, Path(tmp))
                                for spec in a.image_models.split(",")]
    if "small" in a.sections:
        result["small"] = section_small(a.repeat, a.baseline)
    result["load_after"] = os.getloadavg()
    print(f"\nload average before {result['load_before']}, after {result['load_after']}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
