"""`engine experiment`: several pipelines run on the same queries, scored on the same qrels, each tested
against the first (PyTerrier's `pt.Experiment`): per metric the mean, the paired t-test p against the first
pipeline, the Holm-corrected p over the others, and per-query wins/ties/losses. Stage outputs come from the
stage cache where an earlier experiment left them (`engine.core.ranking.pipeline.cache`).

Each pipeline's cost is beside its quality: the CPU and wall seconds per query of its stages' own computation
(a stage another row of the same experiment computed counts what it cost there; one read from an earlier
experiment's cache costs nothing here and is counted as read)."""
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
    n_queries: int = 0  # queries run


@dataclass(frozen=True)
class Cost:
    """Seconds per query of a stage's or a pipeline's own computation; `cached`: stages read from a cache."""
    cpu_s_per_query: float
    wall_s_per_query: float
    cached: int = 0

    def as_json(self) -> dict:
        return {"cpu_s_per_query": self.cpu_s_per_query, "wall_s_per_query": self.wall_s_per_query}


def stage_costs(exp: "Experiment", row: Row) -> list[Cost]:
    """Each stage record of `row` as a Cost: its own seconds, or, read from the cache, what the same stage cost
    where another row of this experiment computed it (0 when none did)."""
    computed = {r.text: r for other in exp.rows for r in other.log if not r.cached}
    n = max(1, exp.n_queries)
    out = []
    for r in row.log:
        src = computed.get(r.text, r) if r.cached else r
        out.append(Cost(src.cpu_seconds / n, src.seconds / n, int(r.cached and src is r)))
    return out


def pipeline_cost(exp: "Experiment", row: Row) -> Cost:
    costs = stage_costs(exp, row)
    return Cost(sum(c.cpu_s_per_query for c in costs), sum(c.wall_s_per_query for c in costs),
                sum(c.cached for c in costs))


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
    return Experiment(rows, cmp, per_query, len(queries))


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
            "cost": pipeline_cost(exp, row).as_json(),
            "stages": [stage_json(r, c) for r, c in zip(row.log, stage_costs(exp, row))],
        })
    return {"pipelines": out, "queries": cmp.n_queries, "baseline": exp.rows[0].name}


COUNTS = ("pairs_scored", "pairs_cached")
"""What a stage may report of its own work (`Context.note`) that `--json` shows."""


def stage_json(record: StageRecord, cost: Cost) -> dict:
    """A stage of a run: its text, whether it was read from the cache, the counts it reported, its cost."""
    out: dict = {"stage": record.text, "cached": record.cached}
    out.update({k: record.counts[k] for k in COUNTS if k in record.counts})
    out["cost"] = cost.as_json()
    return out


def render(exp: Experiment, markdown: bool = False) -> str:
    """A row per pipeline: each metric, then p and Holm p and W/T/L against the first, per metric."""
    from engine.display import format_table
    cmp = exp.comparison
    heads = ["pipeline"] + list(cmp.columns) + ["CPU s/query"]
    tested = [c for c in cmp.columns if any(c in t for t in cmp.tests.values())]
    for c in tested:
        heads += [f"p {c}", f"p_holm {c}", f"W/T/L {c}"]
    rows = []
    for row in exp.rows:
        tests = cmp.tests.get(row.name, {})
        cells = ([row.name] + [f"{cmp.means[row.name][c]:.4f}" for c in cmp.columns]
                 + [f"{pipeline_cost(exp, row).cpu_s_per_query:.4g}"])
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
              "read from the cache; CPU s/query: the stages' own computation (a stage read from an earlier "
              "experiment's cache costs 0 here)")
    return format_table(heads, rows, markdown=markdown) + legend


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % confidence interval: Student's t over the queries)."""
    import numpy as np
    from scipy import stats
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return (float(v.mean()) if len(v) else 0.0), 0.0
    return float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))


def figure(exp: Experiment):
    """One bar panel per metric (value labels, 95 % intervals over the queries), the effectiveness–cost panel
    (the first metric against CPU s/query, a point per pipeline and per `--stages` prefix) and the per-query
    differences against the first pipeline. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt
    cmp = exp.comparison
    names = [r.name for r in exp.rows]
    metrics = list(cmp.columns)
    fig, axes = plt.subplots(1, len(metrics) + 2, figsize=(4.2 * (len(metrics) + 2), 0.5 * len(names) + 3),
                             squeeze=False)
    axes = list(axes[0])
    for ax, metric in zip(axes, metrics):
        stats = [mean_ci([exp.per_query[n][q].get(metric, 0.0) for q in exp.per_query[n]]) for n in names]
        means = [cmp.means[n][metric] for n in names]
        bars = ax.barh(names[::-1], means[::-1], xerr=[h for _, h in stats][::-1], color="#4c72b0",
                       error_kw={"ecolor": "#333333", "capsize": 3, "linewidth": 1})
        ax.bar_label(bars, labels=[f"{m:.3f}" for m in means[::-1]], padding=4, fontsize=8)
        ax.set_xlabel(f"{metric} (bars: 95 % CI over the queries)")
        ax.set_title(f"{metric} per pipeline")
        ax.margins(x=0.25)
    cost_ax, diff_ax = axes[-2], axes[-1]
    metric = metrics[0]
    for row in exp.rows:
        cpu = pipeline_cost(exp, row).cpu_s_per_query
        cost_ax.scatter([cpu], [cmp.means[row.name][metric]], marker="o" if "[" not in row.name else "s")
        cost_ax.annotate(row.name, (cpu, cmp.means[row.name][metric]), fontsize=8, xytext=(4, 2),
                         textcoords="offset points")
    from matplotlib.ticker import MaxNLocator
    cost_ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
    cost_ax.set_xlabel("CPU s per query (the stages' own computation)")
    cost_ax.set_ylabel(metric)
    cost_ax.set_title("effectiveness against cost")
    base = exp.per_query[names[0]]
    qids = sorted(base)
    for n in names[1:]:
        diffs = sorted((exp.per_query[n].get(q, {}).get(metric, 0.0) - base[q].get(metric, 0.0) for q in qids),
                       reverse=True)
        diff_ax.plot(range(len(diffs)), diffs, label=n)
    diff_ax.axhline(0, color="grey", linewidth=0.8)
    diff_ax.set_xlabel("queries (sorted by difference)")
    diff_ax.set_ylabel(f"{metric} − {names[0]}")
    diff_ax.set_title("per-query differences against the first")
    if len(names) > 1:
        diff_ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot(exp: Experiment, path: str | os.PathLike) -> Path:
    """`figure` written as a PNG (atomically)."""
    try:
        import matplotlib
    except ImportError:
        raise missing_extra("matplotlib (for --plot)", "plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from engine.io.atomic import atomic_path
    fig = figure(exp)
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
