"""What a pipeline costs over the commands it replaces, and what the stage cache saves.

1. `retrieve >> rerank % k` from a pipeline file against `engine search --rerank` on the same queries and the
   same collection (cold processes, alternated A B A B so a drifting machine hits both alike; results checked
   equal).
2. A second `engine experiment` that changes only the last stage (the fusion weights over a reranked dense run
   and BM25) against the first, with the same stage cache: the second reads retrieval and reranking back.

Prints a table and writes JSON (default benchmarks/results/pipeline_cost.json). Run it on a quiet machine (no
other heavy jobs; the figures are whole-process CPU and wall seconds, medians over the rounds).
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

RESULTS = Path(__file__).resolve().parent / "results"
WORDS = ("river flood rain storm bridge school city team cup final election budget market price energy solar "
         "wind health hospital museum train bus car road music film art science data model").split()
RERANKER = "embed:sbert:all-MiniLM-L6-v2"


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall, cpu) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def order(run: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()[:3:2]) for line in run.read_text().splitlines()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "pipeline_cost.json")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="pipeline-cost-"))
    rng = random.Random(0)
    (work / "docs.csv").write_text("id,text\n" + "".join(
        f"d{i},{' '.join(rng.choice(WORDS) for _ in range(12))}\n" for i in range(args.docs)))
    (work / "q.tsv").write_text("".join(f"q{i}\t{' '.join(rng.choice(WORDS) for _ in range(4))}\n"
                                        for i in range(args.queries)))
    (work / "qrels.txt").write_text("".join(f"q{i} 0 d{rng.randrange(args.docs)} 1\n" for i in range(args.queries)))
    engine = [sys.executable, "-m", "engine"]
    env_root = ["--root", str(work / "idx")]
    subprocess.run(engine + ["build", "docs", "--texts", "docs.csv", "--bm25", "-q", *env_root], cwd=work, check=True)
    (work / "rr.toml").write_text(f"pipeline = 'retrieve(\"docs\", k=30) >> rerank(\"{RERANKER}\", depth=30) % 10'\n")
    search = engine + ["search", "docs", "--queries", "q.tsv", "-k", "10", "--rerank", RERANKER, "--rerank-depth",
                       "30", "--out", "search.run", *env_root]
    pipe = engine + ["pipeline", "run", "rr.toml", "--queries", "q.tsv", "--out", "pipe.run", "--no-cache", *env_root]
    timed(search, work), timed(pipe, work)  # warm-up: compiled modules, exported query model
    pairs = []
    for r in range(args.rounds):
        first, second = (search, pipe) if r % 2 == 0 else (pipe, search)
        a, b = timed(first, work), timed(second, work)
        s, p = (a, b) if first is search else (b, a)
        pairs.append({"search": s, "pipeline": p, "load": round(os.getloadavg()[0], 2)})
    same = order(work / "search.run") == order(work / "pipe.run")

    fuse = "fuse(retrieve(\"docs\", mode=\"dense\", k=30) >> rerank(\"{r}\", depth=30), " \
           "retrieve(\"docs\", mode=\"bm25\", k=30), method=\"weighted\", weights=[{w}, 1.0]) % 10"
    (work / "first.toml").write_text(f"pipeline = '{fuse.format(r=RERANKER, w=1.0)}'\n")
    (work / "second.toml").write_text(f"pipeline = '{fuse.format(r=RERANKER, w=2.0)}'\n")
    cache_rounds = []
    for r in range(args.rounds):
        cache = work / f"cache{r}"
        opts = ["--queries", "q.tsv", "--qrels", "qrels.txt", "--cache", str(cache), *env_root]
        first = timed(engine + ["experiment", "first.toml", *opts], work)
        second = timed(engine + ["experiment", "second.toml", *opts], work)
        cache_rounds.append({"first": first, "second": second, "load": round(os.getloadavg()[0], 2)})

    med = lambda xs: round(statistics.median(xs), 3)  # noqa: E731
    out = {
        "docs": args.docs, "queries": args.queries, "rounds": args.rounds, "reranker": RERANKER,
        "search_vs_pipeline": {
            "same_ranking": same, "pairs": pairs,
            "search_wall_s": med([p["search"][0] for p in pairs]), "pipeline_wall_s": med([p["pipeline"][0] for p in pairs]),
            "search_cpu_s": med([p["search"][1] for p in pairs]), "pipeline_cpu_s": med([p["pipeline"][1] for p in pairs]),
            "ratio_cpu_paired": med([p["pipeline"][1] / p["search"][1] for p in pairs]),
            "ratio_wall_paired": med([p["pipeline"][0] / p["search"][0] for p in pairs])},
        "second_experiment": {
            "rounds": cache_rounds,
            "first_wall_s": med([c["first"][0] for c in cache_rounds]),
            "second_wall_s": med([c["second"][0] for c in cache_rounds]),
            "ratio_wall_paired": med([c["second"][0] / c["first"][0] for c in cache_rounds]),
            "ratio_cpu_paired": med([c["second"][1] / c["first"][1] for c in cache_rounds])},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    sv, se = out["search_vs_pipeline"], out["second_experiment"]
    print("| what | reference | pipeline | ratio (paired median) |\n| --- | ---: | ---: | ---: |")
    print(f"| retrieve >> rerank % 10, {args.queries} queries, CPU s | search --rerank {sv['search_cpu_s']} | "
          f"{sv['pipeline_cpu_s']} | {sv['ratio_cpu_paired']} (wall {sv['ratio_wall_paired']}; same ranking: {same}) |")
    print(f"| second experiment, only the last stage changed, wall s | first {se['first_wall_s']} | "
          f"{se['second_wall_s']} | {se['ratio_wall_paired']} (CPU {se['ratio_cpu_paired']}) |")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
