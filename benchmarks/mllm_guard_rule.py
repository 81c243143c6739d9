"""The choice of the guard's no-loss level (`baseline_blend.KEEP`): `engine mllm`'s default (the ensemble or
LambdaRank blended with the popularity prior per rank position) with its bands decided alone (the previous rule)
and on the composed ranking with the other metric's no-loss bound at 0.5 (the mean gain ≥ 0), 0.25 and ALPHA,
on planted Million LLMs sets (benchmarks/mllm_planted.py's constructions), nDCG@10 and MRR out of fold against the
prior, mean ± std over seeds (each seed a new planted set, `--repeats` k-fold CV splits of it; weights chosen
inside the training folds, nested). The level was chosen on seeds 300.. and is reported on seeds 0.. (new sets).
Prints the table, writes benchmarks/results/mllm_guard_rule.json.

    nice python benchmarks/mllm_guard_rule.py [--seeds 3] [--first-seed 0] [--repeats 2] [--constructions a,b]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine.core.encoders.base import l2_normalize  # noqa: E402
from engine.io.atomic import write_json  # noqa: E402
from engine.progress import set_quiet  # noqa: E402
from engine.tasks.model_ranking import baseline_blend, mllm  # noqa: E402
from engine.tasks.model_ranking.data import grade_gains  # noqa: E402
from engine.tasks.model_ranking.mllm import MllmOptions  # noqa: E402
from engine.tasks.model_ranking.study import memoized, run_variant  # noqa: E402
from engine.tasks.model_ranking.transfer import TransferOptions, column_prior  # noqa: E402
from mllm_planted import CONSTRUCTIONS, make_set  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "mllm_guard_rule.json"
RULES = {"bands alone (previous)": None, "composed, keep 0.5": 0.5, "composed, keep 0.25": 0.25,
         f"composed, keep {baseline_blend.ALPHA:g}": baseline_blend.ALPHA}
PRIOR = "prior"


def study(name: str, seed: int, folds: int, repeats: int, tmp: Path) -> dict[str, dict[str, float]]:
    """rule → metric → mean over the questions and the repeats, on one planted set."""
    files, emb, _ = make_set(tmp / f"{name}-{seed}", name, seed)
    options = MllmOptions(root=tmp / "idx", name=f"{name}-{seed}", transfer=TransferOptions(folds=folds))
    side = mllm.dev_side(files["dev"], files["qrels"], files["ids"], options, emb)
    gain = grade_gains(options.targets)
    emb = l2_normalize(side.embeddings[mllm.EMBEDDING])
    scores, grades, params = side.scores, side.grades, options.transfer.fixed(mllm.FIXED)
    (n, m) = scores.shape
    ltr_fold = memoized(lambda tr, te: mllm.ltr_predict(emb[tr], emb[te], scores[tr], grades[tr], gain,
                                                        mllm.Evidence(side.candidate_ids, side.arrays), params))
    ensemble_fold = memoized(lambda tr, te: mllm.ensemble(ltr_fold(tr, te), emb[te] @ emb[tr].T, scores[tr], params))
    per_query = lambda p: mllm.per_query_scores(grades, gain, p)  # noqa: E731
    out = {PRIOR: run_variant(PRIOR, lambda tr, te: np.tile(column_prior(scores[tr]), (len(te), 1)), per_query, n,
                              m, folds, repeats)}
    for rule, keep in RULES.items():
        out[rule] = run_variant(rule, mllm.guarded_positions([ensemble_fold, ltr_fold], scores, grades, gain, m,
                                                             cv=baseline_blend.InnerCV(keep=keep)),
                                per_query, n, m, folds, repeats)
    return {rule: {k: float(v.mean()) for k, v in variant.values.items()} for rule, variant in out.items()}


def table(results: dict[str, list[dict]]) -> str:
    rows = ["| construction | rule | nDCG@10 | Δ nDCG@10 vs prior | MRR | Δ MRR vs prior |", "|---|---|---|---|---|---|"]
    for name, per_seed in results.items():
        for rule in [PRIOR, *RULES]:
            cells = []
            for metric in ("ndcg@10", "mrr"):
                v = np.array([s[rule][metric] for s in per_seed])
                d = v - np.array([s[PRIOR][metric] for s in per_seed])
                cells += [f"{v.mean():.4f} ± {v.std(ddof=1):.4f}",
                          "–" if rule == PRIOR else f"{d.mean():+.4f} ± {d.std(ddof=1):.4f} (min {d.min():+.4f})"]
            rows.append(f"| {name} | {rule} | {' | '.join(cells)} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--constructions", default="often-second,generalist-first,second-best,mixture")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    names = args.constructions.split(",")
    bad = [n for n in names if n not in CONSTRUCTIONS]
    if bad:
        ap.error(f"--constructions: unknown {bad[0]!r} (one of {', '.join(CONSTRUCTIONS)})")
    if args.seeds < 2 or args.folds < 2 or args.repeats < 1 or args.first_seed < 0:
        ap.error("--seeds ≥ 2, --folds ≥ 2, --repeats ≥ 1, --first-seed ≥ 0")
    set_quiet(True)
    start = time.perf_counter()
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            results[name] = [study(name, s, args.folds, args.repeats, Path(tmp))
                             for s in range(args.first_seed, args.first_seed + args.seeds)]
            print(f"{name}: done", file=sys.stderr, flush=True)
            print(table({name: results[name]}), file=sys.stderr, flush=True)
    wall = time.perf_counter() - start
    print(f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}, {args.repeats} × {args.folds}-fold CV each; "
          f"mean ± std over seeds; load average {os.getloadavg()[0]:.1f}; {wall:.0f} s")
    print(table(results))
    write_json(args.out, {"seeds": args.seeds, "first_seed": args.first_seed, "folds": args.folds,
                          "repeats": args.repeats, "wall_s": wall, "results": results})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
