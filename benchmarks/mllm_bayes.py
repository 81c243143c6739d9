"""How far a question's embedding can take `engine mllm` on the planted constructions of benchmarks/mllm_planted.py:
the Bayes ranking, told what generated the set — the topics' centres, the embedding noise and each topic's
relevance probabilities — ranks each question's LLMs by their expected target under the question's posterior over
the topics (its embedding alone); the topic oracle by their expected target in the question's own topic. Neither
is a method (both know the generator); they bound what any method reading the question's embedding can gain, and
so say whether a shortfall is the method's or the question's. Δ nDCG@10 and MRR over the prior (the mean target per
LLM, out of fold as every table of docs/model-ranking.md has it), mean ± std over seeds (worst seed). Writes
benchmarks/results/mllm_bayes.json.

    python benchmarks/mllm_bayes.py [--seeds 0,1,2,3,4] [--constructions generalist-first,mixture]

Expected targets per topic are Monte-Carlo means over `--draws` questions drawn as `make_set` draws them (the
relevant LLMs ordered by quality plus noise; grades shuffled where the construction shuffles them). `label-noise`
is left out: a share of its questions take another topic's relevance, which the posterior does not model.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mllm_planted  # noqa: E402
from engine.io.atomic import write_json  # noqa: E402
from engine.progress import set_quiet  # noqa: E402
from engine.tasks.model_ranking import mllm  # noqa: E402
from engine.tasks.model_ranking.data import DEFAULT_TARGETS, grade_gains  # noqa: E402
from engine.tasks.model_ranking.mllm import MllmOptions  # noqa: E402
from engine.tasks.model_ranking.study import run_variant  # noqa: E402
from engine.tasks.model_ranking.transfer import column_prior  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "mllm_bayes.json"
LEFT_OUT = ("label-noise",)


def expected_targets(p: np.ndarray, quality: np.ndarray, shuffle: bool, gain: dict[int, float], draws: int,
                     rng: np.random.Generator) -> np.ndarray:
    """(topics × LLMs) the mean target of each LLM over `draws` questions of each topic, drawn as `make_set` draws
    a question's grades."""
    out = np.zeros(p.shape)
    for t in range(len(p)):
        for _ in range(draws):
            rel = np.flatnonzero(rng.random(p.shape[1]) < p[t])
            order = rel[np.argsort(-(quality[rel] + 0.5 * rng.random(len(rel))))]
            if shuffle:
                order = rng.permutation(order)
            for grade, j in zip((1, 2), order):
                out[t, j] += gain[grade]
    return out / draws


def study(name: str, seed: int, folds: int, draws: int, tmp: Path) -> dict[str, dict[str, float]]:
    """variant → metric → mean over the questions of one planted set."""
    from mllm_topics import planted_side
    p, quality, noise, shuffle, centres, _ = mllm_planted.generator(name, seed)
    side, gain, _, raw, topic = planted_side(tmp, name, seed, f"{name}-{seed}", MllmOptions())
    expected = expected_targets(p, quality, shuffle, grade_gains(DEFAULT_TARGETS), draws, np.random.default_rng(7))
    logp = -((raw[:, None, :] - centres[None]) ** 2).sum(-1) / (2 * noise ** 2)
    post = np.exp(logp - logp.max(1, keepdims=True))
    bayes, oracle = (post / post.sum(1, keepdims=True)) @ expected, expected[topic]
    scores, grades = side.scores, side.grades
    n, m = scores.shape
    variants = {"prior": lambda tr, te: np.tile(column_prior(scores[tr]), (len(te), 1)),
                "Bayes, told the generator": lambda tr, te: bayes[te],
                "topic oracle, told the generator": lambda tr, te: oracle[te]}
    per_query = lambda pred: mllm.per_query_scores(grades, gain, pred)  # noqa: E731
    return {k: {metric: float(v.mean()) for metric, v in run_variant(k, fn, per_query, n, m, folds, 1).values.items()}
            for k, fn in variants.items()}


def table(results: dict[str, dict[str, dict]]) -> str:
    rows = ["| construction (seeds) | reference | Δ nDCG@10 vs prior (worst seed) | Δ MRR vs prior (worst seed) |",
            "|---|---|---|---|"]
    for name, per_seed in results.items():
        seeds = list(per_seed.values())
        for variant in [v for v in seeds[0] if v != "prior"]:
            cells = [mllm_planted.gain_cell(np.array([s[variant][metric] - s["prior"][metric] for s in seeds]), 3)
                     for metric in ("ndcg@10", "mrr")]
            rows.append(f"| {name} ({','.join(per_seed)}) | {variant} | {' | '.join(cells)} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=mllm_planted.seed_list, default="0,1,2,3,4")
    ap.add_argument("--constructions", default="generalist-first,mixture")
    ap.add_argument("--folds", type=mllm_planted.at_least(2), default=5)
    ap.add_argument("--draws", type=mllm_planted.at_least(1), default=4000, help="questions drawn per topic for the expected targets")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    names = args.constructions.split(",")
    bad = [n for n in names if n not in mllm_planted.CONSTRUCTIONS or n in LEFT_OUT]
    if bad:
        ap.error(f"--constructions: {bad[0]!r} is not one of "
                 f"{', '.join(c for c in mllm_planted.CONSTRUCTIONS if c not in LEFT_OUT)}")
    seeds = args.seeds
    set_quiet(True)
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for seed in seeds:
                results.setdefault(name, {})[str(seed)] = study(name, seed, args.folds, args.draws, Path(tmp))
    print(table(results))
    write_json(args.out, {"seeds": seeds, "folds": args.folds, "draws": args.draws, "results": results})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
