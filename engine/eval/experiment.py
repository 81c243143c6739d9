"""`engine experiment`: several pipelines run on the same queries, scored on the same qrels, each tested
against the first (PyTerrier's `pt.Experiment`): per metric the mean, the paired t-test p against the first
pipeline, the Holm-corrected p over the others, and per-query wins/ties/losses. Stage outputs come from the
stage cache where an earlier experiment left them (`engine.core.ranking.pipeline.cache`)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.pipeline.prefixes import prefixes
from engine.core.ranking.pipeline.context import StageRecord
from engine.core.ranking.pipeline.run import Context, run_pipeline, write_pipeline_run
from engine.core.ranking.pipeline.stage import Run as StageRun
from engine.core.ranking.pipeline.stage import Stage
from engine.errors import EngineError, missing_extra
from engine.eval.compare import CompareOptions, Comparison, compare
from engine.io.runs import Qrels, Run


@dataclass
class Row:
    name: str
    stage: Stage
    run: StageRun = field(default_factory=dict)
    log: list[StageRecord] = field(default_factory=list)
    step: bool = False   # a prefix of a pipeline (`--stages`), not a pipeline given


@dataclass
class Experiment:
    rows: list[Row]
    comparison: Comparison
    per_query: dict[str, dict[str, dict[str, float]]]  # row → qid → metric → value


def as_run(run: StageRun) -> Run:
    return {q: dict(r.pairs()) for q, r in run.items()}


def experiment(pipelines: Sequence[tuple[str, Stage]], queries: Sequence[Query], qrels: Qrels,
               metrics: str | Sequence[str], ctx: Context, with_stages: bool = False,
               options: CompareOptions = CompareOptions()) -> Experiment:
    """Run each (name, pipeline) — with `with_stages`, also each prefix of its `>>` chain — and compare."""
    from engine.eval.evaluate import evaluate
    from engine.progress import track
    if not pipelines:
        raise EngineError("an experiment needs at least one pipeline")
    names = [n for n, _ in pipelines]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise EngineError(f"two pipelines are named {dup!r} (the file stem); rename one")
    rows: list[Row] = []
    for name, stage in pipelines:
        rows.append(Row(name, stage))
        if with_stages:
            steps = prefixes(stage)[:-1]
            rows += [Row(f"{name}[{i}]", s, step=True) for i, s in enumerate(steps, 1)]
    for row in track(rows, len(rows), "running pipelines"):
        start = len(ctx.log)
        row.run = run_pipeline(row.stage, queries, ctx)
        row.log = ctx.log[start:]
    runs = {row.name: as_run(row.run) for row in rows}
    if len(runs) == 1:  # nothing to test against: the means alone
        ev = evaluate(runs[rows[0].name], qrels, metrics)
        cmp = Comparison([rows[0].name], ev.columns, {rows[0].name: ev.means}, {}, len(qrels), options)
        per_query = {rows[0].name: ev.per_query}
    else:
        cmp = compare(runs, qrels, metrics, options)
        _holm_by_family(cmp, [r.name for r in rows[1:] if not r.step], [r.name for r in rows if r.step])
        per_query = {name: evaluate(run, qrels, metrics).per_query for name, run in runs.items()}
    return Experiment(rows, cmp, per_query)


def _holm_by_family(cmp: Comparison, pipelines: Sequence[str], steps: Sequence[str]) -> None:
    """The correction over the pipelines given alone, and over the stage rows apart: `--stages` adds rows to
    look at, not hypotheses to the pipelines' family, so it leaves their corrected p as it was."""
    from engine.eval.significance import adjust
    for family in (pipelines, steps):
        for c in {c for name in family for c in cmp.tests.get(name, {})}:
            for kind in ("t_p", "rand_p"):
                adjusted = adjust([getattr(cmp.tests[name][c], kind) for name in family], cmp.options.correction)
                for name, p in zip(family, adjusted):
                    setattr(cmp.tests[name][c], kind + "_adj", p)


def to_json(exp: Experiment) -> dict:
    cmp = exp.comparison
    out = []
    for row in exp.rows:
        tests = cmp.tests.get(row.name, {})
        out.append({
            "name": row.name,
            "pipeline": str(row.stage),
            "metrics": dict(cmp.means[row.name]),
            "p": {c: (tests[c].t_p if c in tests else None) for c in cmp.columns},
            "p_holm": {c: (tests[c].t_p_adj if c in tests else None) for c in cmp.columns},
            "wins_ties_losses": {c: [tests[c].wins, tests[c].ties, tests[c].losses] for c in tests},
            "stages": [stage_json(r) for r in row.log],
        })
    return {"pipelines": out, "queries": cmp.n_queries, "baseline": exp.rows[0].name}


COUNTS = ("pairs_scored", "pairs_cached")
"""What a stage may report of its own work (`Context.note`) that `--json` shows."""


def stage_json(record: StageRecord) -> dict:
    """A stage of a run: its text, whether it was read from the cache, and the counts it reported."""
    out: dict = {"stage": record.text, "cached": record.cached}
    out.update({k: record.counts[k] for k in COUNTS if k in record.counts})
    return out


def render(exp: Experiment, markdown: bool = False) -> str:
    """A row per pipeline: each metric, then p and Holm p and W/T/L against the first, per metric."""
    from engine.display import format_table
    cmp = exp.comparison
    heads = ["pipeline"] + list(cmp.columns)
    tested = [c for c in cmp.columns if any(c in t for t in cmp.tests.values())]
    for c in tested:
        heads += [f"p {c}", f"p_holm {c}", f"W/T/L {c}"]
    rows = []
    for row in exp.rows:
        tests = cmp.tests.get(row.name, {})
        cells = [row.name] + [f"{cmp.means[row.name][c]:.4f}" for c in cmp.columns]
        for c in tested:
            t = tests.get(c)
            cells += ([f"{t.t_p:.4f}", f"{t.t_p_adj:.4f}", f"{t.wins}/{t.ties}/{t.losses}"] if t else ["–"] * 3)
        rows.append(cells)
    cached = sum(r.cached for row in exp.rows for r in row.log)
    total = sum(len(row.log) for row in exp.rows)
    steps = sum(row.step for row in exp.rows)
    family = f"the other {len(exp.rows) - 1 - steps} pipelines" + (
        f" (the {steps} stage rows corrected apart, so --stages leaves the pipelines' p_holm unchanged)"
        if steps else "")
    legend = (f"\n{cmp.n_queries} queries; p: paired t-test against {exp.rows[0].name}; p_holm: Holm-corrected over "
              f"{family}; W/T/L: queries better/equal/worse; {cached} of {total} stage outputs "
              "read from the cache")
    return format_table(heads, rows, markdown=markdown) + legend


def plot(exp: Experiment, path: str | os.PathLike) -> Path:
    """The first metric per pipeline, and each pipeline's per-query differences against the first (sorted)."""
    try:
        import matplotlib
    except ImportError:
        raise missing_extra("matplotlib (for --plot)", "plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from engine.io.atomic import atomic_path
    cmp = exp.comparison
    metric = cmp.columns[0]
    names = [r.name for r in exp.rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.barh(names[::-1], [cmp.means[n][metric] for n in names[::-1]], color="#4c72b0")
    ax1.set_xlabel(metric)
    ax1.set_title(f"{metric} per pipeline")
    base = exp.per_query[names[0]]
    qids = sorted(base)
    for n in names[1:]:
        diffs = sorted((exp.per_query[n].get(q, {}).get(metric, 0.0) - base[q].get(metric, 0.0) for q in qids),
                       reverse=True)
        ax2.plot(range(len(diffs)), diffs, label=n)
    ax2.axhline(0, color="grey", linewidth=0.8)
    ax2.set_xlabel("queries (sorted by difference)")
    ax2.set_ylabel(f"{metric} − {names[0]}")
    ax2.set_title("per-query differences against the first")
    if len(names) > 1:
        ax2.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return path


def write_runs(exp: Experiment, folder: str | os.PathLike) -> list[Path]:
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise EngineError(f"--out {folder} is a file; give a folder for the runs")
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for row in exp.rows:
        path = folder / f"{row.name}.run"
        write_pipeline_run(row.run, path, row.name.replace(" ", "_"))
        paths.append(path)
    return paths
