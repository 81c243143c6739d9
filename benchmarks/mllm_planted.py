"""`engine mllm`'s default (the ensemble of LambdaRank and transfer at two scales, or LambdaRank alone, blended with
the popularity prior per rank position) against the prior, LambdaRank alone, the ensemble alone, the previous
default (the ensemble alone blended per rank position) and the one before (LambdaRank alone blended per rank
position) on several planted Million LLMs constructions: nDCG@10 and MRR out of fold, mean ± std over seeds (each
seed a new planted set, scored by k-fold CV; every default's weights are chosen inside the training folds, nested).
With `--discovery`, each set also gets a generated discovery file whose confidences carry the relevance
(tests/fixtures/discovery.py: 40 questions per topic, every LLM answering) and every variant is scored again with
it. Prints the table, writes benchmarks/results/mllm_planted.json.

    nice python benchmarks/mllm_planted.py [--seeds 3] [--first-seed 0] [--folds 5] [--constructions a,b]
                                           [--discovery] [--text] [--quick]

Questions are synthetic embeddings (a hidden topic's centre + noise), so only the ranking is measured, not a
sentence model; with `--text` they are texts instead (two of the topic's six words among four filler words)
embedded with the default sentence model, as `engine mllm` embeds them. Per question, each LLM is relevant with a
probability; the relevant ones, ordered by a per-LLM quality plus noise, get grade 1 (most relevant) and 2
(second); any further ones count as 0.

  experts        each topic has an expert (0.6) and a second expert (0.35); one popular LLM 0.2 (noise 1.5)
  generalists    three generalists relevant to any question with 0.5 each; a topic expert 0.4 (noise 2.5)
  second-best    experts (0.55) best when relevant, three generalists (0.3) often second-best (noise 2.0)
  mixture        half the topics have experts (0.7); the other half only the generalists (0.5) (noise 2.0)
  noisy          experts (0.5) and generalists (0.3), grades shuffled among the relevant (noise 3.0)
  pure-prior     the question carries no signal: one relevance vector for every topic (generalists 0.5/0.4/0.3,
                 five more LLMs 0.2), so the prior is the best any method can do (noise 2.0)
  one-best       one generalist relevant to 90% of questions and always first when relevant; topic experts 0.5
                 are second (noise 2.0)
  label-noise    the experts set, but 30% of the questions draw their relevance from a random other topic and
                 the grades are shuffled among the relevant (noise 1.5)
  weak-experts   16 topics of 10 questions; experts 0.3, three generalists 0.35 (noise 2.5): a small signal
  generalist-first  topic experts (0.6) are the best answer when relevant; three generalists often relevant
                 (0.7, 0.5, 0.4) are the second-best (noise 2.0): the prior's first place (a generalist) is
                 usually right, its next places are not
  often-second   24 topics of 7 questions: the topic's expert (0.95) is nearly always relevant and the best answer;
                 three generalists often relevant (0.65, 0.35, 0.2) are the second-best, in that order (noise 2.0).
                 The prior puts a generalist first (right for MRR, worth little to nDCG) and the experts, spread
                 over 24 topics, mostly below its top 10: prior ≈ 0.36 nDCG@10 / 0.60 MRR, the shape of a held-out
                 set whose prior scored 0.31 / 0.61 and where a question-aware method gained ≈ 0.17 nDCG@10

The constructions were written before the guard's held-out numbers were looked at; the guard's rule is fixed in
engine/tasks/model_ranking/baseline_blend.py and is not tuned on them. Million LLMs' setting of it (`mllm.GUARD`:
each candidate's own metric at ALPHA, the largest mean gain) was chosen by benchmarks/mllm_guard_power.py on seeds
200.. of every construction here and is reported there on seeds 0.. The ensemble (and its BROAD transfer scale)
was chosen among a few LambdaRank and transfer variants on seeds 100..102 of generalist-first, mixture and
often-second; the table reports seeds 0..S−1, new planted sets.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from engine.io.atomic import write_json  # noqa: E402
from engine.progress import set_quiet  # noqa: E402
from engine.tasks.model_ranking import mllm  # noqa: E402
from engine.tasks.model_ranking.baseline_blend import RULE  # noqa: E402
from engine.tasks.model_ranking.mllm import MllmOptions  # noqa: E402
from engine.tasks.model_ranking.study import paired_p  # noqa: E402
from engine.tasks.model_ranking.transfer import TransferOptions  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "mllm_planted.json"
GENERALISTS = [0, 1, 2]
LTR, ENSEMBLE, GUARDED = "LTR (LambdaRank)", "ensemble", "guarded per position (default)"
PREVIOUS = "LTR guarded per position (previous default)"
"""The default two versions ago (LambdaRank alone blended per rank position)."""
ENSEMBLE_GUARDED = "ensemble guarded per position"
"""The previous default: the ensemble alone blended per rank position (the default takes it or LambdaRank)."""
EITHER = "ensemble or LTR guarded per position"
"""The rule before the topic mixture joined the default's methods (its ensemble now holds the topic mixture)."""
ONE_WEIGHT = "guarded, one weight"
DISCOVERY = " + discovery"
NOISE = {"experts": 1.5, "generalists": 2.5, "second-best": 2.0, "mixture": 2.0, "noisy": 3.0, "pure-prior": 2.0,
         "one-best": 2.0, "label-noise": 1.5, "weak-experts": 2.5, "generalist-first": 2.0, "often-second": 2.0}
CONSTRUCTIONS = tuple(NOISE)
TOPICS = {"weak-experts": (16, 10), "often-second": (24, 7)}
"""(topics, questions per topic) where not the default (8, 20)."""
MISLABELLED = {"label-noise": 0.3}
"""Share of questions whose relevance is drawn from a random other topic."""
"""Per-dimension noise of a question around its topic's centre (32 dims, centres N(0, 1)): from 1.5 (a
question's nearest questions are mostly of its topic) to 3.0 (mostly not)."""


def construction(name: str, topics: int, n_llms: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """(relevance probability topics × LLMs, quality per LLM (orders the relevant), embedding noise,
    shuffle grades)."""
    p = np.full((topics, n_llms), 0.01)
    quality = rng.random(n_llms)
    expert = lambda t, k=0: 3 + 2 * t + k  # noqa: E731
    noise, shuffle = NOISE[name], name in ("noisy", "label-noise")
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
        elif name == "pure-prior":
            p[t, GENERALISTS], p[t, 60:65] = (0.5, 0.4, 0.3), 0.2
        elif name == "one-best":
            p[t, 0], p[t, expert(t)] = 0.9, 0.5
        elif name == "label-noise":
            p[t, expert(t)], p[t, expert(t, 1)], p[t, 0] = 0.6, 0.35, 0.2
        elif name == "weak-experts":
            p[t, expert(t)], p[t, GENERALISTS] = 0.3, 0.35
        elif name == "generalist-first":
            p[t, expert(t)], p[t, GENERALISTS] = 0.6, (0.7, 0.5, 0.4)
        elif name == "often-second":
            p[t, expert(t)], p[t, GENERALISTS] = 0.95, (0.65, 0.35, 0.2)
        else:
            raise ValueError(name)
    if name in ("second-best", "noisy", "generalist-first"):  # experts beat generalists when both are relevant
        quality[[expert(t) for t in range(topics)]] += 2.0
    if name == "one-best":
        quality[0] += 10.0
    if name == "often-second":  # the topic's expert first, then the generalists in their order
        quality[[expert(t) for t in range(topics)]] += 2.0
        quality[GENERALISTS] += (1.5, 1.0, 0.5)
    return p, quality, noise, shuffle


def generator(name: str, seed: int, n_llms: int = 80, dim: int = 32
              ) -> tuple[np.ndarray, np.ndarray, float, bool, np.ndarray, np.random.Generator]:
    """What `make_set` draws a set from, for seed `seed`: (relevance probability topics × LLMs, quality per LLM,
    embedding noise, shuffle grades, topic centres, the generator's random state after them)."""
    rng = np.random.default_rng(seed)
    topics, _ = TOPICS.get(name, (8, 20))
    p, quality, noise, shuffle = construction(name, topics, n_llms, rng)
    return p, quality, noise, shuffle, rng.normal(size=(topics, dim)), rng


def make_set(root: Path, name: str, seed: int, n_llms: int = 80, dim: int = 32, discovery: bool = False
             ) -> tuple[dict[str, Path], np.ndarray, np.ndarray | None]:
    """Dev files and embeddings (and, with `discovery`, a discovery file and its questions' embeddings)."""
    p, quality, noise, shuffle, centres, rng = generator(name, seed, n_llms, dim)
    topics, per_topic = TOPICS.get(name, (8, 20))
    llms = [f"llm_{i:03d}" for i in range(n_llms)]
    dev, qrels, emb = [], [], []
    for t in range(topics):
        for i in range(per_topic):
            qid = f"q{t:02d}{i:03d}"
            dev.append(f"{qid}\tquestion {qid}")
            emb.append(centres[t] + noise * rng.normal(size=dim))
            drawn = t
            if rng.random() < MISLABELLED.get(name, 0.0):
                drawn = (t + 1 + rng.integers(topics - 1)) % topics
            rel = np.flatnonzero(rng.random(n_llms) < p[drawn])
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
    disc_emb = None
    if discovery:
        from fixtures.discovery import discovery_rows, write_jsonl
        rows, disc_emb = discovery_rows(p, centres, llms, 40, noise, np.random.default_rng(1000 + seed))
        files["discovery"] = write_jsonl(root / "discovery.jsonl", rows)
    return files, np.asarray(emb, np.float32), disc_emb


TOPIC_WORDS = [t.split() for t in (
    "dose symptom patient clinical diagnosis drug", "contract court statute liability lawsuit judge",
    "recipe oven flour sauce bake simmer", "galaxy orbit telescope planet star comet",
    "stock bond dividend portfolio interest inflation", "python function compile bug loop variable",
    "guitar chord melody rhythm song piano", "soccer goal league match player coach",
    "volcano earthquake rock mineral erosion magma", "poem novel metaphor author verse chapter",
    "vaccine virus infection immune antibody pathogen", "engine gearbox brake tire fuel vehicle",
    "election senate vote policy parliament campaign", "painting canvas sculpture museum brush gallery",
    "cell protein gene enzyme dna mutation", "loan mortgage credit debt bank payment",
    "battery circuit voltage resistor current transistor", "forest wildlife species habitat ecosystem predator",
    "yoga muscle workout stretch cardio fitness", "treaty empire dynasty war revolution century",
    "airport flight runway pilot luggage passport", "dog cat puppy kitten veterinarian leash",
    "rain storm forecast humidity temperature cloud", "chess opening checkmate pawn bishop gambit")]
FILLER_WORDS = ("what how why explain the a of in please about could you tell me best way some is are my "
                "for").split()


@functools.lru_cache(maxsize=1)
def _text_encoder():
    """The default sentence model, loaded once for every text set."""
    from engine.core.encoders.registry import DEFAULT_TEXT_SPEC, load_encoder
    return load_encoder(DEFAULT_TEXT_SPEC)


def make_text_set(root: Path, name: str, seed: int, discovery: bool = False
                  ) -> tuple[dict[str, Path], np.ndarray, np.ndarray | None]:
    """As `make_set`, but each question is a text — two of its topic's six words among four filler words — embedded
    with the default sentence model (the topics' count and the relevance as in `make_set`; up to 24 topics)."""
    rng = np.random.default_rng(seed)
    files, _, _ = make_set(root, name, seed, discovery=discovery)
    ids = [line.split("\t")[0] for line in files["dev"].read_text().splitlines()]
    topic_of = [int(q[1:3]) for q in ids]
    if max(topic_of) >= len(TOPIC_WORDS):
        raise ValueError(f"{name}: more topics than word lists")

    def question(t: int) -> str:
        words = list(rng.choice(TOPIC_WORDS[t], 2, replace=False)) + list(rng.choice(FILLER_WORDS, 4))
        rng.shuffle(words)
        return " ".join(words)
    texts = [question(t) for t in topic_of]
    files["dev"].write_text("".join(f"{q}\t{t}\n" for q, t in zip(ids, texts)))
    encoder = _text_encoder()
    disc_emb = None
    if discovery:
        rows = [json.loads(line) for line in files["discovery"].read_text().splitlines()]
        disc_text = {}
        for row in rows:
            qid = row["query_id"]
            if qid not in disc_text:
                disc_text[qid] = question(int(qid[1:3]))
            row["query_text"] = disc_text[qid]
        from fixtures.discovery import write_jsonl
        write_jsonl(files["discovery"], rows)
        disc_emb = np.asarray(encoder.encode_texts(list(disc_text.values())), np.float32)
    return files, np.asarray(encoder.encode_texts(texts), np.float32), disc_emb


def seed_list(text: str) -> list[int]:
    """`--seeds 0,1,2` as an argparse type: non-negative integers separated by commas."""
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write seeds as integers separated by commas, e.g. 0,1,2") from None
    if any(s < 0 for s in seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: seeds are non-negative")
    return seeds


def at_least(low: int):
    """An argparse type: an integer ≥ `low`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value
    return parse


def gain_cell(gains: np.ndarray, digits: int = 4) -> str:
    """Per-seed gains over the prior as a table cell: mean ± std over seeds (the worst seed)."""
    spread = gains.std(ddof=1) if len(gains) > 1 else 0.0
    return f"{gains.mean():+.{digits}f} ± {spread:.{digits}f} ({gains.min():+.{digits}f})"


def _cell(values: np.ndarray) -> str:
    return f"{values.mean():.4f} ± {values.std(ddof=1):.4f}"


def _delta(res: dict, variant: str, metric: str) -> str:
    """Mean gain over the prior ± std over seeds, and the paired p over all seeds' questions."""
    d = np.array(res["variants"][variant][metric]) - np.array(res["variants"][mllm.BASELINE][metric])
    return f"{d.mean():+.4f} ± {d.std(ddof=1):.4f} (p {res['p'][variant][metric]:.3f})"


def _key(variant: str) -> str:
    if variant.startswith("guarded: LTR"):
        return PREVIOUS
    if variant.startswith("guarded: ensemble, LTR or topics"):
        return GUARDED
    if variant.startswith("guarded: ensemble or LTR"):
        return EITHER
    if variant.startswith("guarded") and "per position" in variant:
        return ENSEMBLE_GUARDED
    if variant.startswith("guarded"):
        return ONE_WEIGHT
    return variant.replace(" (default)", "")


def run(names: list[str], seeds: int, folds: int, discovery: bool = False, first_seed: int = 0,
        text: bool = False) -> dict[str, dict]:
    """construction → {variants: variant → metric → one mean per seed, p: variant → metric → paired p against
    the prior over all seeds' questions, weights: per seed the weights the guard chose}."""
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            res: dict = {"variants": {}, "weights": []}
            per_query: dict[str, dict[str, list]] = {}
            for seed in range(first_seed, first_seed + seeds):
                files, emb, disc_emb = (make_text_set if text else make_set)(Path(tmp) / f"{name}-{seed}", name, seed,
                                                                              discovery=discovery)
                for with_discovery in ((False, True) if discovery else (False,)):
                    options = MllmOptions(root=Path(tmp) / "idx", name=f"{name}-{seed}-{with_discovery}",
                                          transfer=TransferOptions(folds=folds),
                                          discovery=files["discovery"] if with_discovery else None)
                    study = mllm.cross_validate_dev(files["dev"], files["qrels"], files["ids"], options,
                                                    embeddings=emb, repeats=1,
                                                    discovery_embeddings=disc_emb if with_discovery else None)
                    for v in study.variants:
                        if with_discovery and v.name == mllm.BASELINE:
                            continue
                        key = _key(v.name) + (DISCOVERY if with_discovery else "")
                        for metric in study.metrics:
                            res["variants"].setdefault(key, {}).setdefault(metric, []).append(
                                float(v.values[metric].mean()))
                            per_query.setdefault(key, {}).setdefault(metric, []).append(
                                v.values[metric].mean(axis=0))
                    res["weights"].append(("with discovery: " if with_discovery else "")
                                          + study.variants[-1].note.rsplit("weights chosen (first/rest): ", 1)[-1])
            base = {k: np.concatenate(x) for k, x in per_query[mllm.BASELINE].items()}
            res["p"] = {variant: {k: paired_p(np.concatenate(x), base[k]) for k, x in metrics.items()}
                        for variant, metrics in per_query.items()}
            results[name] = res
            print(f"{name}: done (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    return results


def tables(results: dict[str, dict]) -> str:
    head = ("| construction | prior nDCG@10 | LTR nDCG@10 | ensemble nDCG@10 | ensemble guarded (previous default) "
            "nDCG@10 | default nDCG@10 | Δ default − prior nDCG@10 (p) | prior MRR | LTR MRR | ensemble MRR | "
            "ensemble guarded MRR | default MRR | Δ default − prior MRR (p) | weights chosen (first/rest ×folds, "
            "per seed) |")
    rows = [head, "|" + "---|" * 14]
    for name, res in results.items():
        v = {k: {m: np.array(x) for m, x in metrics.items()} for k, metrics in res["variants"].items()}
        cells = []
        for metric in ("ndcg@10", "mrr"):
            cells += [_cell(v[k][metric]) for k in (mllm.BASELINE, LTR, ENSEMBLE, ENSEMBLE_GUARDED, GUARDED)]
            cells.append(_delta(res, GUARDED, metric))
        rows.append(f"| {name} | {' | '.join(cells)} | {'; '.join(res['weights'])} |")
    rows += ["", "| construction | variant | Δ nDCG@10 vs prior (p) | Δ MRR vs prior (p) |", "|---|---|---|---|"]
    for name, res in results.items():
        for variant in res["variants"]:
            if variant != mllm.BASELINE:
                rows.append(f"| {name} | {variant} | {_delta(res, variant, 'ndcg@10')} | "
                            f"{_delta(res, variant, 'mrr')} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--discovery", action="store_true", help="also score every variant with a generated discovery "
                    "set whose confidences carry the relevance")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first..first+S−1 (100: where variants were "
                    "chosen)")
    ap.add_argument("--text", action="store_true", help="questions as texts (topic words among filler words) "
                    "embedded with the default sentence model, as `engine mllm` embeds them")
    ap.add_argument("--constructions", default=",".join(CONSTRUCTIONS))
    ap.add_argument("--quick", action="store_true", help="2 seeds, 3 constructions (a smoke run)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="the JSON written")
    ap.add_argument("--merge", type=Path, nargs="+", help="print one table over these JSON outputs (runs of "
                    "disjoint constructions, e.g. in parallel) and write them merged to --out; runs nothing")
    args = ap.parse_args()
    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge]
        merged = {**parts[0], "results": {k: v for part in parts for k, v in part["results"].items()},
                  "wall_s": max(part["wall_s"] for part in parts)}
        print(f"{merged['seeds']} seeds × one {merged['folds']}-fold CV each (merged from {len(parts)} runs)")
        print(tables(merged["results"]))
        write_json(args.out, merged)
        return
    set_quiet(True)
    names = args.constructions.split(",")
    unknown = [n for n in names if n not in NOISE]
    if unknown:
        ap.error(f"--constructions: unknown {unknown[0]!r} (one of {', '.join(CONSTRUCTIONS)})")
    if args.seeds < 2 or args.folds < 2:
        ap.error("--seeds and --folds must be at least 2")
    if args.first_seed < 0:
        ap.error(f"--first-seed must be at least 0, not {args.first_seed}")
    seeds = 2 if args.quick else args.seeds
    if args.quick:
        names = names[:3]
    start = time.perf_counter()
    results = run(names, seeds, args.folds, args.discovery, args.first_seed, args.text)
    wall = time.perf_counter() - start
    print(f"{seeds} seeds × one {args.folds}-fold CV each; mean ± std over seeds; Δ: mean ± std over seeds, p: "
          f"paired sign-flip test over all seeds' questions; load average {os.getloadavg()[0]:.1f}; {wall:.0f} s")
    print(tables(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, {"seeds": seeds, "first_seed": args.first_seed, "text": args.text, "folds": args.folds,
                          "discovery": args.discovery, "machine": platform.platform(),
                          "load_average": os.getloadavg()[0], "wall_s": wall, "rule": RULE, "results": results})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
