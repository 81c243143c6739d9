"""`engine mllm`'s default (the guarded blend of LambdaRank with the popularity prior) against the prior on
several planted Million LLMs constructions: nDCG@10 and MRR out of fold, mean ± std over seeds (each seed a new
planted set, scored by k-fold CV). Prints the table, writes benchmarks/results/mllm_planted.json.

    flock /work/heavy.lock python benchmarks/mllm_planted.py [--seeds 3] [--folds 5] [--quick]

Questions are synthetic embeddings (a hidden topic's centre + noise), so only the ranking is measured, not a
sentence model. Per question, each LLM is relevant with a probability; the relevant ones, ordered by a
per-LLM quality plus noise, get grade 1 (most relevant) and 2 (second); any further ones count as 0.

  experts        each topic has an expert (0.6) and a second expert (0.35); one popular LLM 0.2 (noise 1.5)
  generalists    three generalists relevant to any question with 0.5 each; a topic expert 0.4 (noise 2.5)
  second-best    the issue's set: experts (0.55) best when relevant, three generalists (0.3) often second-best
                 (noise 2.0)
  mixture        half the topics have experts (0.7); the other half only the generalists (0.5) (noise 2.0)
  noisy          experts (0.5) and generalists (0.3), grades shuffled among the relevant (noise 3.0)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.io.atomic import write_json  # noqa: E402
from engine.progress import set_quiet  # noqa: E402
from engine.tasks.model_ranking import mllm  # noqa: E402
from engine.tasks.model_ranking.mllm import MllmOptions  # noqa: E402
from engine.tasks.model_ranking.transfer import TransferOptions  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "mllm_planted.json"
GENERALISTS = [0, 1, 2]
NOISE = {"experts": 1.5, "generalists": 2.5, "second-best": 2.0, "mixture": 2.0, "noisy": 3.0}
"""Per-dimension noise of a question around its topic's centre (32 dims, centres N(0, 1)): from 1.5 (a
question's nearest questions are mostly of its topic) to 3.0 (mostly not)."""


def construction(name: str, topics: int, n_llms: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """(relevance probability topics × LLMs, quality per LLM (orders the relevant), embedding noise,
    shuffle grades)."""
    p = np.full((topics, n_llms), 0.01)
    quality = rng.random(n_llms)
    expert = lambda t, k=0: 3 + 2 * t + k  # noqa: E731
    noise, shuffle = NOISE[name], name == "noisy"
    for t in range(topics):
        if name == "experts":
            p[t, expert(t)], p[t, expert(t, 1)], p[t, 0] = 0.6, 0.35, 0.2
        elif name == "generalists":
            p[t, GENERALISTS], p[t, expert(t)] = 0.5, 0.4
        elif name == "second-best":
            p[t, expert(t)], p[t, expert(t, 1)], p[t, GENERALISTS] = 0.55, 0.35, 0.3
        elif name == "mixture":
            if t % 2:
                p[t, GENERALISTS] = 0.5
            else:
                p[t, expert(t)], p[t, expert(t, 1)] = 0.7, 0.4
        elif name == "noisy":
            p[t, expert(t)], p[t, GENERALISTS] = 0.5, 0.3
        else:
            raise ValueError(name)
    if name in ("second-best", "noisy"):  # experts are better than generalists when both are relevant
        quality[[expert(t) for t in range(topics)]] += 2.0
    return p, quality, noise, shuffle


def make_set(root: Path, name: str, seed: int, topics: int = 8, per_topic: int = 20, n_llms: int = 80,
             dim: int = 32) -> tuple[dict[str, Path], np.ndarray]:
    rng = np.random.default_rng(seed)
    p, quality, noise, shuffle = construction(name, topics, n_llms, rng)
    centres = rng.normal(size=(topics, dim))
    llms = [f"llm_{i:03d}" for i in range(n_llms)]
    dev, qrels, emb = [], [], []
    for t in range(topics):
        for i in range(per_topic):
            qid = f"q{t:02d}{i:03d}"
            dev.append(f"{qid}\tquestion {qid}")
            emb.append(centres[t] + noise * rng.normal(size=dim))
            rel = np.flatnonzero(rng.random(n_llms) < p[t])
            order = rel[np.argsort(-(quality[rel] + 0.5 * rng.random(len(rel))))]
            if shuffle:
                order = rng.permutation(order)
            grades = {j: 0 for j in range(n_llms)}
            for g, j in zip((1, 2), order):
                grades[j] = g
            qrels += [f"{qid} 0 {llms[j]} {g}" for j, g in grades.items()]
    root.mkdir(parents=True, exist_ok=True)
    files = {"dev": root / "dev.tsv", "qrels": root / "qrels.txt", "ids": root / "llm_ids.txt"}
    files["dev"].write_text("\n".join(dev) + "\n")
    files["qrels"].write_text("\n".join(qrels) + "\n")
    files["ids"].write_text("\n".join(llms) + "\n")
    return files, np.asarray(emb, np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--constructions", default="experts,generalists,second-best,mixture,noisy")
    ap.add_argument("--quick", action="store_true", help="2 seeds, 3 constructions (a smoke run)")
    args = ap.parse_args()
    set_quiet(True)
    names = args.constructions.split(",")
    seeds = 2 if args.quick else args.seeds
    if args.quick:
        names = names[:3]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            per_seed: dict[str, dict[str, list[float]]] = {}
            weights: list[str] = []
            for seed in range(seeds):
                files, emb = make_set(Path(tmp) / f"{name}-{seed}", name, seed)
                options = MllmOptions(root=Path(tmp) / "idx", name=f"{name}-{seed}",
                                      transfer=TransferOptions(folds=args.folds))
                study = mllm.cross_validate_dev(files["dev"], files["qrels"], files["ids"], options, embeddings=emb,
                                                repeats=1)
                summary = study.summary()
                for variant, metrics in summary.items():
                    for metric, entry in metrics.items():
                        per_seed.setdefault(variant, {}).setdefault(metric, []).append(entry["mean"])
                weights.append(study.variants[-1].note.rsplit("weights chosen: ", 1)[-1])
            results[name] = {"variants": per_seed, "weights": weights}
    rows = []
    head = "| construction | variant | nDCG@10 | MRR | Δ nDCG@10 vs prior | Δ MRR vs prior |"
    rows += [head, "|" + "---|" * 6]
    for name, res in results.items():
        prior = res["variants"][mllm.BASELINE]
        for variant, metrics in res["variants"].items():
            nd, mr = np.array(metrics["ndcg@10"]), np.array(metrics["mrr"])
            dn = nd - np.array(prior["ndcg@10"])
            dm = mr - np.array(prior["mrr"])
            rows.append(f"| {name} | {variant} | {nd.mean():.4f} ± {nd.std(ddof=1):.4f} | "
                        f"{mr.mean():.4f} ± {mr.std(ddof=1):.4f} | {dn.mean():+.4f} ± {dn.std(ddof=1):.4f} | "
                        f"{dm.mean():+.4f} ± {dm.std(ddof=1):.4f} |")
        rows.append(f"| {name} | weights chosen per outer fold, by seed | {'; '.join(res['weights'])} | | | |")
    print(f"{seeds} seeds × one {args.folds}-fold CV each; mean ± std over seeds; load average "
          f"{os.getloadavg()[0]:.1f}")
    print("\n".join(rows))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS, {"seeds": seeds, "folds": args.folds, "machine": platform.platform(),
                         "load_average": os.getloadavg()[0], "results": results})
    print(f"wrote {RESULTS}")
    json.dumps(results)


if __name__ == "__main__":
    main()
