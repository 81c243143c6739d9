"""`engine rerank RUN …`: reorder a TREC run; `engine rerank train …`: fine-tune a cross-encoder on pairs.
A group whose default command is `run`. Parsing only: the work lives in `.runs` and `.train`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from engine.commands.flags import RerankBatchTokens, RerankDtype, RerankInstruction, RerankRounds, RerankTemplate
from engine.core.ranking.rerankers.prompts import BATCH_TOKENS, ROUNDS
from engine.core.ranking.rerankers.registry import DEFAULT_DEPTH, RERANK_DEPTH, reranker_help
from engine.core.ranking.rerankers.train import PATIENCE, RANGES as TRAIN_RANGES, TrainOptions
from engine.io.options import cli, options_command, taken

Device = Annotated[str, typer.Option("--device", help="Where the reranker runs: auto, cpu, cuda, cuda:N, mps "
                                     "(fp16 autocast on CUDA).")]


class RunOrSubcommand(TyperGroup):
    """`engine rerank RUN …` runs the default command; `engine rerank train …` the named one."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


rerank_app = typer.Typer(cls=RunOrSubcommand, no_args_is_help=True,
                         help="Reorder a TREC run's top documents with a reranker: `engine rerank RUN --queries Q "
                              "--docs SOURCE --model SPEC --depth N --out RUN2`; fine-tune a cross-encoder "
                              "on pairs: `engine rerank train --pairs PAIRS.csv --base DIR --out DIR`.")


@dataclass(frozen=True)
class RerankRunOptions:
    """What `engine rerank RUN` is told, each option declared once (engine.io.options.options_command)."""
    run: Annotated[Path, cli(typer.Argument(help="TREC run to rerank (any system's: BM25, another engine …)."))]
    queries: Annotated[Path, cli(typer.Option("--queries", help="Query texts: TSV qid<TAB>text, CSV or JSONL."))]
    docs: Annotated[Path, cli(typer.Option("--docs", help="Text table (CSV/JSONL/TSV) holding every reranked "
                    "document's id and text."))]
    model: Annotated[str, cli(typer.Option("--model", help=reranker_help()))]
    out: Annotated[Path, cli(typer.Option("--out", help="The reranked TREC run to write."))]
    depth: Annotated[int, cli(typer.Option("--depth", help="Documents per query the reranker reorders; the rest "
                     "follow in their order.")), RERANK_DEPTH] = DEFAULT_DEPTH
    fields: Annotated[Optional[str], cli(typer.Option("--fields", help="Comma-separated text columns of "
                      "--docs."))] = None
    id_column: Annotated[Optional[str], cli(typer.Option("--id-column", help="Id column of --docs."))] = None
    run_id: Annotated[Optional[str], cli(typer.Option("--run-id", help="Run id column (default: "
                      "rerank-<run>)."))] = None
    rerank_template: Annotated[Optional[str], cli(RerankTemplate)] = None
    rerank_instruction: Annotated[Optional[str], cli(RerankInstruction)] = None
    rerank_rounds: Annotated[Optional[int], cli(RerankRounds), ROUNDS] = None
    rerank_batch_tokens: Annotated[Optional[int], cli(RerankBatchTokens), BATCH_TOKENS] = None
    rerank_dtype: Annotated[Optional[str], cli(RerankDtype)] = None
    device: Annotated[str, cli(Device)] = "auto"
    quiet: Annotated[bool, cli(typer.Option("--quiet", "-q", help="No status lines."))] = False

    def reranker_options(self) -> dict:
        """The reranker loader's keyword options (None: its default)."""
        return {"template": self.rerank_template, "instruction": self.rerank_instruction,
                "rounds": self.rerank_rounds, "batch_tokens": self.rerank_batch_tokens,
                "dtype": self.rerank_dtype}


def _run(o: RerankRunOptions) -> None:
    """Rerank a TREC run against a text source; scores written strictly decreasing."""
    from engine.core.encoders.device import set_device
    from engine.progress import info, set_quiet
    set_quiet(o.quiet)
    set_device(o.device)
    n, lines = rerank_run_file(o)
    info(f"reranked {n} queries with {o.model}: wrote {lines} lines to {o.out}")


def rerank_run_file(o: RerankRunOptions) -> tuple[int, int]:
    """`run(RUN, docs=…) >> rerank(SPEC, depth)`: the reranker parsed once, the run, its queries' texts and
    its documents' texts read and checked before any model loads, the pipeline run and its rankings written
    (atomically); returns (queries, lines written)."""
    from engine.core.ranking.pipeline.run import run_pipeline, write_pipeline_run
    from engine.core.ranking.pipeline.runfile import RunFile
    from engine.core.ranking.pipeline.stage import Context
    from engine.core.ranking.rerankers.registry import check_depth
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.core.ranking.rerankers.stage import check_candidates
    from engine.core.ranking.search_settings import rerank_stage
    from engine.io.options import split_list
    from engine.io.tables import read_queries
    spec = RerankerSpec.parse(o.model, **o.reranker_options())
    check_candidates(spec, "text", str(o.docs))
    check_depth(o.depth, 1, "depth")
    first = RunFile(str(o.run), docs=str(o.docs), fields=split_list(o.fields) or None, id_column=o.id_column)
    first.load()
    texts = dict(read_queries(o.queries))
    first.check_coverage(texts, str(o.queries), o.depth)
    queries = first.queries(texts)
    run = run_pipeline(first >> rerank_stage(spec, o.depth), queries, Context())
    run_id = o.run_id or f"rerank-{Path(o.run).stem}".replace(" ", "_")
    return len(queries), write_pipeline_run(run, o.out, run_id)


rerank_run_cmd = rerank_app.command("run")(options_command(RerankRunOptions, _run))


TRAIN = TrainOptions()


@dataclass(frozen=True)
class RerankTrainOptions:
    """What `engine rerank train` is told, each option declared once (engine.io.options.options_command)."""
    pairs: Annotated[Path, cli(typer.Option("--pairs", help="CSV with the columns query,document (one relevant "
                     "document per row; the other documents of the file are the negatives)."))]
    base: Annotated[str, cli(typer.Option("--base", help="Cross-encoder to start from: a local folder, a Hugging "
                    "Face id, or all-MiniLM-L6-v2 (installed; a bare encoder, so a fresh head is added)."))]
    out_dir: Annotated[Path, cli(typer.Option("--out", help="Folder to write the trained model to; use it as "
                       "--rerank cross:DIR or --model cross:DIR."))]
    holdout: Annotated[float, cli(typer.Option("--holdout", help="Share of the documents (with their pairs) held "
                       "out, never fitted, to pick the best epoch (0.05–0.5).")),
                       TRAIN_RANGES["holdout"]] = TRAIN.holdout
    epochs: Annotated[int, cli(typer.Option("--epochs", help="Most passes over the fitted queries (stops "
                      f"earlier after {PATIENCE} without a better held-out MRR).")),
                      TRAIN_RANGES["epochs"]] = TRAIN.epochs
    seed: Annotated[int, cli(typer.Option("--seed", help="Seed of the split, the negatives and the fit.")),
                    TRAIN_RANGES["seed"]] = TRAIN.seed
    batch_size: Annotated[int, cli(typer.Option("--batch-size", help="Queries per step, each with its document "
                          "and its negatives (1–1024).")), TRAIN_RANGES["batch_size"]] = TRAIN.batch_size
    lr: Annotated[float, cli(typer.Option("--lr", help="AdamW learning rate (warm-up, then linear decay; "
                  "greater than 0, at most 0.01).")), TRAIN_RANGES["lr"]] = TRAIN.lr
    head_lr: Annotated[float, cli(typer.Option("--head-lr", help="AdamW learning rate of a freshly added head "
                       "(a bare encoder's, e.g. all-MiniLM-L6-v2); a trained head uses --lr (greater than 0, "
                       "at most 0.1).")), TRAIN_RANGES["head_lr"]] = TRAIN.head_lr
    negatives: Annotated[int, cli(typer.Option("--negatives", help="Other documents per query per step: half the "
                         "BM25-hardest, half random (1–63).")), TRAIN_RANGES["negatives"]] = TRAIN.negatives
    force: Annotated[bool, cli(typer.Option("--force", help="Replace a non-empty --out folder."))] = False
    device: Annotated[str, cli(Device)] = "auto"
    quiet: Annotated[bool, cli(typer.Option("--quiet", "-q", help="No status lines."))] = False


def _rerank_train(o: RerankTrainOptions) -> None:
    """Fine-tune a cross-encoder on query,document pairs, early-stopped on held-out pairs; writes a folder
    that `cross:DIR` loads."""
    from engine.core.encoders.device import set_device
    from engine.core.ranking.rerankers.train import first_stage_verdict, train_cross_encoder
    from engine.progress import info, set_quiet, warn
    set_quiet(o.quiet)
    set_device(o.device)
    r = train_cross_encoder(o.pairs, o.base, o.out_dir, taken(TrainOptions, o), o.force, say=info)
    first_stage_verdict(r, o.out_dir, info, warn)


rerank_train_cmd = rerank_app.command("train")(options_command(RerankTrainOptions, _rerank_train))
