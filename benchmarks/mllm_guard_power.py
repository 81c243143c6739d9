"""How much of its methods' gain `engine mllm`'s default keeps: the guard's own-metric test level and which
qualifying candidate a band takes (`baseline_blend.InnerCV.own`, `.pick`), on the planted Million LLMs
constructions of benchmarks/mllm_planted.py, with and without a generated discovery set. nDCG@10 and MRR out of
fold (one k-fold CV per seed, every band's method and weight chosen inside the outer fold's training questions,
nested), Δ against the prior per seed: mean ± std over seeds and the worst seed. The unguarded methods (the
ensemble, LambdaRank, the topic mixture) are listed beside them: what a guard could keep at most.

    nice python benchmarks/mllm_guard_power.py [--seeds 0,1,2] [--constructions a,b] [--discovery] [--out F.json]
    python benchmarks/mllm_guard_power.py --merge part1.json part2.json ... [--out F.json]

Every rule is scored on the same memoized out-of-fold predictions (the inner splits are the same for every rule),
so one run costs about what the default alone costs. Rules were chosen on seeds 200.. and are reported on 0..4.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from engine.core.encoders.base import l2_normalize  # noqa: E402
from engine.io.atomic import write_json  # noqa: E402
from engine.progress import set_quiet  # noqa: E402
from engine.tasks.model_ranking import mllm, topics  # noqa: E402
from engine.tasks.model_ranking.baseline_blend import InnerCV  # noqa: E402
from engine.tasks.model_ranking.data import grade_gains  # noqa: E402
from engine.tasks.model_ranking.mllm import Evidence, MllmOptions  # noqa: E402
from engine.tasks.model_ranking.study import memoized, run_variant  # noqa: E402
from engine.tasks.model_ranking.transfer import TransferOptions, column_prior  # noqa: E402
from mllm_planted import CONSTRUCTIONS, at_least, gain_cell, make_set, seed_list  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "mllm_guard_power.json"
PRIOR = "prior"
UNSHAPED_ENSEMBLE, UNSHAPED_TOPICS = ("ensemble, topics not shaped by the discovery set",
                                      "topics not shaped by the discovery set")
UNSHAPED_DEFAULT = "0.05 each, largest mean, topics not shaped by the discovery set (previous default)"
"""With a discovery set the default's topic mixture fits its topics on the discovery questions too
(`mllm.discovery_topics`); these rows are the mixture fitted on the dev questions alone, as before: alone, in the
ensemble and among the default's methods. (Results written before that change name the shaped variants instead:
`mllm_guard_power_discovery_selection.json`.)"""
UNGUARDED = ("ensemble", "LTR", "topics")
RULES = {
    "α/12, largest bound (previous default)": InnerCV(),
    "α/12, largest mean": InnerCV(pick="mean"),
    "0.05 each, largest mean (default)": mllm.GUARD,
    "mean > 0, largest mean": InnerCV(own=0.5, pick="mean"),
}
RENAMED = {"α/12, largest bound (default)": "α/12, largest bound (previous default)",
           "0.05 each, largest mean": "0.05 each, largest mean (default)"}
"""Rules' names in results written before the default changed."""


def study(name: str, seed: int, folds: int, discovery: bool, tmp: Path, rules: dict[str, InnerCV] = RULES) -> dict:
    """variant → metric → mean over the questions on one planted set; `choices`: rule → per outer fold the
    bands' picks. With `discovery`, also the topic mixture fitted on the dev questions alone (the default's
    topics are shaped by the discovery questions too: `mllm.discovery_topics`), alone, in the ensemble and among
    the default's methods."""
    files, emb, disc_emb = make_set(tmp / f"{name}-{seed}", name, seed, discovery=discovery)
    options = MllmOptions(root=tmp / "idx", name=f"{name}-{seed}-{discovery}", transfer=TransferOptions(folds=folds),
                          discovery=files["discovery"] if discovery else None)
    side = mllm.dev_side(files["dev"], files["qrels"], files["ids"], options, emb, disc_emb)
    gain = grade_gains(options.targets)
    unit = l2_normalize(side.embeddings[mllm.EMBEDDING])
    scores, grades, params = side.scores, side.grades, options.transfer.fixed(mllm.FIXED)
    n, m = scores.shape
    methods = mllm.fold_methods(unit, scores, grades, gain, Evidence(side.candidate_ids, side.arrays), params)
    per_query = lambda p: mllm.per_query_scores(grades, gain, p)  # noqa: E731
    out = {PRIOR: run_variant(PRIOR, lambda tr, te: np.tile(column_prior(scores[tr]), (len(te), 1)), per_query,
                              n, m, folds, 1)}
    for label, method in zip(UNGUARDED, methods):
        out[label] = run_variant(label, method, per_query, n, m, folds, 1)
    runs = [(rule, cv, list(methods)) for rule, cv in rules.items()]
    if discovery:
        ltr_fold, arrays = methods[1], side.arrays
        unshaped = memoized(lambda tr, te: topics.topic_mixture(unit[tr], scores[tr], unit[te]))
        ensemble = memoized(lambda tr, te: mllm.ensemble(ltr_fold(tr, te), unit[te] @ unit[tr].T, scores[tr], params,
                                                         mllm.discovery_transfer(unit[te], arrays, mllm.BROAD),
                                                         unshaped(tr, te)))
        out[UNSHAPED_ENSEMBLE] = run_variant(UNSHAPED_ENSEMBLE, ensemble, per_query, n, m, folds, 1)
        out[UNSHAPED_TOPICS] = run_variant(UNSHAPED_TOPICS, unshaped, per_query, n, m, folds, 1)
        runs.append((UNSHAPED_DEFAULT, mllm.GUARD, [ensemble, ltr_fold, unshaped]))
    choices: dict[str, list[str]] = {}
    for rule, cv, chosen_among in runs:
        chosen: list[tuple[float, ...]] = []
        picked: list[tuple[int, ...]] = []
        out[rule] = run_variant(rule, mllm.guarded_positions(chosen_among, scores, grades, gain, m, chosen, picked,
                                                             cv), per_query, n, m, folds, 1)
        choices[rule] = ["/".join(f"{UNGUARDED[i]} {w:g}" if w else "prior" for w, i in zip(ws, ps))
                         for ws, ps in zip(chosen, picked)]
    return {"values": {v: {k: float(x.mean()) for k, x in variant.values.items()} for v, variant in out.items()},
            "choices": choices}


def table(results: dict[str, dict[str, dict]]) -> str:
    """results: construction → seed → study()."""
    rows = ["| construction | variant | Δ nDCG@10 vs prior (worst seed) | Δ MRR vs prior (worst seed) |",
            "|---|---|---|---|"]
    for name, per_seed in results.items():
        seeds = list(per_seed.values())
        prior = {k: np.array([s["values"][PRIOR][k] for s in seeds]) for k in ("ndcg@10", "mrr")}
        rows.append(f"| {name} | prior (its nDCG@10, MRR) | {prior['ndcg@10'].mean():.4f} | {prior['mrr'].mean():.4f} |")
        variants = dict.fromkeys(v for one in seeds for v in one["values"] if v != PRIOR)
        for variant in variants:
            have = [one for one in seeds if variant in one["values"]]
            cells = []
            for metric in ("ndcg@10", "mrr"):
                cells.append(gain_cell(np.array([one["values"][variant][metric] - one["values"][PRIOR][metric]
                                                 for one in have])))
            rows.append(f"| {name} | {variant}{'' if len(have) == len(seeds) else f' ({len(have)} seeds)'} | "
                        f"{' | '.join(cells)} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=seed_list, default="200,201,202")
    ap.add_argument("--folds", type=at_least(2), default=5)
    ap.add_argument("--discovery", action="store_true")
    ap.add_argument("--constructions", default="generalist-first,mixture")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--merge", type=Path, nargs="+")
    ap.add_argument("--rules", help="the rules scored, by their numbers in RULES from 0 (default: all)")
    args = ap.parse_args()
    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge]
        merged: dict[str, dict] = {}
        for part in parts:
            for name, per_seed in part["results"].items():
                for one in per_seed.values():
                    for kind in ("values", "choices"):
                        one[kind] = {RENAMED.get(k, k): v for k, v in one[kind].items()}
                merged.setdefault(name, {}).update(per_seed)
        print(table(merged))
        write_json(args.out, {**parts[0], "results": merged, "merged": [str(f.name) for f in args.merge]})
        return
    names = args.constructions.split(",")
    bad = [n for n in names if n not in CONSTRUCTIONS]
    if bad:
        ap.error(f"--constructions: unknown {bad[0]!r} (one of {', '.join(CONSTRUCTIONS)})")
    seeds = args.seeds
    names_of = list(RULES)
    rules = RULES if not args.rules else {names_of[int(i)]: RULES[names_of[int(i)]] for i in args.rules.split(",")}
    set_quiet(True)
    start = time.perf_counter()
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for seed in seeds:
                results.setdefault(name, {})[str(seed)] = study(name, seed, args.folds, args.discovery, Path(tmp), rules)
                print(f"{name} seed {seed}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
                write_json(args.out, {"seeds": seeds, "folds": args.folds, "discovery": args.discovery,
                                      "rules": {r: repr(cv) for r, cv in RULES.items()}, "results": results})
    wall = time.perf_counter() - start
    print(f"seeds {seeds}, one {args.folds}-fold CV each{' with the discovery set' if args.discovery else ''}; "
          f"load average {os.getloadavg()[0]:.1f}; {wall:.0f} s")
    print(table(results))
    write_json(args.out, {"seeds": seeds, "folds": args.folds, "discovery": args.discovery, "wall_s": wall,
                          "load_average": os.getloadavg()[0], "rules": {r: repr(cv) for r, cv in RULES.items()},
                          "results": results})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
