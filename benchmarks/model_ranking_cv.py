"""Repeated cross-validation of the model-ranking methods: every variant of `engine modelret-a --cv`
on the 79 shared ModelRetrieval A training tasks and of `engine mllm --cv` on a planted Million LLMs set,
5 × 10-fold, mean ± std over repeats, paired p against the baseline. Prints the tables, writes
benchmarks/results/model_ranking_cv.json.

    python benchmarks/model_ranking_cv.py [--task modelret-a|mllm|both] [--repeats 5]
        [--train ../shared/data/ntcir19-modelretrieval-a] [--quick]

The planted Million LLMs set (generated here, seed 0): 300 dev questions in 10 hidden topics over 150 LLMs.
A question's text carries 3 words of its topic among 5 common ones, so its nearest questions are often of
another topic. Three generalist LLMs are relevant to any question with probability 0.3 each (what the prior
learns); each topic has an expert (0.55) and a second expert (0.35); any other LLM is relevant with
probability 0.01. The relevant LLMs of a question in a random order get grade 1 (most relevant), 2 (second),
the rest 0.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.io.atomic import write_json  # noqa: E402
from engine.tasks.model_ranking import mllm, modelret_a  # noqa: E402
from engine.tasks.model_ranking.mllm import MllmOptions  # noqa: E402
from engine.tasks.model_ranking.modelret_a import ModelretAOptions  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "model_ranking_cv.json"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ntcir19-modelretrieval-a"
COMMON = "what how why which best good new way use make know need tell about explain simple question help".split()
TOPIC_WORDS = [
    "stock market bank interest loan investor dividend inflation bond portfolio",
    "patient doctor hospital diagnosis symptom treatment vaccine disease nurse therapy",
    "football match goal team player coach league championship stadium referee",
    "recipe oven flour sugar bake kitchen garlic sauce dessert spice",
    "planet star galaxy telescope orbit astronaut rocket comet nebula gravity",
    "guitar piano melody concert song album drummer chord lyrics violin",
    "python code function compiler bug variable loop array server database",
    "court judge lawyer contract lawsuit statute verdict appeal tenant patent",
    "poem novel author chapter metaphor rhyme poet fiction plot character",
    "engine car tire brake fuel gearbox battery mileage clutch exhaust",
]


def make_planted_mllm(root: Path, per_topic: int = 30, n_llms: int = 150, seed: int = 0) -> dict[str, Path]:
    """The planted dev set described in the module docstring: dev.tsv, qrels.txt, llm_ids.txt under root."""
    rng = np.random.default_rng(seed)
    llms = [f"llm_{i:03d}" for i in range(n_llms)]
    generalists = [0, 1, 2]
    dev, qrels = [], []
    for t, words in enumerate(TOPIC_WORDS):
        topic = words.split()
        expert, second = 3 + 2 * t, 4 + 2 * t
        for i in range(per_topic):
            qid = f"q{t:02d}{i:03d}"
            text = list(rng.choice(topic, 3)) + list(rng.choice(COMMON, 5))
            rng.shuffle(text)
            dev.append(f"{qid}\t{' '.join(text)}?")
            p = np.full(n_llms, 0.01)
            p[generalists] = 0.3
            p[expert], p[second] = 0.55, 0.35
            relevant = list(np.flatnonzero(rng.random(n_llms) < p))
            if not relevant:
                relevant = [int(rng.integers(n_llms))]
            rng.shuffle(relevant)
            grade = {int(relevant[0]): 1, **({int(relevant[1]): 2} if len(relevant) > 1 else {})}
            qrels += [f"{qid} 0 {llm} {grade.get(j, 0)}" for j, llm in enumerate(llms)]
    root.mkdir(parents=True, exist_ok=True)
    paths = {"dev": root / "dev.tsv", "qrels": root / "qrels.txt", "ids": root / "llm_ids.txt"}
    paths["dev"].write_text("\n".join(dev) + "\n")
    paths["qrels"].write_text("\n".join(qrels) + "\n")
    paths["ids"].write_text("\n".join(llms) + "\n")
    return paths


def rule(study, challenger: str, incumbent: str, metrics: list[str]) -> dict:
    """The decision rule fixed before the study: the challenger (LTR) replaces the incumbent only if its paired gain
    is positive with p < 0.05 at every one of `metrics`."""
    names = [v.name for v in study.variants]
    a, b = (next(n for n in names if n == x or n.startswith(x + " (")) for x in (challenger, incumbent))
    tests = {m: dict(zip(("gain", "p"), study.paired(a, b, m))) for m in metrics}
    replace = all(t["gain"] > 0 and t["p"] < 0.05 for t in tests.values())
    for m, t in tests.items():
        print(f"rule: {a} − {b} at {m}: {t['gain']:+.4f} (p {t['p']:.3f})")
    print(f"rule: {'replace' if replace else 'keep'} {b!r}")
    return {"challenger": a, "incumbent": b, "tests": tests, "replace": replace}


def report(title: str, run, labels: dict[str, str], incumbent: str, metrics: list[str]) -> dict:
    """Run one task's study, print its table and the rule's paired test, return both for the JSON."""
    t0 = time.perf_counter()
    study = run()
    seconds = time.perf_counter() - t0
    print(f"## {title}\n\n{study.table(labels)}\n\n{seconds:.0f} s\n")
    return {**study.to_json(), "seconds": round(seconds, 1), "rule": rule(study, "LTR (LambdaRank)", incumbent, metrics)}


def run_modelret_a(train: Path, repeats: int, full: bool) -> dict:
    return report("ModelRetrieval A (79 shared training tasks)",
                  lambda: modelret_a.cross_validate_tasks(train, None, ModelretAOptions(full_cv=full), repeats=repeats),
                  modelret_a.labels(), "view ensemble: text+instruction+labels+stats", ["ndcg_exp@3", "ndcg_exp@5"])


def run_mllm(repeats: int, full: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_planted_mllm(Path(tmp) / "planted")
        options = MllmOptions(root=Path(tmp) / "idx", full_cv=full)
        return report("Million LLMs (planted: 300 questions, 150 LLMs)",
                      lambda: mllm.cross_validate_dev(paths["dev"], paths["qrels"], paths["ids"], options, repeats=repeats),
                      mllm.labels(), "transfer", ["ndcg@10", "mrr"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=("modelret-a", "mllm", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--train", type=Path, default=SHARED)
    parser.add_argument("--quick", action="store_true", help="skip the nested variants that tune per fold")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    if args.task in ("modelret-a", "both"):
        if not args.train.is_dir():
            sys.exit(f"{args.train} not found: give --train")
        results["modelret-a"] = run_modelret_a(args.train, args.repeats, not args.quick)
    if args.task in ("mllm", "both"):
        results["mllm-planted"] = run_mllm(args.repeats, not args.quick)
    write_json(RESULTS, results)
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
