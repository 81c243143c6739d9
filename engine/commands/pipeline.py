"""`engine pipeline run FILE …`, `engine pipeline show TASK`, `engine pipeline stages`. Parsing only: the
work lives in `.run` and `.parse`; a task adds its default pipeline with `register_task_pipeline`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from engine.commands.flags import Device
from engine.errors import EngineError
from engine.io.options import K, cli, options_command

@dataclass(frozen=True)
class TaskPipeline:
    """A task's default pipeline: the function returning its file's text, and the index its collections are
    named under (the task's default `--name`), which the task's `--name N` rebinds to N."""
    text: Callable[[], str]
    index: str


TASK_PIPELINES: dict[str, TaskPipeline] = {}
"""task name → its default pipeline (registered by each task's CLI)."""


def register_task_pipeline(task: str, text: Callable[[], str], index: str) -> None:
    TASK_PIPELINES[task] = TaskPipeline(text, index)


def task_pipeline_header(task: str) -> str:
    """The comment `engine pipeline show TASK` prints above the file: how its collections are named and that
    the task's `--name` rebinds them (engine.core.ranking.pipeline.rebind)."""
    index = TASK_PIPELINES[task].index
    return (f"# Collections are named as `engine search` names them: \"{index}\" and \"{index}/…\" are the index "
            f"{index} (the task's default --name).\n"
            f"# `engine {task} submit --name N --pipeline FILE` reads them as index N's (\"{index}/x\" as \"N/x\"); "
            "a collection of another index is refused.\n")


pipeline_app = typer.Typer(no_args_is_help=True,
                           help="Rankers composed of stages: run a pipeline file, print a task's default "
                                "pipeline, list the stages (see docs/pipelines.md).")

Root = Annotated[Optional[Path], typer.Option("--root", help="Folder of the collections (default: indexes/).")]
CacheDir = Annotated[Optional[Path], typer.Option("--cache", help="Folder of cached stage outputs (default: "
                                                  "$ENGINE_CACHE/pipelines).")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Compute every stage; read and write no cache.")]


def make_cache(cache: Path | None, no_cache: bool):
    from engine.core.ranking.pipeline.cache import StageCache, default_cache_dir
    if no_cache and cache is not None:
        raise EngineError("give --cache DIR or --no-cache, not both")
    return StageCache(None if no_cache else (cache or default_cache_dir()))


@dataclass(frozen=True)
class PipelineRunOptions:
    """What `engine pipeline run` is told, each option declared once (engine.io.options.options_command)."""
    file: Annotated[Path, cli(typer.Argument(help="Pipeline file (TOML with a `pipeline` expression)."))]
    queries: Annotated[Path, cli(typer.Option("--queries", help="Queries: TSV qid<TAB>text, CSV, or JSONL (with "
                                          "`examples` for search by example)."))]
    out: Annotated[Path, cli(typer.Option("--out", help="The TREC run to write."))]
    root: Annotated[Optional[Path], cli(Root)] = None
    k: Annotated[Optional[int], cli(typer.Option("-k", "--k", help="Keep the top k of each ranking (default: all "
                                             "the pipeline returns).", min=1, max=100000)), K] = None
    run_id: Annotated[Optional[str], cli(typer.Option("--run-id", help="Run id column (default: the file's stem)."))] \
        = None
    cache: Annotated[Optional[Path], cli(CacheDir)] = None
    no_cache: Annotated[bool, cli(NoCache)] = False
    device: Annotated[str, cli(Device)] = "auto"
    quiet: Annotated[bool, cli(typer.Option("--quiet", "-q", help="No status lines."))] = False


def _run(o: PipelineRunOptions) -> None:
    """Run a pipeline file on a query file and write a TREC run."""
    from engine.core.ranking.pipeline.parse import read_pipeline_file
    from engine.core.ranking.pipeline.query import read_queries_file
    from engine.core.ranking.pipeline.run import Context, run_pipeline, write_pipeline_run
    from engine.core.encoders.device import set_device
    from engine.progress import info, set_quiet
    set_quiet(o.quiet)
    set_device(o.device)  # the query side of every stage's encoder (dense, sparse, multi-vector, rerankers)
    stage = read_pipeline_file(o.file)
    qs = read_queries_file(o.queries)
    ctx = Context(root=o.root, cache=make_cache(o.cache, o.no_cache))
    run = run_pipeline(stage, qs, ctx)
    cached = sum(1 for r in ctx.log if r.cached)
    n = write_pipeline_run(run, o.out, o.run_id or Path(o.file).stem.replace(" ", "_"), o.k)
    info(f"pipeline {o.file}: {len(qs)} queries, {n} lines → {o.out}"
         + (f" ({cached} of {len(ctx.log)} stages read from the cache)" if cached else ""))


run_cmd = pipeline_app.command("run")(options_command(PipelineRunOptions, _run))


@pipeline_app.command("show")
def show_cmd(task: Annotated[str, typer.Argument(help="Task whose default pipeline to print: "
                                                 "eventa or dse.")]) -> None:
    """Print a task's default pipeline as a file `engine pipeline run` and `--pipeline` take."""
    if task not in TASK_PIPELINES:
        raise EngineError(f"no default pipeline for {task!r}; tasks with one: {', '.join(sorted(TASK_PIPELINES))}")
    typer.echo(task_pipeline_header(task) + TASK_PIPELINES[task].text(), nl=False)


@pipeline_app.command("stages")
def stages_cmd(markdown: Annotated[bool, typer.Option("--markdown", help="A Markdown table.")] = False) -> None:
    """List the stage constructors a pipeline may call, with their arguments."""
    from engine.core.ranking.pipeline.registry import stage_table
    from engine.display import format_table
    heads, rows = stage_table()
    if not markdown:
        rows = [[c.strip("`") for c in r] for r in rows]
    typer.echo(format_table(heads, rows, markdown=markdown, left=2))
