"""Converters from benchmark-specific files to TREC qrels/runs (and from a run to an EVENTA submission),
so one evaluator scores everything and its numbers can be checked against the published ones.

- DSEBench judgments: gain of a candidate for a case = `query_rel × target_sim` (0..4), the graded
  relevance their evaluation uses; their baseline runs are `{case_id: {dataset_id: score}}`.
- NTCIR-19 ModelRetrieval A: `ground-truth.csv` has a `relevance_score` grade (0..3) per task × model;
  `tasks.csv` gives each task's criticality, the groups the organizers report by.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Sequence

from engine.errors import EngineError, where
from engine.io.atomic import atomic_open
from engine.io.tables import pick_column, read_json, read_rows
from engine.metrics import trec_order
from engine.runs import Qrels, Run, read_run, write_qrels, write_run


def _grade(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return int(v) if math.isfinite(v) and v.is_integer() else None


# ---------------------------------------------------------------- DSEBench

DSEBENCH_KEYS = ("case_id", "candidate_dataset_id", "query_rel", "target_sim")


def read_dsebench_judgments(path: str | os.PathLike) -> Qrels:
    """case_id → {candidate_dataset_id: query_rel × target_sim} from `human_annotated_judgments.json`."""
    data = read_json(path)
    if not isinstance(data, list):
        raise EngineError(f"{path}: expected a JSON list of judgment records")
    qrels: Qrels = {}
    for i, rec in enumerate(data, 1):
        if not isinstance(rec, dict):
            raise EngineError(f"{path}: record {i} is not a JSON object")
        missing = [k for k in DSEBENCH_KEYS if k not in rec]
        if missing:
            raise EngineError(f"{path}: record {i} lacks {', '.join(missing)}")
        case, cand = str(rec["case_id"]).strip(), str(rec["candidate_dataset_id"]).strip()
        q_rel, t_sim = _grade(rec["query_rel"]), _grade(rec["target_sim"])
        if q_rel is None or t_sim is None or q_rel < 0 or t_sim < 0:
            raise EngineError(f"{path}: record {i} (case {case}): query_rel {rec['query_rel']!r} and target_sim "
                              f"{rec['target_sim']!r} must be non-negative integers")
        judged = qrels.setdefault(case, {})
        if cand in judged:
            raise EngineError(f"{path}: record {i}: case {case} judges candidate {cand} twice")
        judged[cand] = q_rel * t_sim
    if not qrels:
        raise EngineError(f"{path}: no judgments")
    return qrels


def dsebench_qrels(judgments: str | os.PathLike, out: str | os.PathLike) -> int:
    """`engine convert dsebench-qrels`: write the judgments as TREC qrels; returns the line count."""
    return write_qrels(out, read_dsebench_judgments(judgments))


def read_json_run(path: str | os.PathLike) -> Run:
    """A `{qid: {docid: score}}` JSON run (DSEBench's baseline format), scores checked to be finite."""
    data = read_json(path)
    if not isinstance(data, dict) or not data:
        raise EngineError(f"{path}: expected a non-empty JSON object {{case_id: {{dataset_id: score}}}}")
    run: Run = {}
    for qid, docs in data.items():
        if not isinstance(docs, dict):
            raise EngineError(f"{path}: query {qid!r}: expected an object {{dataset_id: score}}")
        scores: dict[str, float] = {}
        for doc, score in docs.items():
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise EngineError(f"{path}: query {qid!r}, doc {doc!r}: score {score!r} is not a finite number")
            scores[str(doc)] = float(score)
        run[str(qid)] = scores
    return run


def _run_id_from(path: str | os.PathLike) -> str:
    return re.sub(r"\s+", "_", Path(path).stem) or "run"


def dsebench_run(run_json: str | os.PathLike, out: str | os.PathLike, run_id: str | None = None) -> int:
    """`engine convert dsebench-run`: a JSON run to a TREC run. Docs go in trec_eval's order of the
    original scores (ties by docid descending), so the TREC file scores exactly as the JSON would."""
    run = read_json_run(run_json)
    rankings = {q: [(d, scores[d]) for d in trec_order(scores)] for q, scores in run.items()}
    return write_run(out, rankings, run_id or _run_id_from(run_json))


# ---------------------------------------------------------------- NTCIR-19 ModelRetrieval A


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
        grade = _grade(str(row.data.get(rel_col, "")).strip())
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
        out[task] = criticality_label(crit)
    return out


def write_groups(path: str | os.PathLike, groups: dict[str, str]) -> int:
    """`qid<TAB>group` lines under a `qid<TAB>group` header, the format `engine eval --groups` reads."""
    with atomic_open(path) as fh:
        fh.write("qid\tgroup\n")
        for qid, group in groups.items():
            fh.write(f"{qid}\t{group}\n")
    return len(groups)


def ntcir_a_groups(tasks: str | os.PathLike, out: str | os.PathLike) -> int:
    """`engine convert ntcir-a-groups`: tasks.csv → `qid<TAB>group` (criticality); returns the task count."""
    return write_groups(out, read_ntcir_a_groups(tasks))


# ---------------------------------------------------------------- EVENTA


def run_to_eventa(run: str | os.PathLike, out_dir: str | os.PathLike,
                  queries: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """`engine convert eventa-submission`: a TREC run → `submission.csv` + `submission.zip` (top 10 per
    query in trec_eval order). With `queries`, rows follow that file and unanswered queries get `#`s."""
    from engine.eventa_submission import write_eventa_submission
    from engine.validate import read_id_list

    ranked = read_run(run)
    query_ids: Sequence[str] | None = list(read_id_list(queries, unique=True)) if queries is not None else None
    return write_eventa_submission(out_dir, ranked, query_ids)
