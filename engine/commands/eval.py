"""`engine eval`, and the `validate` and `convert` groups that tasks add their own formats to."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.io.fusion import METHODS, NORMALIZERS, RRF_K_RANGE
from engine.eval.compare import ALPHA, FORMATS, RESAMPLES_RANGE, CompareOptions
from engine.eval.fuse import FuseOptions
from engine.eval.metrics import known_metrics
from engine.eval.profiles import PROFILES
from engine.eval.significance import CORRECTIONS
from engine.errors import EngineError, missing_extra
from engine.io.options import DEPTH, SEED, WEIGHTS, cli, options_command, taken

COMPARE = CompareOptions()
FUSE = FuseOptions()

QueriesOpt = Annotated[Optional[Path], typer.Option("--queries", help="Query ids to expect (query file or id list).")]
DocsOpt = Annotated[Optional[Path], typer.Option("--docs", help="Allowed doc/image ids (one per line, or a table "
                                                                "with an id column).")]
ProfileOpt = Annotated[str, typer.Option("--profile", help="Scoring rules of a benchmark: "
                       + "; ".join(f"{p.name} ({p.metrics})" for p in PROFILES.values()) + ".")]
MetricsOpt = Annotated[str | None, typer.Option("--metrics", "-m", help=f"Comma-separated: {known_metrics()}. "
                       "[default: the profile's]", show_default=False)]
CandidatesOpt = Annotated[Path | None, typer.Option("--docs", help="NTCIR profiles: the candidate model ids every "
                          "topic must list (one per line, or a table with an id column) [default: ntcir-a the qrels' "
                          "models; ntcir-b the models the file names].", show_default=False)]


def eval_cmd(
    run: Annotated[Path, typer.Argument(help="TREC run `qid Q0 docid rank score runid` (or an EVENTA submission "
                                             ".csv/.zip).")],
    qrels: Annotated[Path, typer.Argument(help="TREC qrels `qid 0 docid rel`.")],
    metrics: MetricsOpt = None,
    profile: ProfileOpt = "trec",
    per_query: Annotated[bool, typer.Option("--per-query", help="Also each query's values.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout instead of a table.")] = False,
    groups: Annotated[Optional[Path], typer.Option("--groups", help="`qid<TAB>group` file: adds a mean per group.")]
    = None,
    docs: CandidatesOpt = None,
) -> None:
    """Score a run with trec_eval's semantics (qrels queries missing from the run score 0), or with a
    benchmark's own rules (`--profile`; NTCIR: one row per RunID, a rejected file is an error)."""
    from engine.eval.evaluate import (
        evaluate_files,
        evaluate_profile_files,
        format_table,
        runs_table,
        to_json,
    )
    from engine.eval.profiles import get_profile
    from engine.io.jsonio import dumps
    prof = get_profile(profile)
    if prof.checker == "trec":
        ev = evaluate_files(run, qrels, metrics if metrics is not None else prof.metrics, groups)
        typer.echo(dumps(to_json(ev, per_query)) if as_json else format_table(ev, per_query))
        return
    evs = evaluate_profile_files(run, qrels, profile, metrics, groups, docs)
    typer.echo(dumps({label: to_json(ev, per_query) for label, ev in evs.items()}) if as_json
               else runs_table(evs))


def validate_run_cmd(file: Annotated[Path, typer.Argument(help="TREC run file.")],
                     queries: QueriesOpt = None, docs: DocsOpt = None, profile: ProfileOpt = "trec") -> None:
    """Check a run as the benchmark's organizers do (`--profile`); exit 1 if anything is wrong."""
    from engine.eval.validate import validate_profile_run
    report = validate_profile_run(file, profile, queries, docs)
    typer.echo(report.text())
    raise typer.Exit(report.exit_code)


@dataclass(frozen=True)
class CompareCommandOptions:
    """What `engine compare` is told, each option declared once (engine.io.options.options_command)."""
    qrels: Annotated[Path, cli(typer.Argument(help="TREC qrels `qid 0 docid rel`."))]
    runs: Annotated[list[Path], cli(typer.Argument(help="Runs; the first is the baseline every other is tested "
                                                   "against."))]
    profile: Annotated[str, cli(ProfileOpt)] = "trec"
    metrics: Annotated[Optional[str], cli(MetricsOpt)] = None
    alpha: Annotated[float, cli(typer.Option("--alpha", help="Significance level of the markers (above 0, at most 0.5).")),
                     ALPHA] = COMPARE.alpha
    correction: Annotated[str, cli(typer.Option("--correction", help=f"Multiple-comparison correction over the runs: "
                          f"{', '.join(CORRECTIONS)}."))] = COMPARE.correction
    resamples: Annotated[int, cli(typer.Option("--resamples", help="Randomization test: random pair swaps (exact "
                         "enumeration when 2^queries is fewer).")), RESAMPLES_RANGE] = COMPARE.resamples
    seed: Annotated[int, cli(typer.Option("--seed", help="Randomization test seed (same seed, same p-values).")),
                    SEED] \
        = COMPARE.seed
    fmt: Annotated[str, cli(typer.Option("--format", help=f"Output: {', '.join(FORMATS)}."))] = "table"
    docs: Annotated[Optional[Path], cli(CandidatesOpt)] = None


def _compare(o: CompareCommandOptions) -> None:
    """Compare runs on one qrels: means, paired t-test and Fisher randomization test against the first run
    (p-values corrected over the runs), significance markers, per-query wins/ties/losses."""
    from engine.eval.compare import compare_files, render
    cmp = compare_files(o.qrels, o.runs, o.profile, o.metrics, taken(CompareOptions, o), o.docs)
    typer.echo(render(cmp, o.fmt))


compare_cmd = options_command(CompareCommandOptions, _compare)


@dataclass(frozen=True)
class FuseCommandOptions:
    """What `engine fuse` is told, each option declared once (engine.io.options.options_command)."""
    runs: Annotated[list[Path], cli(typer.Argument(help="TREC runs to fuse (two or more)."))]
    out: Annotated[Path, cli(typer.Option("--out", "-o", help="Fused TREC run to write."))]
    method: Annotated[str, cli(typer.Option("--method", help=f"{', '.join(METHODS)}: reciprocal rank fusion, sum of "
                      "normalized scores, that sum times the number of runs returning the doc, weighted sum."))] \
        = FUSE.method
    weights: Annotated[str | None, cli(typer.Option("--weights", help="Comma-separated, one per run (wsum needs them "
                       "or --tune).")), WEIGHTS] = None
    norm: Annotated[str, cli(typer.Option("--norm", help="Score normalization per query: "
                    f"{', '.join(NORMALIZERS)}."))] = FUSE.norm
    k: Annotated[int, cli(typer.Option("--k", help="RRF constant: score = Σ w / (k + rank).")), RRF_K_RANGE] = FUSE.k
    tune: Annotated[Path | None, cli(typer.Option("--tune", help="Qrels to tune the weights on (coordinate ascent); "
                    "the tuned weights are printed."))] = None
    metric: Annotated[str, cli(typer.Option("--metric", help="What --tune maximizes."))] = FUSE.metric
    depth: Annotated[int, cli(typer.Option("--depth", help="Docs kept per query in the fused run.")),
                     DEPTH] = FUSE.depth
    run_id: Annotated[str, cli(typer.Option("--run-id", help="Run id written in the last column."))] = FUSE.run_id


def _fuse(o: FuseCommandOptions) -> None:
    """Fuse runs query by query (RRF, CombSUM, CombMNZ, weighted sum) into one run."""
    from engine.eval.fuse import fuse_files, parse_weights
    report = fuse_files(o.runs, o.out, taken(FuseOptions, o),
                        parse_weights(o.weights) if o.weights is not None else None, o.tune)
    w = f"; weights {', '.join(f'{x:g}' for x in report.weights)}" if report.weights is not None else ""
    tuned = f" (tuned: {o.metric} {report.tuned:.4f} on the tuning qrels)" if report.tuned is not None else ""
    typer.echo(f"{o.out}: {report.lines} lines, {report.queries} queries, {o.method}{w}{tuned}")


fuse_cmd = options_command(FuseCommandOptions, _fuse)


def metrics_cmd(markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown tables.")] = False) -> None:
    """The metrics `--metrics` takes and the scoring profiles `--profile` takes (their registries)."""
    from engine.display import doc_table
    from engine.eval.metrics import metric_table
    profiles = [[f"`{p.name}`", f"`{p.metrics}`", p.help] for p in PROFILES.values()]
    typer.echo(doc_table(*metric_table(), markdown=markdown, left=3) + "\n\n"
               + doc_table(["profile", "metrics", "rules"], profiles, markdown=markdown, left=3))


def register(app: typer.Typer) -> tuple[typer.Typer, typer.Typer]:
    """Add `eval`, `validate` and `convert` to the app; returns the two groups for the tasks to extend."""
    validate = typer.Typer(no_args_is_help=True, help="Check a run or a submission before uploading it: "
                                                      "every problem with its line number.")
    convert = typer.Typer(no_args_is_help=True, help="Benchmark files to TREC qrels/runs/groups, "
                                                     "or a run to an EVENTA submission.")
    app.command("eval")(eval_cmd)
    app.command("metrics")(metrics_cmd)
    app.command("compare")(compare_cmd)
    app.command("fuse")(fuse_cmd)
    app.command("experiment")(experiment_cmd)
    validate.command("run")(validate_run_cmd)
    app.add_typer(validate, name="validate")
    app.add_typer(convert, name="convert")
    return validate, convert


@dataclass(frozen=True)
class ExperimentOptions:
    """What `engine experiment` is told, each option declared once (engine.io.options.options_command)."""
    files: Annotated[list[Path], cli(typer.Argument(help="Pipeline files; the first is the baseline the others are "
                                                "tested against."))]
    queries: Annotated[Path, cli(typer.Option("--queries", help="Queries: TSV qid<TAB>text, CSV, or JSONL."))]
    qrels: Annotated[Path, cli(typer.Option("--qrels", help="TREC qrels `qid 0 docid rel`."))]
    metrics: Annotated[Optional[str], cli(MetricsOpt)] = None
    profile: Annotated[str, cli(ProfileOpt)] = "trec"
    root: Annotated[Path | None, cli(typer.Option("--root", help="Folder of the collections (default: indexes/)."))] \
        = None
    out: Annotated[Path | None, cli(typer.Option("--out", help="Folder to write each run to, as <file stem>.run."))] \
        = None
    as_json: Annotated[bool, cli(typer.Option("--json", help="Print JSON: pipelines, metrics, p, p_holm, stages."))] \
        = False
    plot: Annotated[Path | None, cli(typer.Option("--plot", help="Draw the metric per pipeline and per-query "
                    "differences to this PNG (needs matplotlib)."))] = None
    stages: Annotated[bool, cli(typer.Option("--stages", help="Add a row for each prefix of each pipeline."))] = False
    cache: Annotated[Path | None, cli(typer.Option("--cache", help="Folder of cached stage outputs (default: "
                     "$ENGINE_CACHE/pipelines)."))] = None
    no_cache: Annotated[bool, cli(typer.Option("--no-cache", help="Compute every stage; read and write no cache."))] \
        = False
    markdown: Annotated[bool, cli(typer.Option("--markdown", help="A Markdown table."))] = False


def _experiment(o: ExperimentOptions) -> None:
    """Run pipelines on the same queries and compare them: metrics, paired t-test against the first,
    Holm-corrected p, wins/ties/losses; stage outputs cached."""
    import json as _json
    from engine.commands.pipeline import make_cache
    from engine.core.ranking.pipeline.parse import read_pipeline_file
    from engine.core.ranking.pipeline.query import read_queries_file
    from engine.core.ranking.pipeline.run import Context
    from engine.eval import experiment as ex
    from engine.eval.profiles import get_profile
    from engine.io.runs import read_qrels
    from engine.progress import info
    if o.plot is not None and o.plot.suffix.lower() != ".png":
        raise EngineError(f"--plot {o.plot}: give a .png file")
    if o.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise missing_extra("matplotlib (for --plot)", "plot") from None
    pipelines = [(Path(f).stem, read_pipeline_file(f)) for f in o.files]
    qs = read_queries_file(o.queries)
    gold = read_qrels(o.qrels)
    ctx = Context(root=o.root, cache=make_cache(o.cache, o.no_cache))
    exp = ex.experiment(pipelines, qs, gold, o.metrics or get_profile(o.profile).metrics, ctx, o.stages)
    if o.out is not None:
        paths = ex.write_runs(exp, o.out)
        info(f"wrote {len(paths)} runs to {o.out}/")
    if o.plot is not None:
        info(f"wrote {ex.plot(exp, o.plot)}")
    typer.echo(_json.dumps(ex.to_json(exp), indent=2) if o.as_json else ex.render(exp, o.markdown))


experiment_cmd = options_command(ExperimentOptions, _experiment)
