"""`engine dse build|submit|eval`, `engine convert dsebench-qrels|dsebench-run`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.commands.collection import Device, Quiet, RayAddress, Root
from engine.core.collection import DEFAULT_ROOT
from engine.core.ranking.rerankers.registry import RERANK_DEPTH
from engine.io.options import BATCH_SIZE, DEPTH, cli, options_command, taken
from engine.progress import info, set_quiet
from engine.tasks.dse.data import dsebench_qrels, dsebench_run
from engine.tasks.dse.index import DEFAULT_NAME, BuildOptions, build_dse
from engine.tasks.dse.pipeline import EvalOptions, SubmitOptions, eval_command, submit_dse

BUILD, SUBMIT, EVAL = BuildOptions(), SubmitOptions(), EvalOptions()

dse_app = typer.Typer(no_args_is_help=True, help="Dataset search with examples (DSEBench): a keyword query plus "
                                                 "example datasets → ranked datasets. build, submit, eval.")
DseName = Annotated[str, typer.Option("--name", help="Index name: a collection under --root.")]
DseQueries = Annotated[Path, typer.Option("--queries", help="DSEBench queries.tsv: query_id<TAB>text, no header.")]
DseCases = Annotated[Path, typer.Option("--cases", help="DSEBench cases.tsv: case_id<TAB>query_id<TAB>example_dataset_id, "
                                        "no header; repeat a case_id for several examples.")]
DseFolds = Annotated[Optional[Path], typer.Option("--folds", help="DSEBench Data/Splits/5-Fold_split: fold_k/"
                                                  "{train,valid,test}.json; weights are tuned per fold on train.")]
DseRerank = Annotated[Optional[str], typer.Option("--rerank", help="Reranker spec reordering each case's top "
                     "candidates by its query (e.g. cross:/models/bge-reranker).", show_default=False)]
DseRerankDepth = Annotated[int, typer.Option("--rerank-depth", help="Candidates per case the reranker reads.")]
DseDepth = Annotated[int, typer.Option("--depth", help="Datasets per case in the ranking.")]


@dataclass(frozen=True)
class DseBuildOptions:
    """What `engine dse build` is told, each option declared once (engine.io.options.options_command)."""
    datasets: Annotated[Path, cli(typer.Option("--datasets", help="DSEBench datasets.json: a JSON list of "
                                           "{id, title, description, tags, author, summary}."))]
    name: Annotated[str, cli(DseName)] = DEFAULT_NAME
    model: Annotated[str, cli(typer.Option("--model", help="Sentence model spec (offline)."))] = BUILD.model
    batch_size: Annotated[int, cli(typer.Option("--batch-size", help="Texts per encoder batch.")),
                          BATCH_SIZE] = BUILD.batch_size
    device: Annotated[str, cli(Device)] = BUILD.device
    ray: Annotated[Optional[str], cli(RayAddress)] = BUILD.ray
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False


def _dse_build(o: DseBuildOptions) -> None:
    """Embed each field and the whole record of every dataset, and build a BM25 index over all fields.

    The index is the collection NAME; building again replaces a DSEBench index of that name."""
    set_quiet(o.quiet)
    build_dse(o.datasets, o.name, o.root, taken(BuildOptions, o))


dse_build_cmd = dse_app.command("build")(options_command(DseBuildOptions, _dse_build))


@dataclass(frozen=True)
class DseSubmitOptions:
    """What `engine dse submit` is told, each option declared once (engine.io.options.options_command)."""
    queries: Annotated[Path, cli(DseQueries)]
    cases: Annotated[Path, cli(DseCases)]
    out: Annotated[Path, cli(typer.Option("--out", help="TREC run to write: case_id Q0 dataset_id rank score runid."))]
    split: Annotated[str, cli(typer.Option("--split", help="Cases to rank: test (DSEBench's numbered test cases), "
                                       "train, all, or a split file (JSON judgments or one case id a line)."))] \
        = SUBMIT.split
    method: Annotated[str, cli(typer.Option("--method", help="rrf (untuned fusion of query and examples), tuned "
                                        "(weighted fusion; needs --folds or --weights), query, examples."))] \
        = SUBMIT.method
    folds: Annotated[Optional[Path], cli(DseFolds)] = SUBMIT.folds
    weights: Annotated[Optional[Path], cli(typer.Option("--weights", help="Fusion weights JSON {feature: weight} "
                       "(or a file written by --save-weights) for --method tuned."))] = SUBMIT.weights
    save_weights: Annotated[Optional[Path], cli(typer.Option("--save-weights", help="With --folds: write the tuned "
                            "weights of every fold here (JSON)."))] = SUBMIT.save_weights
    name: Annotated[str, cli(DseName)] = DEFAULT_NAME
    depth: Annotated[int, cli(DseDepth), DEPTH] = SUBMIT.depth
    run_id: Annotated[Optional[str], cli(typer.Option("--run-id", help="Run id column (default dse-METHOD).",
                      show_default=False))] = SUBMIT.run_id
    rerank: Annotated[Optional[str], cli(DseRerank)] = SUBMIT.rerank
    rerank_depth: Annotated[int, cli(DseRerankDepth), RERANK_DEPTH] = SUBMIT.rerank_depth
    datasets: Annotated[Optional[Path], cli(typer.Option("--datasets", help="DSEBench datasets.json: build the index "
                        "first unless --name already indexes this file (one command from data to run)."))] = None
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False
    pipeline: Annotated[Optional[Path], cli(typer.Option("--pipeline", help="A pipeline file to rank the cases with "
                        "instead of the default (print it with `engine pipeline show dse`)."))] = None


def _dse_submit(o: DseSubmitOptions) -> None:
    """Rank the catalogue for every case; a case's example datasets are never returned for it."""
    set_quiet(o.quiet)
    submit_dse(o.queries, o.cases, o.out, o.name, o.root, taken(SubmitOptions, o), o.datasets)


dse_submit_cmd = dse_app.command("submit")(options_command(DseSubmitOptions, _dse_submit))


@dataclass(frozen=True)
class DseEvalOptions:
    """What `engine dse eval` is told, each option declared once (engine.io.options.options_command)."""
    judgments: Annotated[Path, cli(typer.Option("--judgments", help="DSEBench human_annotated_judgments.json; gain = "
                                            "query_rel × target_sim."))]
    folds: Annotated[Optional[Path], cli(DseFolds)] = EVAL.folds
    run: Annotated[Optional[Path], cli(typer.Option("--run", help="Score this run file; without it, score the "
                   "variants (query only, examples only, fused RRF, fused tuned with --folds) of the built "
                   "index."))] = EVAL.run
    queries: Annotated[Optional[Path], cli(typer.Option("--queries", help="queries.tsv (needed without --run)."))] \
        = EVAL.queries
    cases: Annotated[Optional[Path], cli(typer.Option("--cases", help="cases.tsv (needed without --run)."))] \
        = EVAL.cases
    name: Annotated[str, cli(DseName)] = DEFAULT_NAME
    depth: Annotated[int, cli(DseDepth), DEPTH] = EVAL.depth
    rerank: Annotated[Optional[str], cli(DseRerank)] = EVAL.rerank
    rerank_depth: Annotated[int, cli(DseRerankDepth), RERANK_DEPTH] = EVAL.rerank_depth
    out: Annotated[Optional[Path], cli(typer.Option("--out", help="Also write the table as JSON here."))] = None
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False


def _dse_eval(o: DseEvalOptions) -> None:
    """nDCG@5/10, MAP@5/10, R@5/10 with the DSEBench gain, computed by `engine eval`'s metrics."""
    set_quiet(o.quiet)
    typer.echo(eval_command(o.judgments, o.name, o.root, taken(EvalOptions, o), o.out))


dse_eval_cmd = dse_app.command("eval")(options_command(DseEvalOptions, _dse_eval))


def convert_dsebench_qrels_cmd(judgments: Annotated[Path, typer.Argument(help="human_annotated_judgments.json")],
                               out: Annotated[Path, typer.Argument(help="TREC qrels to write.")]) -> None:
    """DSEBench judgments → TREC qrels (gain = query_rel × target_sim)."""
    info(f"wrote {dsebench_qrels(judgments, out)} qrels lines to {out}")


def convert_dsebench_run_cmd(run_json: Annotated[Path, typer.Argument(help="{case_id: {dataset_id: score}} JSON.")],
                             out: Annotated[Path, typer.Argument(help="TREC run to write.")],
                             run_id: Annotated[Optional[str], typer.Option("--run-id", help="[default: file stem]",
                                                                           show_default=False)] = None) -> None:
    """DSEBench baseline run JSON → TREC run (same ranking as trec_eval reads the JSON)."""
    info(f"wrote {dsebench_run(run_json, out, run_id)} run lines to {out}")


def register(app: typer.Typer, validate: typer.Typer, convert: typer.Typer) -> None:
    from engine.commands.pipeline import register_task_pipeline
    from engine.tasks.dse.stages import default_pipeline_file
    register_task_pipeline("dse", default_pipeline_file, DEFAULT_NAME)
    app.add_typer(dse_app, name="dse")
    convert.command("dsebench-qrels")(convert_dsebench_qrels_cmd)
    convert.command("dsebench-run")(convert_dsebench_run_cmd)
