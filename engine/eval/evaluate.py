"""Run-level evaluation: per-query values, means over the qrels' queries, per-group means, output.

Means follow `trec_eval -c`: every query in the qrels counts, and one the run does not answer scores 0;
run queries absent from the qrels are ignored (with a warning). A metric may define its own run-level
aggregation (EVENTA: parts averaged over the queries the run answers, Overall times the coverage r).
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import EngineError, preview
from engine.eval.groups import read_groups
from engine.eval.metrics import Metric, parse_metrics, score_query
from engine.eval.profiles import PROFILES, get_profile
from engine.io.runs import Qrels, Run, load_qrels, load_run
from engine.progress import warn

DEFAULT_METRICS = PROFILES["trec"].metrics


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
    """Names in the output, in order (a metric with parts brings them all, e.g. EVENTA's Overall, five
    parts and coverage)."""
    return [c for m in metrics for c in m.columns]


def _means(qids: Sequence[str], per_query: Mapping[str, Mapping[str, float]], answered: set[str],
           metrics: Sequence[Metric]) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in metrics:
        summary = m.definition.summary
        if summary is not None:
            out.update(summary(per_query, qids, answered))
        else:
            out[m.name] = sum(per_query[q][m.name] for q in qids) / len(qids) if qids else 0.0
    return {col: out[col] for col in output_columns(metrics)}


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
        warn(f"{len(ignored)} run quer{'y is' if len(ignored) == 1 else 'ies are'} not in the qrels and "
             f"ignored: {preview(ignored)}")
    ev = Evaluation(metrics=list(specs), columns=columns,
                    means=_means(qids, per_query, answered, specs),
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
                 + preview(ungrouped))
        ev.groups = {g: _means(qs, per_query, answered, specs) for g, qs in members.items()}
        ev.group_sizes = {g: len(qs) for g, qs in members.items()}
    return ev


def evaluate_files(run_path: str | os.PathLike, qrels_path: str | os.PathLike,
                   metrics: str | Sequence[str] = DEFAULT_METRICS,
                   groups_path: str | os.PathLike | None = None) -> Evaluation:
    """`engine eval`: read the files (errors name file and line), then `evaluate`."""
    specs = parse_metrics(metrics)  # fail on a bad metric before reading big files
    qrels = load_qrels(qrels_path)
    run = load_run(run_path)
    warn_missing_queries(run, qrels, run_path)
    groups = read_groups(groups_path) if groups_path is not None else None
    return evaluate(run, qrels, specs, groups)


def load_profile_runs(run_path: str | os.PathLike, qrels: Qrels, profile: str = "trec",
                      docs_path: str | os.PathLike | None = None) -> tuple[dict[str, Run], Qrels]:
    """A run file as `profile` accepts it: {label: run} and the qrels under its id rules. trec-like profiles
    read one run (labelled by the file name without its suffix); NTCIR profiles check the file (any error
    rejects it, in one line) and give one run per RunID, ordered as the spec says (ties by line order). The
    required topics are the qrels'; the candidates, `docs_path`, or else the qrels' models where the subtask
    judges every model (A)."""
    prof = get_profile(profile)
    if prof.checker != "ntcir":
        return {Path(run_path).stem: load_run(run_path)}, qrels
    from engine.eval.ntcir import RULES, check_ntcir, normalize_qrels
    from engine.io.ids import read_id_list
    qrels = normalize_qrels(qrels, profile)
    models: list[str] | None = list(read_id_list(docs_path)) if docs_path is not None else None
    if models is None and RULES[profile].qrels_judge_all:
        models = sorted({d for judged in qrels.values() for d in judged})
    check = check_ntcir(run_path, profile, list(qrels), models)
    check.raise_if_invalid(f"engine validate run {run_path} --profile {profile}")
    return check.runs, qrels


def evaluate_profile_files(run_path: str | os.PathLike, qrels_path: str | os.PathLike, profile: str = "trec",
                           metrics: str | Sequence[str] | None = None,
                           groups_path: str | os.PathLike | None = None,
                           docs_path: str | os.PathLike | None = None) -> dict[str, Evaluation]:
    """`engine eval --profile`: {run label: Evaluation}, one per RunID for NTCIR files."""
    specs = parse_metrics(metrics if metrics is not None else get_profile(profile).metrics)
    runs, qrels = load_profile_runs(run_path, load_qrels(qrels_path), profile, docs_path)
    groups = read_groups(groups_path) if groups_path is not None else None
    if groups is not None and get_profile(profile).checker == "ntcir":
        from engine.eval.ntcir import RULES
        groups = {RULES[profile].topic(q): g for q, g in groups.items()}
    for label, run in runs.items():
        warn_missing_queries(run, qrels, run_path if len(runs) == 1 else f"{run_path} ({label})")
    return {label: evaluate(run, qrels, specs, groups) for label, run in runs.items()}


def runs_table(evs: Mapping[str, Evaluation], markdown: bool = False) -> str:
    """One row per run (and per group under it, e.g. NTCIR's criticality tiers): the layout of a leaderboard."""
    from engine.display import format_table as table
    first = next(iter(evs.values()))
    rows = []
    for label, ev in evs.items():
        rows.append([label, "all", str(ev.n_queries)] + [_fmt(ev.means[c]) for c in ev.columns])
        rows += [[label, g, str(ev.group_sizes[g])] + [_fmt(ev.groups[g][c]) for c in ev.columns] for g in ev.groups]
    return table(["run", "queries", "n"] + first.columns, rows, markdown=markdown, left=2)


def warn_missing_queries(run: Mapping[str, object], qrels: Mapping[str, object], run_path: object) -> None:
    """Say how many judged queries the run lacks: trec_eval -c scores them 0, which is right for a run
    that found nothing and wrong for a run made from another query set."""
    missing = [q for q in qrels if q not in run]
    if missing:
        warn(f"{run_path}: {len(missing)} of {len(qrels)} qrels queries are missing from the run and score 0 "
             f"({preview(missing)})")


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
    `per_query`, a second table of one row per query (run-level values such as EVENTA's Overall left out)."""
    from engine.display import format_table as table
    heads = ["metric", f"all ({ev.n_queries})"] + [f"{g} ({ev.group_sizes[g]})" for g in ev.groups]
    rows = [[c, _fmt(ev.means[c])] + [_fmt(ev.groups[g][c]) for g in ev.groups] for c in ev.columns]
    text = table(heads, rows)
    if per_query:
        cols = [c for c in ev.columns if any(c in v for v in ev.per_query.values())]
        text += "\n\n" + table(["qid"] + cols, [[q] + [_fmt(v[c]) for c in cols] for q, v in ev.per_query.items()])
    return text
