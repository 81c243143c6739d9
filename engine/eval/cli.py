"""`engine eval`, and the `validate` and `convert` groups that tasks add their own formats to."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.eval.metrics import known_metrics
from engine.eval.profiles import PROFILES

QueriesOpt = Annotated[Optional[Path], typer.Option("--queries", help="Query ids to expect (query file or id list).")]
DocsOpt = Annotated[Optional[Path], typer.Option("--docs", help="Allowed doc/image ids (one per line, or a table "
                                                                "with an id column).")]


def eval_cmd(
    run: Annotated[Path, typer.Argument(help="TREC run `qid Q0 docid rank score runid` (or an EVENTA submission "
                                             ".csv/.zip).")],
    qrels: Annotated[Path, typer.Argument(help="TREC qrels `qid 0 docid rel`.")],
    metrics: Annotated[Optional[str], typer.Option("--metrics", "-m", help=f"Comma-separated: {known_metrics()}. "
                       "[default: the profile's]", show_default=False)] = None,
    profile: Annotated[str, typer.Option("--profile", help="Scoring rules of a benchmark: "
                       + "; ".join(f"{p.name} ({p.metrics})" for p in PROFILES.values()) + ".")] = "trec",
    per_query: Annotated[bool, typer.Option("--per-query", help="Also each query's values.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout instead of a table.")] = False,
    groups: Annotated[Optional[Path], typer.Option("--groups", help="`qid<TAB>group` file: adds a mean per group.")]
    = None,
) -> None:
    """Score a run with trec_eval's semantics (qrels queries missing from the run score 0)."""
    import json

    from engine.eval.evaluate import evaluate_files, format_table, to_json
    from engine.eval.profiles import get_profile
    ev = evaluate_files(run, qrels, metrics or get_profile(profile).metrics, groups)
    typer.echo(json.dumps(to_json(ev, per_query)) if as_json else format_table(ev, per_query))


def validate_run_cmd(file: Annotated[Path, typer.Argument(help="TREC run file.")],
                     queries: QueriesOpt = None, docs: DocsOpt = None) -> None:
    """Check a TREC run; exit 1 if anything is wrong."""
    from engine.eval.validate import validate_run
    report = validate_run(file, queries, docs)
    typer.echo(report.text())
    raise typer.Exit(report.exit_code)


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
    validate.command("run")(validate_run_cmd)
    app.add_typer(validate, name="validate")
    app.add_typer(convert, name="convert")
    return validate, convert
