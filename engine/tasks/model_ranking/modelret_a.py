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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from engine.core.collection import DEFAULT_ROOT
from engine.core.encoders.base import l2_normalize
from engine.core.encoders.registry import DEFAULT_TEXT_SPEC
from engine.core.ranking import top_k_rows
from engine.errors import EngineError
from engine.eval.evaluate import evaluate
from engine.eval.metrics import Judged, parse_metrics
from engine.eval.profiles import PROFILES
from engine.eval.runs import write_run
from engine.eval.validate import check_written
from engine.progress import info
from engine.tasks.model_ranking import ltr, training_store
from engine.tasks.model_ranking.data import (Task, TrainingSet, grade_qrels, read_models, read_query_tasks,
                                             read_training, tier_name)
from engine.tasks.model_ranking.study import Study, run_variant
from engine.tasks.model_ranking.training_store import TrainingSide
from engine.tasks.model_ranking.transfer import (DEFAULT_RUN_ID, QueryCollection, TransferOptions, TransferParams,
                                                 blend_views, column_prior, ensemble, rank_targets, rankings, select,
                                                 transfer, tune)

TASK = "modelret-a"
VIEWS = ("text", "instruction", "labels", "stats")
METRICS = parse_metrics(PROFILES["ntcir-a"].metrics)
"""nDCG@1/3/5 with gain 2^rel − 1: what is reported, and (their mean) what tuning maximizes."""
TIERS = ("high", "medium", "low")
GAINS = (0.0, 1.0, 3.0, 7.0)
"""LambdaRank's gain per grade: 2^rel − 1, as the official nDCG."""
METHODS = ("ensemble", "ltr", "blend")
FIXED = TransferParams(k=5, temperature=0.1, prior_weight=0.5)
"""The ensemble's and LTR's transfer params, fixed before the 5 × 10-fold study (docs/model-ranking.md):
the middle of the old grid, half the weight on the prior; never re-tuned per run."""
REPEATS = 5
BASELINE = "average rank (baseline)"


@dataclass(frozen=True)
class ModelretAOptions:
    """`engine modelret-a`'s settings (the command reads its defaults here)."""
    model: str = DEFAULT_TEXT_SPEC
    sample: int = 32
    """train/val texts embedded per task; their mean is the text view."""
    method: str = "ensemble"
    """ensemble: mean of the views' transferred predictions at FIXED params; ltr: LambdaRank; blend: the best
    view blend and params by leave-one-out (the first version's default, which over-fits 79 tasks)."""
    views: str | None = None
    """views to use (None: all four); with `blend`, exactly this blend."""
    full_cv: bool = False
    """--cv also runs the nested variants that tune per fold (several minutes)."""
    run_id: str = DEFAULT_RUN_ID
    name: str = TASK
    root: Path = DEFAULT_ROOT
    transfer: TransferOptions = field(default_factory=TransferOptions)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise EngineError(f"unknown method {self.method!r}; methods: {', '.join(METHODS)}")


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
    from engine.core.encoders.registry import load_encoder

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


def labels() -> dict[str, str]:
    """Metric name → its column label (nDCG@1, …)."""
    return {m.name: f"nDCG@{m.k}" for m in METRICS}


# ---------------------------------------------------------------- the methods


def unit_views(views: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each view's rows L2-normalized (a missing view stays a zero row)."""
    return {name: l2_normalize(emb) for name, emb in views.items()}


def ensemble_predict(train: dict[str, np.ndarray], queries: dict[str, np.ndarray], scores: np.ndarray,
                     params: TransferParams) -> np.ndarray:
    """The mean of the views' transferred predictions (unit-row views; a query's missing view is left out)."""
    sims = {v: queries[v] @ train[v].T for v in queries}
    present = {v: np.abs(queries[v]).sum(axis=1) > 0 for v in queries}
    return ensemble(sims, scores, column_prior(scores), params, present)


def ltr_predict(train: dict[str, np.ndarray], queries: dict[str, np.ndarray], scores: np.ndarray,
                grades: np.ndarray, descriptors: np.ndarray, params: TransferParams,
                ltr_params: ltr.LTRParams | None = None) -> np.ndarray:
    """LambdaRank over the views' transfer features, the task statistics and the model-name descriptors,
    trained on the training tasks with gain 2^grade − 1."""
    return ltr.predict({v: train[v] @ train[v].T for v in train}, {v: queries[v] @ train[v].T for v in queries},
                       scores, grades, GAINS, params, descriptors, train_stats=train["stats"],
                       query_stats=queries["stats"], params=ltr_params)


def model_descriptors(train_dir: str | Path, model_ids: Sequence[str]) -> np.ndarray:
    """Descriptors parsed from the candidates' names in models.csv (the id itself when it is not listed)."""
    names = read_models(Path(train_dir) / "models.csv")
    return ltr.candidate_descriptors([names.get(m, m) for m in model_ids])


# ---------------------------------------------------------------- cross-validation


def cross_validate_tasks(train_dir: str | Path, tasks_csv: str | Path | None = None,
                         options: ModelretAOptions = ModelretAOptions(), repeats: int = REPEATS) -> Study:
    """`engine modelret-a --cv`: every method on the same `repeats` × k-fold splits, nDCG@1/3/5 overall and
    per criticality tier, mean ± std over repeats, paired p against the average-rank baseline."""
    side = training_side(train_dir, tasks_csv, options)
    n, m = side.scores.shape
    nf1, grades, views = side.scores, side.grades, unit_views(side.embeddings)
    names = parse_views(options.views)
    params = options.transfer.fixed(FIXED)
    qrels = grade_qrels(side.query_ids, side.candidate_ids, grades)
    descriptors = model_descriptors(train_dir, side.candidate_ids)
    objective = objective_for(grades)
    grid = options.transfer.grid(n)
    ranks = rank_targets(nf1)

    def per_query(predictions: np.ndarray) -> dict[str, np.ndarray]:
        run = {tid: dict(zip(side.candidate_ids, map(float, row))) for tid, row in zip(side.query_ids, predictions)}
        ev = evaluate(run, qrels, METRICS)
        return {metric.name: np.array([ev.per_query[t][metric.name] for t in side.query_ids]) for metric in METRICS}

    def sub(rows: np.ndarray, only: Sequence[str] = VIEWS) -> dict[str, np.ndarray]:
        return {v: views[v][rows] for v in only}

    def prior_of(targets: np.ndarray):
        return lambda tr, te: np.tile(column_prior(targets[tr]), (len(te), 1))

    def one_view(v: str):
        return lambda tr, te: ensemble_predict(sub(tr, [v]), sub(te, [v]), nf1[tr], params)

    def tuned_ensemble(tr, te):
        preds = []
        for v in names:
            tuned, _ = tune(views[v][tr] @ views[v][tr].T, nf1[tr], objective, grid, rows=tr)
            preds.append(transfer(views[v][te] @ views[v][tr].T, nf1[tr], column_prior(nf1[tr]), tuned))
        return np.mean(preds, axis=0)

    def best_blend(tr, te):
        candidates = blends({v: side.embeddings[v][tr] for v in names}, names, fixed=options.views is not None)
        name, tuned, _ = select({b: e @ e.T for b, e in candidates.items()}, nf1[tr], objective, grid, rows=tr)
        query = blend_views({v: side.embeddings[v][te] for v in names}, {v: 1.0 for v in name.split("+")})
        return transfer(query @ candidates[name].T, nf1[tr], column_prior(nf1[tr]), tuned)

    label = "+".join(names)
    variants: list[tuple[str, Callable, str]] = [
        (BASELINE, prior_of(ranks), ""), ("mean normalized F1 (prior)", prior_of(nf1), "")]
    variants += [(f"transfer: {v}", one_view(v), str(params)) for v in VIEWS]
    variants += [
        (f"view ensemble: {label}" + (" (default)" if options.method == "ensemble" else ""),
         lambda tr, te: ensemble_predict(sub(tr, names), sub(te, names), nf1[tr], params),
         f"mean of the views' predictions, {params} for each"),
        (f"view ensemble: {label}, params tuned per fold", tuned_ensemble,
         "each view's k/T/w by inner leave-one-out on the training folds (nested)"),
        ("LTR (LambdaRank)" + (" (default)" if options.method == "ltr" else ""),
         lambda tr, te: ltr_predict(sub(tr), sub(te), nf1[tr], grades[tr], descriptors, params),
         f"LightGBM {ltr.LTRParams()}; transfer features at {params}"),
        ("best blend chosen per fold (previous default)" + (" (default)" if options.method == "blend" else ""),
         best_blend,
         "view subset and params by inner leave-one-out among 15 blends × the grid (nested)")]
    if not options.full_cv:
        variants = [v for v in variants if "per fold" not in v[0] or "(default)" in v[0]]
    tiers = [tier_name(meta["criticality"]) for meta in side.meta]
    groups = {t: np.flatnonzero(np.array(tiers) == t) for t in TIERS if t in tiers}
    study = Study([run_variant(name, fn, per_query, n, m, options.transfer.folds, repeats, note)
                   for name, fn, note in variants], [metric.name for metric in METRICS], BASELINE,
                  options.transfer.folds, repeats, groups)
    return study


# ---------------------------------------------------------------- ranking


def rank_tasks(train_dir: str | Path, queries_dir: str | Path, out: str | Path,
               tasks_csv: str | Path | None = None, options: ModelretAOptions = ModelretAOptions()) -> str:
    """`engine modelret-a --queries`: rank every candidate model for every query task, write a TREC run.

    `ensemble` (default) and `ltr` use fixed params and nothing chosen at run time; `blend` chooses the blend
    (among the subsets of `options.views`, or exactly that blend when given) and the params by leave-one-out.
    Returns a one-line summary.
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
    query_ids = [q.task_id for q in queries]
    params = options.transfer.fixed(FIXED)
    if options.method == "ensemble":
        train, new = unit_views(side.embeddings), unit_views(query_views)
        predictions = ensemble_predict({v: train[v] for v in names}, {v: new[v] for v in names}, side.scores, params)
        how = f"mean of views {'+'.join(names)}, {params}"
    elif options.method == "ltr":
        predictions = ltr_predict(unit_views(side.embeddings), unit_views(query_views), side.scores, side.grades,
                                  model_descriptors(train_dir, side.candidate_ids), params)
        how = f"LambdaRank over all views' transfer features, {params}"
    else:
        candidates = blends(side.embeddings, names, fixed=options.views is not None)
        sims = {name: emb @ emb.T for name, emb in candidates.items()}
        grid = options.transfer.grid(len(side.query_ids))
        name, tuned, value = select(sims, side.scores, objective_for(side.grades), grid)
        collection = QueryCollection(side.query_ids, side.candidate_ids, candidates[name], side.scores)
        query_emb = blend_views(query_views, {v: 1.0 for v in name.split("+")})
        predictions = collection.predict(query_emb, tuned)
        how = f"views {name}, {tuned}; leave-one-out nDCG@1/3/5 mean {value:.4f}"
    write_run(out, rankings(query_ids, side.candidate_ids, predictions), options.run_id)
    check_written(out, "ntcir-a", query_ids, side.candidate_ids)
    return f"{len(queries)} tasks × {len(side.candidate_ids)} models → {out} ({options.method}: {how})"
