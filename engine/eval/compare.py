"""`engine compare`: several runs on one qrels, each tested against the first (the baseline), query by query.

Per metric and run: the mean (trec_eval -c: a qrels query the run misses scores 0), the paired t-test and
the Fisher randomization test against the baseline with p-values corrected over the runs (Holm by default),
markers where significant at alpha, and per-query wins/ties/losses. One table as text, Markdown, LaTeX or JSON.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from engine.io.options import MAX_RESAMPLES, SEED as SEED_RANGE, Float, Int
from engine.errors import EngineError
from engine.eval.evaluate import Evaluation, evaluate, load_profile_runs
from engine.eval.metrics import Metric, parse_metrics
from engine.eval.profiles import get_profile
from engine.io.runs import Qrels, Run, load_qrels
from engine.eval.significance import (
    CORRECTIONS,
    RESAMPLES,
    SEED,
    adjust,
    paired_t,
    randomization,
)

FORMATS = ("table", "markdown", "latex", "json")
ALPHA = Float(0, 0.5, open_lo=True)
"""Significance level of the markers: `engine compare/experiment --alpha` and `CompareOptions` alike (above 0.5,
a "significant" difference would be likelier chance than not)."""
RESAMPLES_RANGE = Int(1, MAX_RESAMPLES)
"""Randomization-test resamples: `engine compare --resamples` and `CompareOptions` alike."""
T_MARK, RAND_MARK = "†", "‡"   # significant by the t-test / by the randomization test (after correction)


@dataclass(frozen=True)
class CompareOptions:
    alpha: float = 0.05
    correction: str = "holm"
    resamples: int = RESAMPLES
    seed: int = SEED

    def __post_init__(self) -> None:
        ALPHA.check("alpha", self.alpha)
        if self.correction not in CORRECTIONS:
            raise EngineError(f"unknown correction {self.correction!r}; use one of {', '.join(CORRECTIONS)}")
        RESAMPLES_RANGE.check("resamples", self.resamples)  # bounded: memory grows with resamples × queries
        SEED_RANGE.check("seed", self.seed)


@dataclass
class Test:
    """One run against the baseline on one metric."""
    t_p: float
    rand_p: float
    t_p_adj: float = 1.0
    rand_p_adj: float = 1.0
    wins: int = 0
    ties: int = 0
    losses: int = 0


@dataclass
class Comparison:
    labels: list[str]
    columns: list[str]
    means: dict[str, dict[str, float]]
    tests: dict[str, dict[str, Test]]   # run (not the baseline) → metric → test (metrics with per-query values)
    n_queries: int
    options: CompareOptions = field(default_factory=CompareOptions)

    @property
    def baseline(self) -> str:
        return self.labels[0]


def compare(runs: Mapping[str, Run], qrels: Qrels, metrics: str | Sequence[str] | Sequence[Metric],
            options: CompareOptions = CompareOptions()) -> Comparison:
    """Score every run and test each against the first on every metric with per-query values."""
    if len(runs) < 2:
        raise EngineError(f"compare needs at least 2 runs (a baseline and one more), got {len(runs)}")
    specs = metrics if isinstance(metrics, str) else list(metrics)
    evs: dict[str, Evaluation] = {label: evaluate(run, qrels, specs) for label, run in runs.items()}
    labels = list(evs)
    base = evs[labels[0]]
    qids = list(qrels)
    columns = base.columns
    tested = [c for c in columns if all(c in base.per_query[q] for q in qids)]
    tests: dict[str, dict[str, Test]] = {label: {} for label in labels[1:]}
    for c in tested:
        a = [base.per_query[q][c] for q in qids]
        for label in labels[1:]:
            b = [evs[label].per_query[q][c] for q in qids]
            t = Test(paired_t(a, b) if len(qids) > 1 else 1.0, randomization(a, b, options.resamples, options.seed),
                     wins=sum(y > x for x, y in zip(a, b)), ties=sum(y == x for x, y in zip(a, b)),
                     losses=sum(y < x for x, y in zip(a, b)))
            tests[label][c] = t
        for kind in ("t_p", "rand_p"):
            adjusted = adjust([getattr(tests[lab][c], kind) for lab in labels[1:]], options.correction)
            for lab, p in zip(labels[1:], adjusted):
                setattr(tests[lab][c], kind + "_adj", p)
    return Comparison(labels, columns, {lab: ev.means for lab, ev in evs.items()}, tests, len(qids), options)


def compare_files(qrels_path: str | os.PathLike, run_paths: Sequence[str | os.PathLike], profile: str = "trec",
                  metrics: str | None = None, options: CompareOptions = CompareOptions(),
                  docs_path: str | os.PathLike | None = None) -> Comparison:
    """`engine compare`: read qrels and runs as `profile` reads them (an NTCIR file gives one run per RunID);
    runs are labelled by file name, or by RunID for NTCIR files, made unique with the file name if needed."""
    specs = parse_metrics(metrics or get_profile(profile).metrics)
    qrels = load_qrels(qrels_path)
    runs: dict[str, Run] = {}
    for path in run_paths:
        got, scored_qrels = load_profile_runs(path, qrels, profile, docs_path)
        for label, run in got.items():
            key = label if label not in runs else f"{path}:{label}"
            if key in runs:
                raise EngineError(f"{path}: run {label!r} is given twice; compare distinct runs")
            runs[key] = run
    return compare(runs, scored_qrels, specs, options)


# ---------------------------------------------------------------- output

def _p(p: float) -> str:
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def _cells(cmp: Comparison, label: str, c: str, latex: bool) -> list[str]:
    mean = f"{cmp.means[label][c]:.4f}"
    t = cmp.tests.get(label, {}).get(c)
    if t is None:
        return [mean, "—", "—", "—"] if not latex else [mean, "--", "--", "--"]
    marks = (T_MARK if t.t_p_adj < cmp.options.alpha else "") + (RAND_MARK if t.rand_p_adj < cmp.options.alpha else "")
    if latex:
        marks = marks.replace(T_MARK, r"\dagger").replace(RAND_MARK, r"\ddagger")
        marks = f"$^{{{marks}}}$" if marks else ""
    return [mean + marks, _p(t.t_p_adj), _p(t.rand_p_adj), f"{t.wins}/{t.ties}/{t.losses}"]


def _legend(cmp: Comparison) -> str:
    o = cmp.options
    return (f"{cmp.n_queries} queries; baseline {cmp.baseline}; p-values {o.correction}-corrected over "
            f"{len(cmp.labels) - 1} run{'s' if len(cmp.labels) > 2 else ''}; {T_MARK} paired t-test, {RAND_MARK} "
            f"randomization test ({o.resamples} resamples, seed {o.seed}) at alpha {o.alpha}; W/T/L: queries "
            "better/equal/worse than the baseline")


def to_json(cmp: Comparison) -> dict:
    o = cmp.options
    runs = {}
    for label in cmp.labels:
        row: dict = {}
        for c in cmp.columns:
            entry: dict = {"mean": cmp.means[label][c]}
            t = cmp.tests.get(label, {}).get(c)
            if t is not None:
                entry.update(t_p=t.t_p, t_p_adjusted=t.t_p_adj, randomization_p=t.rand_p,
                             randomization_p_adjusted=t.rand_p_adj, wins=t.wins, ties=t.ties, losses=t.losses,
                             significant_t=t.t_p_adj < o.alpha, significant_randomization=t.rand_p_adj < o.alpha)
            row[c] = entry
        runs[label] = row
    return {"baseline": cmp.baseline, "queries": cmp.n_queries, "alpha": o.alpha, "correction": o.correction,
            "resamples": o.resamples, "seed": o.seed, "runs": runs}


def render(cmp: Comparison, fmt: str = "table") -> str:
    """The comparison as `table` (plain text), `markdown`, `latex` or `json`."""
    if fmt not in FORMATS:
        raise EngineError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "json":
        import json
        return json.dumps(to_json(cmp), indent=2)
    latex = fmt == "latex"
    heads = ["run"] + [h for c in cmp.columns for h in (c, f"{c} p(t)", f"{c} p(rand)", f"{c} W/T/L")]
    rows = [[label] + [x for c in cmp.columns for x in _cells(cmp, label, c, latex)] for label in cmp.labels]
    if not latex:
        from engine.display import format_table
        return format_table(heads, rows, markdown=fmt == "markdown") + "\n\n" + _legend(cmp)

    def esc(text: str) -> str:
        return text.replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("&", r"\&").replace("%", r"\%") \
            .replace("#", r"\#")

    lines = [r"\begin{tabular}{l" + "r" * (len(heads) - 1) + "}", r"\toprule",
             " & ".join(esc(h) for h in heads) + r" \\", r"\midrule"]
    lines += [" & ".join([esc(r[0])] + [x if "$" in x else esc(x) for x in r[1:]]) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}", "% " + _legend(cmp).replace(T_MARK, r"\dagger")
              .replace(RAND_MARK, r"\ddagger")]
    return "\n".join(lines)
