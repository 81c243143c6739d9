"""Run-level evaluation: per-query values, means over the qrels' queries, per-group means, output.

Means follow `trec_eval -c`: every query in the qrels counts, and one the run does not answer scores 0;
run queries absent from the qrels are ignored (with a warning). EVENTA is the exception the
organizers define: its five parts are averaged over the queries the run answers ("valid" queries)
and the Overall is multiplied by r = valid / ground-truth queries (reported as `eventa.coverage`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from engine.errors import EngineError, where
from engine.io.tables import ID_COLUMNS, pick_column, read_rows
from engine.metrics import (EVENTA_COVERAGE, EVENTA_WEIGHTS, Metric, eventa_overall, parse_metrics,
                            score_query)
from engine.problems import read_text_lines
from engine.progress import warn
from engine.runs import Qrels, Run, read_qrels, read_run

DEFAULT_METRICS = "ndcg@10,map,mrr,recall@10,p@10"
GROUP_COLUMNS = ("group", "criticality", "task_criticalness", "tier", "category")


@dataclass
class Evaluation:
    """Means, per-query values and per-group means of one run against one qrels."""
    metrics: list[Metric]
    columns: list[str]
    means: dict[str, float]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    groups: dict[str, dict[str, float]] = field(default_factory=dict)
    group_sizes: dict[str, int] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def output_columns(metrics: Sequence[Metric]) -> list[str]:
    """Names in the output, in order: eventa brings its Overall, its five parts and its coverage."""
    cols: list[str] = []
    for m in metrics:
        cols += ["eventa", *EVENTA_WEIGHTS, EVENTA_COVERAGE] if m.family == "eventa" else [m.name]
    return cols


def _means(qids: Sequence[str], per_query: Mapping[str, Mapping[str, float]], answered: set[str],
           columns: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    n = len(qids)
    for col in columns:
        if col == "eventa" or col == EVENTA_COVERAGE:
            continue
        if col in EVENTA_WEIGHTS:
            valid = [q for q in qids if q in answered]
            out[col] = sum(per_query[q][col] for q in valid) / len(valid) if valid else 0.0
        else:
            out[col] = sum(per_query[q][col] for q in qids) / n if n else 0.0
    if "eventa" in columns:
        coverage = sum(1 for q in qids if q in answered) / n if n else 0.0
        out["eventa"] = eventa_overall({p: out[p] for p in EVENTA_WEIGHTS}, coverage)
        out[EVENTA_COVERAGE] = coverage
    return {col: out[col] for col in columns}


def evaluate(run: Run, qrels: Qrels, metrics: str | Sequence[str] | Sequence[Metric] = DEFAULT_METRICS,
             groups: Mapping[str, str] | None = None) -> Evaluation:
    """Score `run` against `qrels` with trec_eval's semantics; `groups` (qid → group) adds group means."""
    if not isinstance(metrics, str) and metrics and all(isinstance(m, Metric) for m in metrics):
        specs: list[Metric] = list(metrics)  # type: ignore[arg-type]
    else:
        specs = parse_metrics(metrics)  # type: ignore[arg-type]
    if not qrels:
        raise EngineError("the qrels hold no queries")
    columns = output_columns(specs)
    qids = list(qrels)
    answered = {q for q in qids if q in run}  # an EVENTA row of ten '#' is answered (and scores 0)
    per_query = {q: score_query(run.get(q, {}), qrels[q], specs) for q in qids}
    ignored = [q for q in run if q not in qrels]
    if ignored:
        shown = ", ".join(ignored[:5]) + (" …" if len(ignored) > 5 else "")
        warn(f"{len(ignored)} run quer{'y is' if len(ignored) == 1 else 'ies are'} not in the qrels and "
             f"ignored: {shown}")
    ev = Evaluation(metrics=list(specs), columns=columns,
                    means=_means(qids, per_query, answered, columns),
                    per_query={q: {c: v[c] for c in columns if c in v} for q, v in per_query.items()},
                    n_queries=len(qids), ignored=ignored, missing=[q for q in qids if q not in answered])
    if groups is not None:
        members: dict[str, list[str]] = {}
        for q, g in groups.items():
            if q in qrels:
                members.setdefault(g, []).append(q)
        ungrouped = [q for q in qids if q not in groups]
        if ungrouped:
            warn(f"{len(ungrouped)} qrels quer{'y has' if len(ungrouped) == 1 else 'ies have'} no group: "
                 + ", ".join(ungrouped[:5]) + (" …" if len(ungrouped) > 5 else ""))
        ev.groups = {g: _means(qs, per_query, answered, columns) for g, qs in members.items()}
        ev.group_sizes = {g: len(qs) for g, qs in members.items()}
    return ev


def read_groups(path: str | os.PathLike) -> dict[str, str]:
    """qid → group from `qid<TAB>group` lines (an optional header) or a CSV/JSON(L) table with id and group
    columns. A qid given two different groups is an error naming both lines."""
    path = Path(path)
    suffix = path.suffix.lower()
    pairs: list[tuple[int, str, str]] = []
    if suffix in (".csv", ".json", ".jsonl", ".ndjson"):
        rows = read_rows(path)
        if not rows:
            raise EngineError(f"{path}: no rows")
        cols = list(rows[0].data.keys())
        id_col = pick_column(path, cols, None, ID_COLUMNS + ("task_id",), "query id")
        group_col = pick_column(path, cols, None, GROUP_COLUMNS, "group")
        pairs = [(r.line, str(r.data.get(id_col, "")).strip(), str(r.data.get(group_col, "")).strip())
                 for r in rows]
    else:
        for n, text in enumerate(read_text_lines(path), 1):
            if not text.strip():
                continue
            parts = text.split("\t") if "\t" in text else text.split(None, 1)
            if len(parts) != 2:
                raise EngineError(f"{where(path, n)}: expected `qid<TAB>group`, found {len(parts)} field(s)")
            qid, group = parts[0].strip(), parts[1].strip()
            if n == 1 and qid.lower() in ID_COLUMNS + ("task_id",) and group.lower() in GROUP_COLUMNS:
                continue  # header
            pairs.append((n, qid, group))
    out: dict[str, str] = {}
    first: dict[str, int] = {}
    for n, qid, group in pairs:
        if not qid or not group:
            raise EngineError(f"{where(path, n)}: empty query id or group")
        if qid in out and out[qid] != group:
            raise EngineError(f"{where(path, n)}: query {qid!r} is in group {group!r} here and in "
                              f"{out[qid]!r} on line {first[qid]}")
        out.setdefault(qid, group)
        first.setdefault(qid, n)
    if not out:
        raise EngineError(f"{path}: no `qid<TAB>group` lines")
    return out


def load_run(path: str | os.PathLike) -> Run:
    """A TREC run, or an EVENTA `submission.csv`/`.zip` read as a run (slot i scores 10 − i)."""
    path = Path(path)
    if path.suffix.lower() in (".csv", ".zip"):
        from engine.eventa_submission import read_eventa_submission
        rows = read_eventa_submission(path)
        return {q: {doc: float(len(docs) - i) for i, doc in enumerate(docs)} for q, docs in rows.items()}
    return read_run(path)


def evaluate_files(run_path: str | os.PathLike, qrels_path: str | os.PathLike,
                   metrics: str | Sequence[str] = DEFAULT_METRICS,
                   groups_path: str | os.PathLike | None = None) -> Evaluation:
    """`engine eval`: read the files (errors name file and line), then `evaluate`."""
    specs = parse_metrics(metrics)  # fail on a bad metric before reading big files
    qrels = read_qrels(qrels_path)
    run = load_run(run_path)
    groups = read_groups(groups_path) if groups_path is not None else None
    return evaluate(run, qrels, specs, groups)


def to_json(ev: Evaluation, per_query: bool = False) -> dict:
    """`{metric: mean}`, plus `per_query` {qid: {metric: value}} and `groups` {group: {metric: mean}}."""
    out: dict = dict(ev.means)
    if per_query:
        out["per_query"] = ev.per_query
    if ev.groups:
        out["groups"] = ev.groups
        out["group_queries"] = ev.group_sizes
    return out


def _fmt(v: float) -> str:
    return f"{v:.4f}"


def format_table(ev: Evaluation, per_query: bool = False) -> str:
    """A plain-text table: one row per metric, a column for all queries and one per group; with
    `per_query`, a second table of one row per query."""
    heads = ["metric", f"all ({ev.n_queries})"] + [f"{g} ({ev.group_sizes[g]})" for g in ev.groups]
    rows = [[c, _fmt(ev.means[c])] + [_fmt(ev.groups[g][c]) for g in ev.groups] for c in ev.columns]
    text = _align([heads] + rows)
    if per_query:
        cols = [c for c in ev.columns if c != "eventa" and c != EVENTA_COVERAGE]
        pq = [["qid"] + cols] + [[q] + [_fmt(v[c]) for c in cols] for q, v in ev.per_query.items()]
        text += "\n\n" + _align(pq)
    return text


def _align(table: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = []
    for r in table:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
