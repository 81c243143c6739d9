"""`engine rerank RUN …`: reorder a TREC run (a group, so `engine rerank train` can join it as a subcommand).
Parsing only: the work lives in `engine.core.rerankers.runs`."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from engine.core.rerankers.registry import DEFAULT_DEPTH, reranker_help

Device = Annotated[str, typer.Option("--device", help="Where the reranker runs: auto, cpu, cuda, cuda:N, mps "
                                     "(fp16 autocast on CUDA).")]


class RunOrSubcommand(TyperGroup):
    """`engine rerank RUN …` runs the default command; `engine rerank train …` the named one."""

    def parse_args(self, ctx, args):
        if args and args[0] == "train" and "train" not in self.commands:
            from engine.errors import EngineError
            raise EngineError("`engine rerank train` (fine-tuning a cross-encoder on pairs) is not built yet; "
                              "give `engine rerank RUN …` a trained cross-encoder folder")
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


rerank_app = typer.Typer(cls=RunOrSubcommand, no_args_is_help=True,
                         help="Reorder a TREC run's top documents with a reranker: `engine rerank RUN --queries Q "
                              "--docs SOURCE --model SPEC --depth N --out RUN2`.")


@rerank_app.command("run")
def rerank_run_cmd(
    run: Annotated[Path, typer.Argument(help="TREC run to rerank (any system's: BM25, another engine …).")],
    queries: Annotated[Path, typer.Option("--queries", help="Query texts: TSV qid<TAB>text, CSV or JSONL.")],
    docs: Annotated[Path, typer.Option("--docs", help="Text table (CSV/JSONL/TSV) holding every reranked "
                    "document's id and text.")],
    model: Annotated[str, typer.Option("--model", help=reranker_help())],
    out: Annotated[Path, typer.Option("--out", help="The reranked TREC run to write.")],
    depth: Annotated[int, typer.Option("--depth", help="Documents per query the reranker reorders; the rest "
                     "follow in their order.")] = DEFAULT_DEPTH,
    fields: Annotated[Optional[str], typer.Option("--fields", help="Comma-separated text columns of --docs.")]
    = None,
    id_column: Annotated[Optional[str], typer.Option("--id-column", help="Id column of --docs.")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run-id", help="Run id column (default: rerank-<run>).")]
    = None,
    device: Device = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No status lines.")] = False,
) -> None:
    """Rerank a TREC run against a text source; scores written strictly decreasing."""
    from engine.core.cli import split_list
    from engine.core.encoders.device import set_device
    from engine.core.rerankers.runs import rerank_run_file
    from engine.progress import info, set_quiet
    set_quiet(quiet)
    set_device(device)
    n, lines = rerank_run_file(run, queries, docs, model, depth, out, run_id, id_column, split_list(fields))
    info(f"reranked {n} queries with {model}: wrote {lines} lines to {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(rerank_app, name="rerank")
