"""NTCIR-19 ModelRetrieval A: rank the 20 candidate BERT models for a text-classification task.

A task is represented only by what participants get — its instruction (tasks.csv), its label names and
its train/val texts — in four views: `text` (mean sentence embedding of a bounded sample of texts),
`instruction`, `labels` (the label names as one sentence) and `stats` (number of classes, label entropy,
text length…, z-scored). The training tasks' normalized F1 (F1 / best F1 of the task) per model is
transferred to a new task from its nearest training tasks (`engine.transfer`).
"""
from __future__ import annotations

import itertools
import math
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from engine.errors import EngineError, where
from engine.evaluate import evaluate
from engine.io.tables import pick_column, read_rows
from engine.metrics import exp_gain, ndcg, parse_metrics
from engine.progress import info, warn
from engine.runs import write_run
from engine.transfer import (QueryCollection, TransferParams, blend_views, cross_validate,
                             param_grid, rank_targets, rankings, select)

VIEWS = ("text", "instruction", "labels", "stats")
METRICS = ("ndcg_exp@1", "ndcg_exp@3", "ndcg_exp@5")
CUTOFFS = (1, 3, 5)
DEFAULT_SAMPLE = 32
TEXT_COLUMNS = ("text", "sentence", "content", "review", "tweet", "sms", "question", "abstract", "headline",
                "title", "body", "prompt")
LABEL_COLUMNS = ("labels", "label", "label_text", "class", "intent", "category", "topic", "coarse_label",
                 "target", "type")
STAT_NAMES = ("log_classes", "label_entropy", "majority_share", "log_mean_chars", "chars_cv", "log_rows")


def relevance_grade(normalized_f1: float) -> int:
    """The organizers' grade: > 0.99 → 3, > 0.95 → 2, > 0.90 → 1, else 0."""
    return 3 if normalized_f1 > 0.99 else 2 if normalized_f1 > 0.95 else 1 if normalized_f1 > 0.90 else 0


@dataclass
class Task:
    """What a participant sees of one task, already read and summarized."""
    task_id: str
    texts: list[str]
    label_counts: Counter
    instruction: str = ""
    criticality: str = ""

    @property
    def label_names(self) -> list[str]:
        return sorted(self.label_counts, key=str)

    def statistics(self) -> np.ndarray:
        """Cheap numbers that say how hard the task is: classes, balance, text length, size."""
        counts = np.array(list(self.label_counts.values()), dtype=np.float64)
        p = counts / counts.sum() if counts.sum() else np.ones(1)
        n_classes = max(len(counts), 1)
        entropy = float(-(p * np.log(p)).sum() / math.log(n_classes)) if n_classes > 1 else 0.0
        chars = np.array([len(t) for t in self.texts], dtype=np.float64)
        return np.array([math.log(n_classes), entropy, float(p.max()), math.log1p(chars.mean()),
                         float(chars.std() / max(chars.mean(), 1.0)), math.log1p(len(self.texts))])


@dataclass
class TrainingSet:
    """The training tasks with their per-model normalized F1 and relevance grades."""
    tasks: list[Task]
    model_ids: list[str]
    normalized_f1: np.ndarray
    grades: np.ndarray
    model_names: dict[str, str] = field(default_factory=dict)

    @property
    def task_ids(self) -> list[str]:
        return [t.task_id for t in self.tasks]

    def qrels(self) -> dict[str, dict[str, int]]:
        return {t.task_id: {m: int(g) for m, g in zip(self.model_ids, row) if g >= 0}
                for t, row in zip(self.tasks, self.grades)}

    def tiers(self) -> dict[str, str]:
        return {t.task_id: tier_name(t.criticality) for t in self.tasks}


def tier_name(criticality: str) -> str:
    """`High Criticalness` → `high` (as `engine convert ntcir-a-groups` names it); empty → `unknown`."""
    from engine.convert import criticality_label
    return criticality_label(criticality) if criticality.strip() else "unknown"


# ---------------------------------------------------------------- reading


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise EngineError(f"{path}: no such file ({what})")
    return path


def read_task_table(path: str | Path) -> dict[str, dict[str, Any]]:
    """tasks.csv rows by task id (instruction, criticality, text/label columns of each task)."""
    path = Path(path)
    rows = read_rows(_require(path, "the task table, tasks.csv"))
    if not rows:
        raise EngineError(f"{path}: no tasks")
    if "task_id" not in rows[0].data:
        raise EngineError(f"{path}: no column 'task_id' (columns: {', '.join(rows[0].data)})")
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        tid = str(row.data.get("task_id", "")).strip()
        if not tid:
            raise EngineError(f"{where(path, row.line)}: empty task_id")
        if tid in out:
            raise EngineError(f"{where(path, row.line)}: task {tid!r} listed twice")
        out[tid] = row.data
    return out


def read_models(path: str | Path) -> dict[str, str]:
    """models.csv: model id → name, in file order."""
    path = Path(path)
    rows = read_rows(_require(path, "the candidate models, models.csv"))
    if not rows:
        raise EngineError(f"{path}: no models")
    id_col = pick_column(path, rows[0].data, None, ("model_id", "id"), "model id")
    out: dict[str, str] = {}
    for row in rows:
        mid = str(row.data.get(id_col, "")).strip()
        if not mid:
            raise EngineError(f"{where(path, row.line)}: empty model id")
        if mid in out:
            raise EngineError(f"{where(path, row.line)}: model {mid!r} listed twice")
        out[mid] = str(row.data.get("model_name", "") or mid)
    return out


def read_ground_truth(path: str | Path, model_ids: Sequence[str]
                      ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(task ids, normalized F1 matrix, grade matrix) from ground-truth.csv; missing pairs are NaN / -1.

    normalized F1 and the grade are computed from `f1` when their columns are absent.
    """
    path = Path(path)
    rows = read_rows(_require(path, "the training scores, ground-truth.csv"))
    if not rows:
        raise EngineError(f"{path}: no rows")
    cols = rows[0].data.keys()
    for need in ("task_id", "model_id"):
        if need not in cols:
            raise EngineError(f"{path}: no column {need!r} (columns: {', '.join(cols)})")
    if "normalized_f1" not in cols and "f1" not in cols:
        raise EngineError(f"{path}: needs a column 'normalized_f1' or 'f1' (columns: {', '.join(cols)})")
    col_of = {m: j for j, m in enumerate(model_ids)}
    task_ids: list[str] = []
    raw: dict[str, dict[int, tuple[float, float | None, int | None]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for row in rows:
        d = row.data
        tid, mid = str(d.get("task_id", "")).strip(), str(d.get("model_id", "")).strip()
        if not tid:
            raise EngineError(f"{where(path, row.line)}: empty task_id")
        if mid not in col_of:
            raise EngineError(f"{where(path, row.line)}: unknown model id {mid!r}: it is not in models.csv "
                              f"(known: {', '.join(list(model_ids)[:5])}…); fix the id or add the model")
        if (tid, mid) in seen:
            raise EngineError(f"{where(path, row.line)}: task {tid!r}, model {mid!r} scored twice "
                              f"(first on line {seen[(tid, mid)]})")
        seen[(tid, mid)] = row.line
        f1 = _number(path, row.line, d, "f1") if "f1" in cols else math.nan
        nf1 = _number(path, row.line, d, "normalized_f1") if "normalized_f1" in cols else None
        grade = d.get("relevance_score")
        grade_v = int(_number(path, row.line, d, "relevance_score")) if grade not in (None, "") else None
        if tid not in raw:
            raw[tid] = {}
            task_ids.append(tid)
        raw[tid][col_of[mid]] = (f1, nf1, grade_v)
    n, m = len(task_ids), len(model_ids)
    nf1_m = np.full((n, m), np.nan)
    grades = np.full((n, m), -1, dtype=int)
    for i, tid in enumerate(task_ids):
        best = max((v[0] for v in raw[tid].values() if not math.isnan(v[0])), default=math.nan)
        for j, (f1, nf1, grade) in raw[tid].items():
            value = nf1 if nf1 is not None else (f1 / best if best > 0 else math.nan)
            nf1_m[i, j] = value
            grades[i, j] = grade if grade is not None else relevance_grade(value)
        missing = [model_ids[j] for j in range(m) if j not in raw[tid]]
        if missing:
            warn(f"{path}: task {tid} has no score for model(s) {', '.join(missing)}; "
                 "they are left out of that task's transfer and judged non-relevant")
    return task_ids, nf1_m, grades


def _number(path: Path, line: int, data: dict, column: str) -> float:
    text = str(data.get(column, "")).strip()
    try:
        v = float(text)
    except ValueError:
        raise EngineError(f"{where(path, line)}: {column} {text!r} is not a number") from None
    if not math.isfinite(v):
        raise EngineError(f"{where(path, line)}: {column} is {text}")
    return v


def _columns(spec: Any) -> list[str]:
    return [c.strip() for c in str(spec or "").split(",") if c.strip()]


def read_task(folder: str | Path, meta: dict[str, Any] | None = None, task_id: str | None = None) -> Task:
    """One task folder (train.jsonl required, val.jsonl optional); `meta` is its tasks.csv row."""
    folder = Path(folder)
    meta = meta or {}
    task_id = task_id or folder.name
    if not folder.is_dir():
        raise EngineError(f"{folder}: no such task folder for task {task_id}")
    train = folder / "train.jsonl"
    if not train.exists():
        raise EngineError(f"{train}: no such file; every task folder needs its train.jsonl "
                          f"(task {task_id}, rows of {{\"text\": ..., \"labels\": ...}})")
    files = [train] + ([folder / "val.jsonl"] if (folder / "val.jsonl").exists() else [])
    texts: list[str] = []
    labels: Counter = Counter()
    for path in files:
        rows = read_rows(path)
        if not rows:
            if path == train:
                raise EngineError(f"{path}: no rows")
            continue
        text_cols = _columns(meta.get("text_col")) or [
            pick_column(path, rows[0].data, None, TEXT_COLUMNS, "text")]
        label_cols = _columns(meta.get("label_col")) or [_label_column(path, rows[0].data)]
        for row in rows:
            texts.append(_row_text(path, row.line, row.data, text_cols))
            if path == train:
                for label in _row_labels(path, row.line, row.data, label_cols):
                    labels[label] += 1
    return Task(task_id=task_id, texts=texts, label_counts=labels,
                instruction=str(meta.get("task_instruction", "") or "").strip(),
                criticality=str(meta.get("task_criticalness", "") or "").strip())


def _label_column(path: Path, columns: Any) -> str:
    cols = list(columns)
    lower = {c.lower(): c for c in cols}
    for c in LABEL_COLUMNS:
        if c in lower:
            return lower[c]
    raise EngineError(f"{path}: no label column (columns: {', '.join(cols)}; expected one of "
                      f"{', '.join(LABEL_COLUMNS)}); name it in the task's label_col in tasks.csv")


def _row_text(path: Path, line: int, data: dict, cols: list[str]) -> str:
    missing = [c for c in cols if c not in data]
    if missing:
        raise EngineError(f"{where(path, line)}: no text column {missing[0]!r} (columns: {', '.join(data)}); "
                          "fix text_col in tasks.csv")
    return " ".join(str(data[c]) for c in cols if data[c] not in (None, "")).strip()


def _row_labels(path: Path, line: int, data: dict, cols: list[str]) -> list[str]:
    missing = [c for c in cols if c not in data]
    if missing:
        raise EngineError(f"{where(path, line)}: no label column {missing[0]!r} (columns: {', '.join(data)}); "
                          "fix label_col in tasks.csv or the file")
    if len(cols) > 1:  # one 0/1 column per label (multi-label)
        return [c for c in cols if data[c] not in (None, "", 0, "0", False, "false", "False")]
    value = data[cols[0]]
    if isinstance(value, list):
        return [str(v) for v in value]
    if value is None or value == "":
        raise EngineError(f"{where(path, line)}: empty label in column {cols[0]!r}")
    return [str(value)]


def read_training(train_dir: str | Path, tasks_csv: str | Path | None = None) -> TrainingSet:
    """A folder laid out like the NTCIR-19 ModelRetrieval A release."""
    train_dir = Path(train_dir)
    if not train_dir.is_dir():
        raise EngineError(f"{train_dir}: no such folder (expected tasks.csv, models.csv, ground-truth.csv, "
                          "task-data/train-tasks/<id>/)")
    meta = read_task_table(tasks_csv or train_dir / "tasks.csv")
    models = read_models(train_dir / "models.csv")
    model_ids = list(models)
    task_ids, nf1, grades = read_ground_truth(train_dir / "ground-truth.csv", model_ids)
    folder = train_dir / "task-data" / "train-tasks"
    tasks = []
    for tid in task_ids:
        if tid not in meta:
            warn(f"task {tid} of ground-truth.csv is not in tasks.csv: no instruction or criticality for it")
        tasks.append(read_task(folder / tid, meta.get(tid), tid))
    return TrainingSet(tasks=tasks, model_ids=model_ids, normalized_f1=nf1, grades=grades, model_names=models)


def read_query_tasks(queries_dir: str | Path, tasks_csv: str | Path | None) -> list[Task]:
    """Every `<task_id>/` sub-folder of `queries_dir`; instructions come from `tasks_csv` when it lists them."""
    queries_dir = Path(queries_dir)
    if not queries_dir.is_dir():
        raise EngineError(f"{queries_dir}: no such folder (expected <task_id>/train.jsonl sub-folders)")
    meta = read_task_table(tasks_csv) if tasks_csv is not None and Path(tasks_csv).exists() else {}
    folders = sorted((p for p in queries_dir.iterdir() if p.is_dir()), key=lambda p: _id_key(p.name))
    if not folders:
        raise EngineError(f"{queries_dir}: no task folders (expected <task_id>/train.jsonl)")
    missing = [p.name for p in folders if p.name not in meta]
    if missing and meta:
        warn(f"{len(missing)} query task(s) not in {tasks_csv} (no instruction): {', '.join(missing[:5])}")
    return [read_task(p, meta.get(p.name), p.name) for p in folders]


def _id_key(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 62, name)


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
    from engine.encoders import load_encoder

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
    from engine.transfer import DEFAULT_KS, DEFAULT_PRIOR_WEIGHTS, DEFAULT_TEMPERATURES
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
    from engine.encoders import DEFAULT_TEXT_SPEC

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
    from engine.encoders import DEFAULT_TEXT_SPEC

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


__all__ = ["Task", "TrainingSet", "read_training", "read_query_tasks", "read_task", "embed_views",
           "cross_validate_tasks", "rank_tasks", "CVReport", "relevance_grade"]
