"""One text query from the shell on a small collection, whole process, vs the references in the same run.

    engine search NAME "a dog on a beach"         (ONNX text side: no torch, no sentence-transformers)
    python -c "import torch"                      (what any torch query path pays before its first op)
    python -c "import sentence_transformers"      (what the query paid before)
    engine search NAME "…" --device cpu with ENGINE_ONNX=0 (the torch path, for the same answer)

Medians of --repeat alternated runs; wall and CPU (user + sys) seconds, peak RSS. Goal: engine ≤ 1.0 s wall.

    python benchmarks/cold_query.py [--repeat 7]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENGINE = [sys.executable, "-m", "engine"]  # what the `engine` console script runs


def timed(cmd: list[str], env: dict) -> tuple[float, float, float]:
    """(wall s, CPU s, peak MiB) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, int(out.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "cold_query.json")
    args = ap.parse_args()
    from engine.display import format_table
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(HERE.parent), "ENGINE_CACHE": os.environ.get(
            "ENGINE_CACHE", str(Path(tmp) / "cache"))}
        texts = Path(tmp) / "docs.csv"
        texts.write_text("id,text\n" + "".join(f"d{i},document {i} about {w}\n" for i, w in enumerate(
            ["a dog on a beach", "a cat on a sofa", "a red car", "bread baking", "roman history"] * 40)))
        root = Path(tmp) / "indexes"
        subprocess.run([*ENGINE, "build", "docs", "--texts", str(texts), "--root", str(root), "-q"], env=env,
                       check=True)
        query = [*ENGINE, "search", "docs", "a dog on a beach", "--root", str(root), "-q", "--json"]
        subprocess.run(query, env=env, check=True, capture_output=True)  # exports the text side once
        cases = {"engine search (ONNX)": (query, env),
                 "engine search (torch, ENGINE_ONNX=0)": (query, {**env, "ENGINE_ONNX": "0"}),
                 "python -c 'import torch'": ([sys.executable, "-c", "import torch"], env),
                 "python -c 'import sentence_transformers'": ([sys.executable, "-c", (
                     "import engine.core.encoders.torchvision_patch, sentence_transformers")], env),
                 "python -c 'import faiss, onnxruntime'": ([sys.executable, "-c", "import faiss, onnxruntime"], env)}
        runs: dict[str, list] = {k: [] for k in cases}
        for _ in range(args.repeat):
            for label, (cmd, e) in cases.items():
                runs[label].append(timed(cmd, e))
                print(f"{label}: wall {runs[label][-1][0]:.2f} s, CPU {runs[label][-1][1]:.2f} s", flush=True)
    load = os.getloadavg()
    rows, result = [], {"repeat": args.repeat, "load_after": load, "cores": os.cpu_count(), "cases": {}}
    base = statistics.median(w for w, _, _ in runs["python -c 'import torch'"])
    for label, vals in runs.items():
        wall, cpu, mem = (statistics.median(v[i] for v in vals) for i in range(3))
        result["cases"][label] = {"wall_s": wall, "cpu_s": cpu, "peak_mib": mem, "runs": vals}
        rows.append([label, f"{wall:.2f}", f"{cpu:.2f}", f"{mem:.0f}", f"{wall / base:.2f}"])
    print(f"\ncold text query, whole process, medians of {args.repeat} (load {load[0]:.1f} on "
          f"{os.cpu_count()} cores)\n")
    print(format_table(["command", "wall s", "CPU s", "peak MiB", "wall / import torch"], rows, markdown=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
