"""The files of NTCIR-19 ModelRetrieval A (tasks.csv, models.csv, ground-truth.csv, task folders) and of TREC
Million LLMs (dev questions, qrels, LLM ids, the grade → target map), read in their formats; and the converters
`engine convert ntcir-a-qrels|ntcir-a-groups`."""
from __future__ import annotations

import math
import zlib
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from engine.errors import EngineError, opt, where
from engine.eval.groups import write_groups
from engine.io.runs import Qrels, parse_grade, read_qrels, write_qrels
from engine.io.ids import read_id_list, trec_safe_ids
from engine.io.tables import Row, pick_column, read_queries, read_rows
from engine.progress import warn

TEXT_COLUMNS = ("text", "sentence", "content", "review", "tweet", "sms", "question", "abstract", "headline",
                "title", "body", "prompt")
LABEL_COLUMNS = ("labels", "label", "label_text", "class", "intent", "category", "topic", "coarse_label",
                 "target", "type")


def sample_indices(n: int, size: int, key: str) -> list[int]:
    """At most `size` of range(n), in order, the same for the same `key` (a task id) on every run."""
    if n <= size:
        return list(range(n))
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    return sorted(int(i) for i in rng.choice(n, size, replace=False))


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
    labelled: list[tuple[str, str]] = field(default_factory=list)
    """train.jsonl's (text, label) rows, what candidate features are fitted to (several labels: joined by |)."""

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
    published_ranks: np.ndarray | None = None
    """ground-truth.csv's model_rank (1 best; NaN: not scored): what the average-rank baseline averages."""

    @property
    def task_ids(self) -> list[str]:
        return [t.task_id for t in self.tasks]

    def qrels(self) -> Qrels:
        return grade_qrels(self.task_ids, self.model_ids, self.grades)

    def tiers(self) -> dict[str, str]:
        return {t.task_id: tier_name(t.criticality) for t in self.tasks}


def grade_qrels(task_ids: Sequence[str], model_ids: Sequence[str], grades: np.ndarray) -> Qrels:
    """task → {model: grade} from a grade matrix; -1 (no score in ground-truth.csv) is left out."""
    return {tid: {m: int(g) for m, g in zip(model_ids, row) if g >= 0} for tid, row in zip(task_ids, grades)}


def tier_name(criticality: str) -> str:
    """`High Criticalness` → `high` (as `engine convert ntcir-a-groups` names it); empty → `unknown`."""
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
    return _rows_by_id(path, rows, "task_id", "task_id", "task")


def read_models(path: str | Path) -> dict[str, str]:
    """models.csv: model id → name, in file order."""
    path = Path(path)
    rows = read_rows(_require(path, "the candidate models, models.csv"))
    if not rows:
        raise EngineError(f"{path}: no models")
    id_col = pick_column(path, rows[0].data, None, ("model_id", "id"), "model id")
    return {mid: str(data.get("model_name", "") or mid)
            for mid, data in _rows_by_id(path, rows, id_col, "model id", "model").items()}


def _rows_by_id(path: Path, rows: Sequence[Row], column: str, empty: str, noun: str) -> dict[str, dict[str, Any]]:
    """Rows by their id column, in file order; an empty or repeated id is an error naming its line."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = str(row.data.get(column, "")).strip()
        if not key:
            raise EngineError(f"{where(path, row.line)}: empty {empty}")
        if key in out:
            raise EngineError(f"{where(path, row.line)}: {noun} {key!r} listed twice")
        out[key] = row.data
    return out


def read_ground_truth(path: str | Path, model_ids: Sequence[str]
                      ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(task ids, normalized F1 matrix, grade matrix, published rank matrix) from ground-truth.csv; missing pairs
    are NaN / -1 / NaN.

    normalized F1 and the grade are computed from `f1` when their columns are absent; the rank is the file's
    `model_rank` where it gives one, else the organizers' rule as the file shows it (1 + the models of the task
    with a strictly higher score: tied models share the better rank).
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
    raw: dict[str, dict[int, tuple[float, float | None, int | None, float | None]]] = {}
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
        rank_v = _number(path, row.line, d, "model_rank") if d.get("model_rank") not in (None, "") else None
        if rank_v is not None and rank_v < 1:
            raise EngineError(f"{where(path, row.line)}: model_rank {rank_v:g} is below 1 (1 is the best model)")
        if tid not in raw:
            raw[tid] = {}
            task_ids.append(tid)
        raw[tid][col_of[mid]] = (f1, nf1, grade_v, rank_v)
    n, m = len(task_ids), len(model_ids)
    nf1_m = np.full((n, m), np.nan)
    grades = np.full((n, m), -1, dtype=int)
    ranks = np.full((n, m), np.nan)
    for i, tid in enumerate(task_ids):
        best = max((v[0] for v in raw[tid].values() if not math.isnan(v[0])), default=math.nan)
        for j, (f1, nf1, grade, _) in raw[tid].items():
            value = nf1 if nf1 is not None else (f1 / best if best > 0 else math.nan)
            nf1_m[i, j] = value
            grades[i, j] = grade if grade is not None else relevance_grade(value)
        known = nf1_m[i][~np.isnan(nf1_m[i])]
        for j, (_, _, _, rank) in raw[tid].items():
            ranks[i, j] = rank if rank is not None else (
                math.nan if math.isnan(nf1_m[i, j]) else 1.0 + float((known > nf1_m[i, j]).sum()))
        missing = [model_ids[j] for j in range(m) if j not in raw[tid]]
        if missing:
            warn(f"{path}: task {tid} has no score for model(s) {', '.join(missing)}; "
                 "they are left out of that task's transfer and judged non-relevant")
    return task_ids, nf1_m, grades, ranks


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
    labelled: list[tuple[str, str]] = []
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
                row_labels = _row_labels(path, row.line, row.data, label_cols)
                for label in row_labels:
                    labels[label] += 1
                labelled.append((texts[-1], "|".join(sorted(row_labels))))
    return Task(task_id=task_id, texts=texts, label_counts=labels, labelled=labelled,
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
    task_ids, nf1, grades, ranks = read_ground_truth(train_dir / "ground-truth.csv", model_ids)
    folder = train_dir / "task-data" / "train-tasks"
    tasks = []
    for tid in task_ids:
        if tid not in meta:
            warn(f"task {tid} of ground-truth.csv is not in tasks.csv: no instruction or criticality for it")
        tasks.append(read_task(folder / tid, meta.get(tid), tid))
    return TrainingSet(tasks=tasks, model_ids=model_ids, normalized_f1=nf1, grades=grades, model_names=models,
                       published_ranks=ranks)


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


def read_ntcir_a_qrels(path: str | os.PathLike) -> Qrels:
    """task_id → {model_id: relevance grade} from `ground-truth.csv` (columns task_id, model_id,
    relevance_score)."""
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no rows")
    cols = list(rows[0].data.keys())
    task_col = pick_column(path, cols, None, ("task_id", "qid", "query_id"), "task id")
    model_col = pick_column(path, cols, None, ("model_id", "docid", "doc_id"), "model id")
    rel_col = pick_column(path, cols, None, ("relevance_score", "relevance", "rel", "grade"), "relevance grade")
    qrels: Qrels = {}
    first: dict[tuple[str, str], int] = {}
    for row in rows:
        task, model = str(row.data.get(task_col, "")).strip(), str(row.data.get(model_col, "")).strip()
        grade = parse_grade(str(row.data.get(rel_col, "")).strip())
        if not task or not model:
            raise EngineError(f"{where(path, row.line)}: empty {task_col} or {model_col}")
        if grade is None:
            raise EngineError(f"{where(path, row.line)}: {rel_col} {row.data.get(rel_col)!r} is not an integer grade")
        if (task, model) in first:
            raise EngineError(f"{where(path, row.line)}: task {task} × model {model} graded twice "
                              f"(first on line {first[(task, model)]})")
        first[(task, model)] = row.line
        qrels.setdefault(task, {})[model] = grade
    return qrels


def ntcir_a_qrels(ground_truth: str | os.PathLike, out: str | os.PathLike) -> int:
    """`engine convert ntcir-a-qrels`: ground-truth.csv → TREC qrels; returns the line count."""
    return write_qrels(out, read_ntcir_a_qrels(ground_truth))


def criticality_label(text: str) -> str:
    """'High Criticalness' → 'high': short group names for tables and JSON keys."""
    t = re.sub(r"\s*critical\w*\s*$", "", text.strip(), flags=re.I).strip().lower()
    return re.sub(r"\s+", "_", t) or text.strip()


def read_ntcir_a_groups(path: str | os.PathLike) -> dict[str, str]:
    """task_id → criticality ('high', 'medium', 'low') from `tasks.csv`."""
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no rows")
    cols = list(rows[0].data.keys())
    task_col = pick_column(path, cols, None, ("task_id", "qid", "query_id", "id"), "task id")
    crit_col = pick_column(path, cols, None, ("task_criticalness", "criticality", "criticalness"), "criticality")
    out: dict[str, str] = {}
    for row in rows:
        task, crit = str(row.data.get(task_col, "")).strip(), str(row.data.get(crit_col, "")).strip()
        if not task or not crit:
            raise EngineError(f"{where(path, row.line)}: empty {task_col} or {crit_col}")
        if task in out:
            raise EngineError(f"{where(path, row.line)}: task {task} listed twice")
        trec_safe_ids([task], "strict", where(path, row.line), fixable=False)
        out[task] = criticality_label(crit)
    return out


def ntcir_a_groups(tasks: str | os.PathLike, out: str | os.PathLike) -> int:
    """`engine convert ntcir-a-groups`: tasks.csv → `qid<TAB>group` (criticality); returns the task count."""
    return write_groups(out, read_ntcir_a_groups(tasks))




# ---------------------------------------------------------------- TREC 2025 Million LLMs

DEFAULT_TARGETS = "0:0,1:1.0,2:0.7"
"""The public baseline's grade → target map: 0 not, 1 most, 2 second-most relevant."""


def parse_targets(spec: str) -> dict[int, float]:
    """`0:0,1:1.0,2:0.7` → {grade: target}; grades the map leaves out are an error when met."""
    out: dict[int, float] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        grade, sep, value = part.partition(":")
        try:
            g, v = int(grade.strip()), float(value.strip())
        except ValueError:
            raise EngineError(f"grade map {spec!r}: {part.strip()!r} is not `grade:target` "
                              f"(e.g. {DEFAULT_TARGETS})") from None
        if not sep or not np.isfinite(v):
            raise EngineError(f"grade map {spec!r}: {part.strip()!r} is not `grade:target`")
        out[g] = v
    if not out:
        raise EngineError(f"grade map {spec!r} is empty; e.g. {DEFAULT_TARGETS}")
    return out


def grade_gains(targets: str) -> dict[int, float]:
    """The grade map with grade 0 (unjudged) worth 0 unless the map says otherwise: targets and nDCG gains."""
    gain = parse_targets(targets)
    gain.setdefault(0, 0.0)
    return gain


@dataclass
class DevSet:
    """Judged dev questions: ids, texts, LLM ids, target matrix and the grades behind it."""
    query_ids: list[str]
    texts: list[str]
    llm_ids: list[str]
    targets: np.ndarray
    grades: np.ndarray
    gain: dict[int, float]


def read_dev(dev_queries: str | Path, qrels: str | Path, llm_ids: str | Path | None = None,
             targets: str = DEFAULT_TARGETS) -> DevSet:
    """Dev questions that have judgments; the candidates are `llm_ids` (one per line; a repeated id is an
    error naming its line) or every LLM in the qrels. Unjudged LLMs count as grade 0, as in TREC."""
    gain = parse_targets(targets)
    questions = dict(read_queries(dev_queries))
    judged = read_qrels(qrels)
    candidates = list(read_id_list(llm_ids, unique=True, whole_line=True)) if llm_ids else sorted(
        {d for docs in judged.values() for d in docs})
    col = {c: j for j, c in enumerate(candidates)}
    unknown_q = [q for q in judged if q not in questions]
    if unknown_q:
        warn(f"{len(unknown_q)} qrels quer{'y is' if len(unknown_q) == 1 else 'ies are'} not in {dev_queries} "
             f"and skipped: {', '.join(unknown_q[:5])}")
    qids = [q for q in questions if q in judged]
    if len(qids) < 2:
        raise EngineError(f"{qrels}: only {len(qids)} of the questions in {dev_queries} are judged; "
                          "transfer needs at least 2 (do the query ids match?)")
    unjudged = len(questions) - len(qids)
    if unjudged:
        warn(f"{unjudged} dev question(s) have no judgments and are not used")
    grades = np.zeros((len(qids), len(candidates)), dtype=int)
    for i, q in enumerate(qids):
        for doc, g in judged[q].items():
            if doc not in col:
                raise EngineError(f"{qrels}: query {q} judges LLM {doc!r}, which is not in {llm_ids}; "
                                  "fix the id or the LLM list")
            if g not in gain:
                raise EngineError(f"{qrels}: query {q}, LLM {doc}: grade {g} has no target in the grade map "
                                  f"{targets!r}; add it, e.g. {opt('targets')} {targets},{g}:0")
            grades[i, col[doc]] = g
    gain = grade_gains(targets)
    lookup = np.vectorize(lambda g: gain[int(g)], otypes=[float])
    return DevSet(qids, [questions[q] for q in qids], candidates, lookup(grades), grades, gain)
