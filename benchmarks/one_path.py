"""`engine search` (cold, one text query) and `engine search --rerank` through the one pipeline path, against an
older checkout of the engine: whole processes, alternated old/new, the ratio taken pair by pair, of wall and of CPU (user + system) seconds.

    engine search docs "QUERY" --json -q                                       (cold: imports, model, index)
    engine search docs "QUERY" --json -q --rerank cross:DIR --rerank-depth 50  (+ a MiniLM-sized cross-encoder)

on a text collection built from a generated CSV (`engine build docs --texts docs.csv`). Each pair also checks
that both trees print the same hits (ids, order, scores, metadata). Goal: new/old within 1.05.

    python benchmarks/one_path.py --old /path/to/older/checkout [--runs 9] [--docs 2000]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORDS = ("river flood storm town council bridge harbour festival museum school library stadium winter summer "
         "autumn spring bread oven market train station road castle forest mountain lake island garden").split()


def run(tree: Path, args: list[str], env: dict) -> tuple[tuple[float, float], str]:
    """((wall seconds, CPU seconds: user + system), stdout) of `engine ARGS` with the engine of `tree`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "engine", *args], env={**env, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise SystemExit(f"{tree}: engine {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return (wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime), out.stdout


def paired(old: Path, new: Path, args: list[str], env: dict, runs: int) -> dict:
    """Alternated runs (old, new, new, old, …) after one warm-up each; the same answer checked every time."""
    _, want = run(old, args, env)
    _, got = run(new, args, env)
    if json.loads(want) != json.loads(got):
        raise SystemExit(f"the trees answer differently:\n{want}\n{got}")
    olds, news = [], []
    for n in range(runs):
        order = (old, new) if n % 2 == 0 else (new, old)
        for tree in order:
            times, out = run(tree, args, env)
            if json.loads(out) != json.loads(want):
                raise SystemExit(f"{tree} answered differently on run {n}")
            (olds if tree == old else news).append(times)
    out = {}
    for i, what in enumerate(("wall", "cpu")):
        a, b = [t[i] for t in olds], [t[i] for t in news]
        ratios = [y / x for x, y in zip(a, b)]
        out[what] = {"old_s": statistics.median(a), "new_s": statistics.median(b),
                     "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                     "old_runs": a, "new_runs": b}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, required=True, help="an older checkout of the engine (its root folder)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "one_path.json")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from rerank_cost import minilm_sized_cross_encoder

    from engine.display import format_table
    new = HERE.parent
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="one-path-") as tmp:
        tmp_path = Path(tmp)
        src = tmp_path / "docs.csv"
        src.write_text("id,text,topic\n" + "".join(
            f"d{i},{' '.join(rng.choices(WORDS, k=30))},{rng.choice(['a', 'b', 'c'])}\n" for i in range(args.docs)))
        env = dict(os.environ)
        root = tmp_path / "idx"
        run(new, ["build", "docs", "--texts", str(src), "--root", str(root), "-q"], env)
        ce = minilm_sized_cross_encoder(tmp_path / "ce")
        query = "flood warnings for the harbour town"
        base = ["search", "docs", query, "--root", str(root), "--json", "-q"]
        cases = {"engine search (cold)": base,
                 "engine search --rerank": [*base, "--rerank", f"cross:{ce}", "--rerank-depth", "50"]}
        results = {name: paired(args.old, new, cmd, env, args.runs) for name, cmd in cases.items()}
    rows = [[name, what, f"{r['old_s']:.3f}", f"{r['new_s']:.3f}", f"{r['ratio_median']:.3f}",
             f"{r['ratio_min']:.3f}–{r['ratio_max']:.3f}"]
            for name, both in results.items() for what, r in both.items()]
    print(format_table(["command", "seconds", "old (median)", "new (median)", "new/old (median of pairs)",
                        "new/old range"], rows, markdown=True, left=2))
    load = os.getloadavg()
    print(f"{args.runs} alternated pairs each, {args.docs} docs; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}")
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({"runs": args.runs, "docs": args.docs, "loadavg": load, "cases": results},
                                   indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
