"""What the pipeline runner itself costs per run: a one-stage pipeline (a stage that computes nothing, so only
the runner is timed) run on one query, with no stage cache (what `engine search` and the service pay per
request) and with an in-memory one (what an experiment pays per stage), this checkout side by side with an
earlier one (`--baseline DIR`, e.g. `git archive BASE | tar -x -C DIR`).

Each side runs in a fresh process (`PYTHONPATH` = that side's checkout), the sides alternated round by round;
the table gives each side's median microseconds per run and the median of the per-round ratios.

    python benchmarks/pipeline_runner.py [--baseline DIR] [--rounds 5] [--runs 20000]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"

CHILD = """
import sys, time
from engine.core.ranking.pipeline import Context, Query, Stage
from engine.core.ranking.pipeline.run import run_pipeline
from engine.io.ranking import Ranking
try:
    from engine.core.ranking.pipeline.cache import StageCache
except ImportError:
    StageCache = None

class Nothing(Stage):
    name = "nothing"
    def transform(self, queries, run, ctx):
        return {q.qid: Ranking.of([("a", 1.0)]) for q in queries}

stage, queries, runs, cached = Nothing(), [Query("q", "a query")], int(sys.argv[1]), sys.argv[2] == "memory"
t0 = time.perf_counter()
for _ in range(runs):
    run_pipeline(stage, queries, Context(cache=StageCache(None) if cached else None))
print((time.perf_counter() - t0) / runs * 1e6)
"""


def one(side: Path, runs: int, cache: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(runs), cache], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(side)})
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="an earlier checkout to compare with")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20_000)
    ap.add_argument("--out", type=Path, default=RESULTS / "pipeline_runner.json")
    a = ap.parse_args()
    sides = {"head": REPO, **({"baseline": a.baseline.resolve()} if a.baseline else {})}
    result: dict = {"runs": a.runs, "rounds": a.rounds, "load_before": os.getloadavg()[0], "cases": {}}
    rows = []
    for cache in ("none", "memory"):
        got: dict[str, list[float]] = {s: [] for s in sides}
        for r in range(a.rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for s in order:
                got[s].append(one(sides[s], a.runs, cache))
        case = {s: {"median_us": round(statistics.median(v), 1), "us": [round(x, 1) for x in v]}
                for s, v in got.items()}
        if "baseline" in got:
            case["ratio"] = round(statistics.median(h / b for h, b in zip(got["head"], got["baseline"])), 3)
        result["cases"][cache] = case
        rows.append([f"cache: {cache}"] + [f"{case[s]['median_us']:.1f}" for s in sides]
                    + ([f"{case['ratio']:.2f}"] if "ratio" in case else []))
    result["load_after"] = os.getloadavg()[0]
    heads = ["one-stage run, µs"] + list(sides) + (["head / baseline"] if a.baseline else [])
    print("| " + " | ".join(heads) + " |\n|" + "---|" * len(heads))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
