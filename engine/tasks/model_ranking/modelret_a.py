"""NTCIR-19 ModelRetrieval A: rank the 20 candidate BERT models for a text-classification task.

A task is represented only by what participants get — its instruction (tasks.csv), its label names and
its train/val texts — in four views: `text` (mean sentence embedding of a bounded sample of texts),
`instruction`, `labels` (the label names as one sentence) and `stats` (number of classes, label entropy,
text length…, z-scored). The training tasks' normalized F1 (F1 / best F1 of the task) per model is
transferred to a new task from its nearest training tasks (`transfer`). The training tasks' views and scores
are stored as a collection (`training_store`) and reused while the release's files are unchanged.
"""
from __future__ import annotations

import itertools
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.collection import DEFAULT_ROOT
from engine.core.encoders import DEFAULT_TEXT_SPEC
from engine.core.ranking import top_k_rows
from engine.display import format_table
from engine.errors import EngineError
from engine.eval.evaluate import evaluate
from engine.eval.metrics import Judged, parse_metrics
from engine.eval.profiles import PROFILES
from engine.eval.runs import write_run
from engine.eval.validate import check_written
from engine.progress import info, warn
from engine.tasks.model_ranking import training_store
from engine.tasks.model_ranking.data import (Task, TrainingSet, grade_qrels, read_query_tasks, read_training,
                                             tier_name)
from engine.tasks.model_ranking.training_store import TrainingSide
from engine.tasks.model_ranking.transfer import (DEFAULT_RUN_ID, QueryCollection, TransferOptions, TransferParams,
                                                 blend_views, cross_validate, rank_targets, rankings, select)

TASK = "modelret-a"
VIEWS = ("text", "instruction", "labels", "stats")
METRICS = parse_metrics(PROFILES["ntcir-a"].metrics)
"""nDCG@1/3/5 with gain 2^rel − 1: what is reported, and (their mean) what tuning maximizes."""
TIERS = ("high", "medium", "low")


@dataclass(frozen=True)
class ModelretAOptions:
    """`engine modelret-a`'s settings (the command reads its defaults here)."""
    model: str = DEFAULT_TEXT_SPEC
    sample: int = 32
    """train/val texts embedded per task; their mean is the text view."""
    views: str | None = None
    """views to blend when ranking (None: the best blend by leave-one-out)."""
    run_id: str = DEFAULT_RUN_ID
    name: str = TASK
    root: Path = DEFAULT_ROOT
    transfer: TransferOptions = field(default_factory=TransferOptions)


# ---------------------------------------------------------------- views


def _sample(texts: Sequence[str], size: int, task_id: str) -> list[str]:
    if len(texts) <= size:
        return list(texts)
    rng = np.random.default_rng(zlib.crc32(task_id.encode()))
    return [texts[i] for i in sorted(rng.choice(len(texts), size, replace=False))]


def embed_views(tasks: Sequence[Task], model: str, sample: int,
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


# ---------------------------------------------------------------- the stored training side


def training_inputs(train_dir: str | Path, tasks_csv: str | Path | None) -> dict[str, Path]:
    """Every file `read_training` reads, by its place in the release."""
    train_dir = Path(train_dir)
    inputs = {"tasks.csv": Path(tasks_csv) if tasks_csv else train_dir / "tasks.csv",
              "models.csv": train_dir / "models.csv", "ground-truth.csv": train_dir / "ground-truth.csv"}
    folder = train_dir / "task-data" / "train-tasks"
    for task in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        for split in ("train.jsonl", "val.jsonl"):
            inputs[f"{task.name}/{split}"] = task / split
    return inputs


def _settings(options: ModelretAOptions) -> dict:
    return {"model": options.model, "sample": options.sample}


def store_training(training: TrainingSet, options: ModelretAOptions, key: str) -> TrainingSide:
    """Embed the training tasks' views and store them with their scores under options.root/options.name."""
    views, (mean, std) = embed_views(training.tasks, options.model, options.sample)
    side = TrainingSide(training.task_ids, training.model_ids, views, training.normalized_f1, training.grades,
                        meta=[{"criticality": t.criticality} for t in training.tasks],
                        arrays={"stats_mean": mean, "stats_std": std})
    training_store.save(side, TASK, options.name, options.root, key, options.model, _settings(options))
    return side


def training_side(train_dir: str | Path, tasks_csv: str | Path | None, options: ModelretAOptions
                  ) -> TrainingSide:
    """The stored training side, embedded (and stored) first when the release or the settings changed."""
    key = training_store.signature(training_inputs(train_dir, tasks_csv), _settings(options))
    side = training_store.load(TASK, options.name, options.root, key)
    return side if side is not None else store_training(read_training(train_dir, tasks_csv), options, key)


# ---------------------------------------------------------------- metric


def objective_for(grades: np.ndarray):
    """Mean of the profile's nDCG@1/3/5 over the given rows: what tuning maximizes.

    Tuning scores thousands of rankings of the same tasks; a task's value depends only on its top 5,
    so values are remembered per (task, top-5 models) and the metrics run once per pattern.
    """
    judged = [[int(g) for g in row if g > 0] for row in grades]
    depth = min(max(m.k for m in METRICS), grades.shape[1])
    memo: dict[tuple[int, tuple[int, ...]], float] = {}

    def objective(predictions: np.ndarray, rows: np.ndarray) -> float:
        total = 0.0
        for top, r in zip(top_k_rows(predictions, depth), rows):
            key = (int(r), tuple(top.tolist()))
            value = memo.get(key)
            if value is None:
                q = Judged([int(grades[r, j]) for j in top], judged[r])
                value = memo[key] = sum(m.definition.fn(q, m.k) for m in METRICS) / len(METRICS)
            total += value
        return total / max(len(rows), 1)

    return objective


# ---------------------------------------------------------------- cross-validation


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
        tiers = [t for t in TIERS if t in self.tier_sizes] + sorted(t for t in self.tier_sizes if t not in TIERS)
        heads = ["variant"] + [f"all @{m.k}" for m in METRICS] + [
            f"{t} ({self.tier_sizes[t]}) @{m.k}" for t in tiers for m in METRICS]
        rows = [[row.variant] + [f"{row.means[m.name]:.4f}" for m in METRICS] + [
            f"{row.tiers[t][m.name]:.4f}" for t in tiers for m in METRICS] for row in self.rows]
        return format_table(heads, rows, markdown=True)

    def to_json(self) -> dict:
        return {"n_tasks": self.n_tasks, "folds": self.folds, "tier_sizes": self.tier_sizes,
                "variants": [{"variant": r.variant, "means": r.means, "tiers": r.tiers, "chosen": r.chosen}
                             for r in self.rows]}


def cross_validate_tasks(train_dir: str | Path, tasks_csv: str | Path | None = None,
                         options: ModelretAOptions = ModelretAOptions()) -> CVReport:
    """`engine modelret-a --cv`: the average-rank baseline, each view alone and their best blend,
    each scored out of fold (params, and for the blend its views, chosen inside each training fold)."""
    side = training_side(train_dir, tasks_csv, options)
    n, nf1, views = len(side.query_ids), side.scores, side.embeddings
    qrels = grade_qrels(side.query_ids, side.candidate_ids, side.grades)
    tiers = {tid: tier_name(m["criticality"]) for tid, m in zip(side.query_ids, side.meta)}
    folds, seed = options.transfer.folds, options.transfer.seed

    def scored(predictions: np.ndarray, variant: str, chosen: str = "") -> CVRow:
        run = {tid: dict(zip(side.candidate_ids, map(float, row))) for tid, row in zip(side.query_ids, predictions)}
        ev = evaluate(run, qrels, METRICS, tiers)
        return CVRow(variant, ev.means, ev.groups, chosen)

    objective = objective_for(side.grades)
    grid = options.transfer.grid(n)
    rows: list[CVRow] = []
    prior_only = [TransferParams(1, 1.0, 1.0)]
    dummy = np.ones((n, 1), np.float32)
    for name, targets in (("average rank (baseline)", rank_targets(nf1)), ("mean normalized F1 (prior)", nf1)):
        res = cross_validate(dummy, targets, objective, prior_only, folds, seed, description=name)
        rows.append(scored(res.predictions, name))
    for view in VIEWS:
        if view == "instruction" and not np.abs(views[view]).sum():
            warn("no training task has an instruction: the instruction view is skipped")
            continue
        res = cross_validate(views[view], nf1, objective, grid, folds, seed, description=f"view {view}")
        rows.append(scored(res.predictions, f"transfer: {view}", res.summary()))
    res = cross_validate(blends(views, VIEWS), nf1, objective, grid, folds, seed, description="blends")
    rows.append(scored(res.predictions, "transfer: best blend (chosen per fold)", res.summary()))
    return CVReport(rows=rows, tier_sizes=dict(Counter(tiers.values())), n_tasks=n, folds=folds)


# ---------------------------------------------------------------- ranking


def rank_tasks(train_dir: str | Path, queries_dir: str | Path, out: str | Path,
               tasks_csv: str | Path | None = None, options: ModelretAOptions = ModelretAOptions()) -> str:
    """`engine modelret-a --queries`: rank every candidate model for every query task, write a TREC run.

    Representation and params are chosen by leave-one-out over the training tasks (restricted to the
    blend of `options.views` when given); returns a one-line summary of the choice.
    """
    train_dir = Path(train_dir)
    tasks_csv = Path(tasks_csv) if tasks_csv else train_dir / "tasks.csv"
    names = parse_views(options.views)
    key = training_store.signature(training_inputs(train_dir, tasks_csv), _settings(options))
    side = training_store.load(TASK, options.name, options.root, key)
    training = read_training(train_dir, tasks_csv) if side is None else None
    queries = read_query_tasks(queries_dir, tasks_csv)  # before embedding: a bad query folder fails fast
    if side is None:
        side = store_training(training, options, key)
    reference = (side.arrays["stats_mean"], side.arrays["stats_std"])
    query_views, _ = embed_views(queries, options.model, options.sample, stats_reference=reference)
    candidates = blends(side.embeddings, names, fixed=options.views is not None)
    sims = {name: emb @ emb.T for name, emb in candidates.items()}
    grid = options.transfer.grid(len(side.query_ids))
    name, params, value = select(sims, side.scores, objective_for(side.grades), grid)
    collection = QueryCollection(side.query_ids, side.candidate_ids, candidates[name], side.scores)
    query_emb = blend_views(query_views, {v: 1.0 for v in name.split("+")})
    ranked = rankings([q.task_id for q in queries], side.candidate_ids, collection.predict(query_emb, params))
    write_run(out, ranked, options.run_id)
    check_written(out, "ntcir-a", [q.task_id for q in queries], side.candidate_ids)
    return (f"{len(queries)} tasks × {len(side.candidate_ids)} models → {out} "
            f"(views {name}, {params}; leave-one-out nDCG@1/3/5 mean {value:.4f})")
