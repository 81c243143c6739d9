"""Write a generated DSEBench-style corpus (exact DSEBench formats, planted relevance) and, with --bench,
build it and print the variant table (query only, examples only, fused RRF, fused tuned with 5-fold CV).

    python benchmarks/make_dse_corpus.py --out /tmp/dse-synth --bench

The same generator (tests/fixtures/dse_synthetic.py) makes the tests' fixtures.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
from dse_synthetic import generate, write_corpus  # noqa: E402  (tests/fixtures is not a package on the path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder to write datasets.json and Data/ into")
    ap.add_argument("--records", type=int, default=1500)
    ap.add_argument("--cases", type=int, default=60, help="judged (test) cases, numbered 1..N")
    ap.add_argument("--train-cases", type=int, default=10, help="unjudged gen_* cases, as in DSEBench")
    ap.add_argument("--multi-example", type=float, default=0.2, help="share of cases with two example datasets")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--bench", action="store_true", help="also build the index and print the variant table")
    args = ap.parse_args()
    paths = write_corpus(generate(args.records, args.cases, args.train_cases, args.multi_example, seed=args.seed),
                         args.out)
    for k, v in paths.items():
        print(f"{k}: {v}")
    if args.bench:
        from engine.tasks.dse.index import build_dse
        from engine.tasks.dse.pipeline import EvalOptions, eval_command
        root = args.out / "indexes"
        build_dse(paths["datasets"], "synth", root)
        options = EvalOptions(folds=paths["folds"], queries=paths["queries"], cases=paths["cases"])
        print(eval_command(paths["judgments"], "synth", root, options, out=args.out / "variants.json"))


if __name__ == "__main__":
    main()
