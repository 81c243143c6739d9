"""Text builds on the CPU: the ONNX session the queries use against sentence-transformers' torch encode, and a
small build from the shell against a cold query, in one run (sides alternated, medians, paired ratios, the load
average recorded: the machine is shared).

    encode   N synthetic documents of 8–80 words (benchmarks/peers.py's) embedded by MiniLM three ways, each
             in a fresh process after the model is loaded: torch (`SentenceTransformer.encode`, what builds
             used), the engine's ONNX encoder (`encode_texts`, what CPU builds use now), and a raw onnxruntime
             loop over the same export (tokenizers, batches of 64 in order, mean pooling); texts per second
             and the largest difference from torch's rows
    small    `engine build NAME --texts 50.csv --force` vs a cold `engine search NAME "…"` of the result, whole
             processes (the export cached, as after a first build); with --baseline DIR, that checkout's build
             of the same file too

    python benchmarks/onnx_build.py [--n 20000] [--repeat 3] [--baseline DIR] [--sections encode,small]
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


def work_encode(way: str, n: int, out: str) -> dict:
    texts = documents(n)
    if way == "torch":
        from engine.core.encoders.registry import load_encoder
        enc = load_encoder(SPEC)
        run = lambda: enc.encode_texts(texts, batch_size=64)  # noqa: E731
    elif way == "engine":
        from engine.core.build.chunks import chunk_bounds, encode_local
        from engine.core.build.from_source import build_encoder
        from engine.core.build.options import BuildOptions
        from engine.core.sources import Item
        o = BuildOptions()
        enc = build_encoder(SPEC, "text", o)
        assert enc.info.get("runtime") == "onnx"
        items = [Item(str(i), t) for i, t in enumerate(texts)]
        todo = range(len(chunk_bounds(len(items), o.chunk_size)))
        run = lambda: np.concatenate([d["emb"] for _, d in encode_local(enc, "text", items, todo, o)])  # noqa: E731
    else:
        import onnxruntime as ort
        from tokenizers import Tokenizer
        from engine.core.encoders.onnx_text import export_dir
        folder = export_dir("all-MiniLM-L6-v2")
        cfg = json.loads((folder / "config.json").read_text())
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.enable_truncation(max_length=cfg["max_seq_length"])
        tok.enable_padding(pad_id=cfg["pad_id"])
        sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])

        def run() -> np.ndarray:
            rows = []
            for lo in range(0, len(texts), 64):
                enc = tok.encode_batch(texts[lo:lo + 64])
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
    return {"texts_per_s": n / wall, "texts_per_cpu_s": n / cpu}


def section_encode(n: int, repeat: int) -> dict:
    ways = ["torch", "engine", "raw_onnx"]
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeat):
            for way in (ways if r % 2 == 0 else ways[::-1]):
                out = f"{tmp}/{way}.npy"
                code = (f"import json, sys; sys.path.insert(0, {str(HERE)!r}); import onnx_build as b; "
                        f"print(json.dumps(b.work_encode({way!r}, {n}, {out!r})))")
                p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})
                if p.returncode:
                    raise SystemExit(p.stderr[-3000:])
                res = json.loads(p.stdout.strip().splitlines()[-1])
                runs[way].append(res)
                print(f"  encode run {r + 1} {way}: {res['texts_per_s']:.0f} texts/s", flush=True)
        ref = np.load(f"{tmp}/torch.npy")
        diff = {w: float(np.abs(np.load(f"{tmp}/{w}.npy") - ref).max()) for w in ways}
    table = {w: {"texts_per_s": statistics.median(x["texts_per_s"] for x in runs[w]),
                 "texts_per_cpu_s": statistics.median(x["texts_per_cpu_s"] for x in runs[w]),
                 "vs_torch": statistics.median(a["texts_per_s"] / b["texts_per_s"]
                                               for a, b in zip(runs[w], runs["torch"])),
                 "max_abs_diff_vs_torch": diff[w]} for w in ways}
    print(f"\n== CPU text encode, {n:,} texts, medians of {repeat} ==")
    print(f"{'way':10s} {'texts/s':>9s} {'texts/CPU s':>12s} {'× torch (paired)':>17s} {'max |Δ| vs torch':>17s}")
    for w in ways:
        t = table[w]
        print(f"{w:10s} {t['texts_per_s']:9.0f} {t['texts_per_cpu_s']:12.0f} {t['vs_torch']:17.2f} "
              f"{t['max_abs_diff_vs_torch']:17.2e}")
    return {"n": n, "table": table, "runs": runs}


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", default="encode,small")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "onnx_build.json")
    a = ap.parse_args()
    result: dict = {"load_before": os.getloadavg()}
    if "encode" in a.sections:
        result["encode"] = section_encode(a.n, a.repeat)
    if "small" in a.sections:
        result["small"] = section_small(a.repeat, a.baseline)
    result["load_after"] = os.getloadavg()
    print(f"\nload average before {result['load_before']}, after {result['load_after']}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
