"""NTCIR-19 ModelRetrieval A: rank the 20 candidate BERT models for a text-classification task.

A task is represented only by what participants get — its instruction (tasks.csv), its label names and
its train/val texts — in four views: `text` (mean sentence embedding of a bounded sample of texts),
`instruction`, `labels` (the label names as one sentence) and `stats` (number of classes, label entropy,
text length…, z-scored). The training tasks' normalized F1 (F1 / best F1 of the task) per model is
transferred to a new task from its nearest training tasks (`engine.tasks.model_ranking.transfer`).
"""
from __future__ import annotations

import itertools
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import EngineError
from engine.eval.evaluate import evaluate
from engine.eval.metrics import exp_gain, ndcg, parse_metrics
from engine.progress import info, warn
from engine.tasks.model_ranking.data import Task, TrainingSet, read_query_tasks, read_training
from engine.eval.runs import write_run
from engine.tasks.model_ranking.transfer import (QueryCollection, TransferParams, blend_views, cross_validate,
                             param_grid, rank_targets, rankings, select)

VIEWS = ("text", "instruction", "labels", "stats")
METRICS = ("ndcg_exp@1", "ndcg_exp@3", "ndcg_exp@5")
CUTOFFS = (1, 3, 5)
DEFAULT_SAMPLE = 32


# ---------------------------------------------------------------- views


def _sample(texts: Sequence[str], size: int, task_id: str) -> list[str]:
    if len(texts) <= size:
        return list(texts)
    rng = np.random.default_rng(zlib.crc32(task_id.encode()))
    return [texts[i] for i in sorted(rng.choice(len(texts), size, replace=False))]


def embed_views(tasks: Sequence[Task], model: str, sample: int = DEFAULT_SAMPLE,
                stats_reference: tuple[np.ndarray, np.ndarray] | None = None
                ) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The four views of each task (rows; a missing instruction is a zero row) and the stats' mean/std.

    Stats are z-scored with `stats_reference` (the training tasks' mean and std) when given.
    """
    from engine.core.encoders import load_encoder

    encoder = load_encoder(model)
    samples = [_sample([t for t in task.texts if t], sample, task.task_id) for task in tasks]
    flat = [t for s in samples for t in s]
    info(f"embedding {len(flat)} sampled texts of {len(tasks)} tasks with {encoder.spec}")
    emb = encoder.encode_texts(flat) if flat else np.zeros((0, encoder.dim), np.float32)
    text = np.zeros((len(tasks), encoder.dim), np.float32)
    start = 0
    for i, s in enumerate(samples):
        if s:
            text[i] = emb[start:start + len(s)].mean(axis=0)
        start += len(s)
    instruction = np.zeros_like(text)
    has = [i for i, t in enumerate(tasks) if t.instruction]
    if has:
        instruction[has] = encoder.encode_texts([tasks[i].instruction for i in has])
    labels = encoder.encode_texts(["Labels: " + ", ".join(t.label_names) for t in tasks])
    raw = np.stack([t.statistics() for t in tasks])
    mean, std = stats_reference if stats_reference is not None else (raw.mean(axis=0), raw.std(axis=0))
    stats = (raw - mean) / np.where(std > 1e-9, std, 1.0)
    return {"text": text, "instruction": instruction, "labels": labels, "stats": stats}, (mean, std)


def parse_views(spec: str | None) -> list[str]:
    """`text,stats` → the views to blend; None or `all` → all four."""
    if spec is None or spec.strip().lower() in ("", "all"):
        return list(VIEWS)
    names = [v.strip().lower() for v in spec.split(",") if v.strip()]
    bad = [v for v in names if v not in VIEWS]
    if bad:
        raise EngineError(f"unknown view {bad[0]!r}; views: {', '.join(VIEWS)}")
    return list(dict.fromkeys(names))


def blends(views: dict[str, np.ndarray], names: Sequence[str], fixed: bool = False) -> dict[str, np.ndarray]:
    """Equal-weight blends of every non-empty subset of `names` (or only of all of them when `fixed`)."""
    subsets = [tuple(names)] if fixed else [c for r in range(1, len(names) + 1)
                                             for c in itertools.combinations(names, r)]
    return {"+".join(s): blend_views(views, {n: 1.0 for n in s}) for s in subsets}


# ---------------------------------------------------------------- metric


def objective_for(grades: np.ndarray):
    """Mean of nDCG@1/3/5 (gain 2^rel − 1) over the given rows: what CV tunes for.

    Tuning scores thousands of rankings of the same tasks; a task's value depends only on its top 5,
    so values are remembered per (task, top-5 models) and the official `ndcg` runs once per pattern.
    """
    judged = [[int(g) for g in row if g > 0] for row in grades]
    depth = min(max(CUTOFFS), grades.shape[1])
    memo: dict[tuple[int, tuple[int, ...]], float] = {}

    def objective(predictions: np.ndarray, rows: np.ndarray) -> float:
        tops = np.argsort(-predictions, axis=1, kind="stable")[:, :depth]
        total = 0.0
        for top, r in zip(tops, rows):
            key = (int(r), tuple(top.tolist()))
            value = memo.get(key)
            if value is None:
                rels = [int(grades[r, j]) for j in top]
                value = memo[key] = sum(ndcg(rels, judged[r], k, exp_gain) for k in CUTOFFS) / len(CUTOFFS)
            total += value
        return total / max(len(rows), 1)

    return objective


# ---------------------------------------------------------------- commands


def grid_for(n_train: int, k: int | None, temperature: float | None, prior_weight: float | None
             ) -> list[TransferParams]:
    """The default grid, with each option the user fixed reduced to that value."""
    from engine.tasks.model_ranking.transfer import DEFAULT_KS, DEFAULT_PRIOR_WEIGHTS, DEFAULT_TEMPERATURES
    return param_grid([k] if k else DEFAULT_KS, [temperature] if temperature else DEFAULT_TEMPERATURES,
                      [prior_weight] if prior_weight is not None else DEFAULT_PRIOR_WEIGHTS, n_train)


@dataclass
class CVRow:
    variant: str
    means: dict[str, float]
    tiers: dict[str, dict[str, float]]
    chosen: str = ""


@dataclass
class CVReport:
    rows: list[CVRow]
    tier_sizes: dict[str, int]
    n_tasks: int
    folds: int

    def table(self) -> str:
        """A markdown table: nDCG@1/3/5 overall and per criticality tier, one row per variant."""
        tiers = [t for t in ("high", "medium", "low") if t in self.tier_sizes] + sorted(
            t for t in self.tier_sizes if t not in ("high", "medium", "low"))
        heads = ["variant"] + [f"all @{k}" for k in CUTOFFS] + [f"{t} ({self.tier_sizes[t]}) @{k}"
                                                                 for t in tiers for k in CUTOFFS]
        lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        for row in self.rows:
            cells = [row.variant] + [f"{row.means[m]:.4f}" for m in METRICS] + [
                f"{row.tiers[t][m]:.4f}" for t in tiers for m in METRICS]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"n_tasks": self.n_tasks, "folds": self.folds, "tier_sizes": self.tier_sizes,
                "variants": [{"variant": r.variant, "means": r.means, "tiers": r.tiers, "chosen": r.chosen}
                             for r in self.rows]}


def _score(training: TrainingSet, predictions: np.ndarray, variant: str, chosen: str = "") -> CVRow:
    run = {tid: dict(zip(training.model_ids, map(float, row)))
           for tid, row in zip(training.task_ids, predictions)}
    ev = evaluate(run, training.qrels(), parse_metrics(",".join(METRICS)), training.tiers())
    return CVRow(variant, ev.means, ev.groups, chosen)


def cross_validate_tasks(train_dir: str | Path, tasks_csv: str | Path | None = None, folds: int = 10,
                         model: str | None = None, sample: int = DEFAULT_SAMPLE, k: int | None = None,
                         temperature: float | None = None, prior_weight: float | None = None,
                         seed: int = 0) -> CVReport:
    """`engine modelret-a --cv`: the average-rank baseline, each view alone and their best blend,
    each scored out of fold (params, and for the blend its views, chosen inside each training fold)."""
    from engine.core.encoders import DEFAULT_TEXT_SPEC

    training = read_training(train_dir, tasks_csv)
    n = len(training.tasks)
    views, _ = embed_views(training.tasks, model or DEFAULT_TEXT_SPEC, sample)
    objective = objective_for(training.grades)
    grid = grid_for(n, k, temperature, prior_weight)
    nf1 = training.normalized_f1
    rows: list[CVRow] = []
    prior_only = [TransferParams(1, 1.0, 1.0)]
    dummy = np.ones((n, 1), np.float32)
    for name, targets in (("average rank (baseline)", rank_targets(nf1)), ("mean normalized F1 (prior)", nf1)):
        res = cross_validate(dummy, targets, objective, prior_only, folds, seed, description=name)
        rows.append(_score(training, res.predictions, name))
    for view in VIEWS:
        if view == "instruction" and not np.abs(views[view]).sum():
            warn("no training task has an instruction: the instruction view is skipped")
            continue
        res = cross_validate(views[view], nf1, objective, grid, folds, seed, description=f"view {view}")
        rows.append(_score(training, res.predictions, f"transfer: {view}", res.summary()))
    res = cross_validate(blends(views, VIEWS), nf1, objective, grid, folds, seed, description="blends")
    rows.append(_score(training, res.predictions, "transfer: best blend (chosen per fold)", res.summary()))
    tiers = training.tiers()
    sizes = dict(Counter(tiers.values()))
    return CVReport(rows=rows, tier_sizes=sizes, n_tasks=n, folds=folds)


def rank_tasks(train_dir: str | Path, queries_dir: str | Path, out: str | Path,
               tasks_csv: str | Path | None = None, views: str | None = None, model: str | None = None,
               sample: int = DEFAULT_SAMPLE, k: int | None = None, temperature: float | None = None,
               prior_weight: float | None = None, run_id: str = "engine-transfer") -> str:
    """`engine modelret-a --queries`: rank every candidate model for every query task, write a TREC run.

    Representation and params are chosen by leave-one-out over the training tasks (restricted to the
    blend of `views` when given); returns a one-line summary of the choice.
    """
    from engine.core.encoders import DEFAULT_TEXT_SPEC

    train_dir = Path(train_dir)
    tasks_csv = Path(tasks_csv) if tasks_csv else train_dir / "tasks.csv"
    training = read_training(train_dir, tasks_csv)
    queries = read_query_tasks(queries_dir, tasks_csv)
    spec = model or DEFAULT_TEXT_SPEC
    train_views, reference = embed_views(training.tasks, spec, sample)
    query_views, _ = embed_views(queries, spec, sample, stats_reference=reference)
    names = parse_views(views)
    candidates = blends(train_views, names, fixed=views is not None)
    sims = {name: emb @ emb.T for name, emb in candidates.items()}
    grid = grid_for(len(training.tasks), k, temperature, prior_weight)
    name, params, value = select(sims, training.normalized_f1, objective_for(training.grades), grid)
    collection = QueryCollection(training.task_ids, training.model_ids, candidates[name], training.normalized_f1)
    query_emb = blend_views(query_views, {v: 1.0 for v in name.split("+")})
    ranked = rankings([q.task_id for q in queries], training.model_ids,
                      collection.predict(query_emb, params))
    write_run(out, ranked, run_id)
    return (f"{len(queries)} tasks × {len(training.model_ids)} models → {out} "
            f"(views {name}, {params}; leave-one-out nDCG@1/3/5 mean {value:.4f})")


__all__ = ["embed_views", "cross_validate_tasks", "rank_tasks", "CVReport"]
