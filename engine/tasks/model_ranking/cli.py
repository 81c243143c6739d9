"""`engine modelret-a`, `engine mllm`, `engine convert ntcir-a-qrels|ntcir-a-groups`."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.core.cli import Quiet
from engine.errors import EngineError
from engine.progress import set_quiet

TransferK = Annotated[Optional[int], typer.Option("--k", help="Nearest training queries to average (default: tuned "
                                                  "by leave-one-out over 1,3,5,10,20,50).", show_default=False)]
TransferTemp = Annotated[Optional[float], typer.Option("--temperature", help="Softmax temperature over the "
                         "neighbours' cosines; small = nearest dominates (default: tuned over 0.01,0.03,0.1,1).",
                         show_default=False)]
TransferPrior = Annotated[Optional[float], typer.Option("--prior-weight", help="Weight 0..1 of the candidates' "
                          "global mean score blended in (default: tuned over 0,0.25,0.5,0.75).", show_default=False)]
TransferFolds = Annotated[int, typer.Option("--folds", help="With --cv: outer folds (0 = leave-one-out); params are "
                                            "tuned by leave-one-out inside each training fold.")]
TransferModel = Annotated[Optional[str], typer.Option("--model", help="Sentence model spec (default: "
                          "sbert:all-MiniLM-L6-v2, offline).", show_default=False)]
TransferRunId = Annotated[str, typer.Option("--run-id", help="Run tag written in the last column.")]
TransferReport = Annotated[Optional[Path], typer.Option("--report", help="With --cv: also write the results as JSON.")]


def modelret_a_cmd(
    train: Annotated[Path, typer.Option("--train", help="Folder laid out like ntcir19-modelretrieval-a: tasks.csv, "
                                        "models.csv, ground-truth.csv, task-data/train-tasks/<id>/{train,val}.jsonl.")],
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Folder of <task_id>/{train,val}.jsonl to rank "
                                                    "models for.")] = None,
    tasks_csv: Annotated[Optional[Path], typer.Option("--tasks-csv", help="Task table with task_instruction, "
                         "task_criticalness, text_col, label_col (default: TRAIN/tasks.csv).", show_default=False)]
    = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="TREC run to write (task_id Q0 model_id …).")] = None,
    cv: Annotated[bool, typer.Option("--cv", help="Cross-validate on the training tasks: nDCG@1/3/5 (gain 2^rel−1), "
                                     "overall and per criticality, for the average-rank baseline, each view and "
                                     "their best blend.")] = False,
    views: Annotated[Optional[str], typer.Option("--views", help="Blend exactly these views (comma-separated: text, "
                     "instruction, labels, stats) (default: the best blend by leave-one-out).", show_default=False)]
    = None,
    sample: Annotated[int, typer.Option("--sample", help="Train/val texts embedded per task (mean = text view).")] = 32,
    k: TransferK = None,
    temperature: TransferTemp = None,
    prior_weight: TransferPrior = None,
    folds: TransferFolds = 10,
    model: TransferModel = None,
    run_id: TransferRunId = "engine-transfer",
    report: TransferReport = None,
    quiet: Quiet = False,
) -> None:
    """NTCIR-19 ModelRetrieval A: rank candidate models for a task by the normalized F1 they reached on similar
    training tasks."""
    set_quiet(quiet)
    from engine.tasks.model_ranking import modelret_a
    if cv:
        result = modelret_a.cross_validate_tasks(train, tasks_csv, folds, model, sample, k, temperature, prior_weight)
        typer.echo(result.table())
        if report:
            from engine.io.atomic import write_json
            write_json(report, result.to_json())
        return
    if queries is None or out is None:
        raise EngineError("give --queries DIR and --out RUN to rank models, or --cv to cross-validate")
    from engine.progress import info
    info(modelret_a.rank_tasks(train, queries, out, tasks_csv, views, model, sample, k, temperature, prior_weight,
                               run_id))


def mllm_cmd(
    dev_queries: Annotated[Path, typer.Option("--dev-queries", help="Judged questions: TSV `qid<TAB>text` "
                                              "(llm_dev_data.tsv), CSV or JSONL.")],
    qrels: Annotated[Path, typer.Option("--qrels", help="Dev qrels `qid 0 llm_id grade` (0 not, 1 most, 2 "
                                        "second-most relevant).")],
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Questions to rank LLMs for (TSV "
                                                    "`qid<TAB>text`).")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="TREC run to write (every LLM for every question).")]
    = None,
    cv: Annotated[bool, typer.Option("--cv", help="Cross-validate on the dev questions: nDCG@10 and MRR of the "
                                     "prior and of transfer.")] = False,
    llm_ids: Annotated[Optional[Path], typer.Option("--llm-ids", help="All candidate LLM ids, one per line "
                       "(llm_ids.txt) (default: the LLMs in the qrels).", show_default=False)] = None,
    targets: Annotated[str, typer.Option("--targets", help="Grade → target map; also the nDCG gains.")]
    = "0:0,1:1.0,2:0.7",
    k: TransferK = None,
    temperature: TransferTemp = None,
    prior_weight: TransferPrior = None,
    folds: TransferFolds = 10,
    model: TransferModel = None,
    run_id: TransferRunId = "engine-transfer",
    report: TransferReport = None,
    quiet: Quiet = False,
) -> None:
    """TREC 2025 Million LLMs: rank every LLM for a question from the judged dev questions nearest to it."""
    set_quiet(quiet)
    from engine.tasks.model_ranking import mllm
    if cv:
        result = mllm.cross_validate_dev(dev_queries, qrels, llm_ids, targets, folds, model, k, temperature,
                                         prior_weight)
        typer.echo(mllm.format_cv(result))
        if report:
            from engine.io.atomic import write_json
            write_json(report, result)
        return
    if queries is None or out is None:
        raise EngineError("give --queries TSV and --out RUN to rank LLMs, or --cv to cross-validate")
    from engine.progress import info
    info(mllm.rank_questions(dev_queries, qrels, queries, out, llm_ids, targets, model, k, temperature, prior_weight,
                             run_id))



def convert_ntcir_a_qrels_cmd(ground_truth: Annotated[Path, typer.Argument(help="ground-truth.csv")],
                              out: Annotated[Path, typer.Argument(help="TREC qrels to write.")]) -> None:
    """NTCIR-19 ModelRetrieval A ground truth → TREC qrels (relevance_score grade)."""
    from engine.tasks.model_ranking.data import ntcir_a_qrels
    from engine.progress import info
    info(f"wrote {ntcir_a_qrels(ground_truth, out)} qrels lines to {out}")


def convert_ntcir_a_groups_cmd(tasks: Annotated[Path, typer.Argument(help="tasks.csv")],
                               out: Annotated[Path, typer.Argument(help="`qid<TAB>group` file to write.")]) -> None:
    """NTCIR-19 ModelRetrieval A task criticality → groups for `engine eval --groups`."""
    from engine.tasks.model_ranking.data import ntcir_a_groups
    from engine.progress import info
    info(f"wrote {ntcir_a_groups(tasks, out)} task groups to {out}")



def register(app: typer.Typer, validate: typer.Typer, convert: typer.Typer) -> None:
    app.command("modelret-a")(modelret_a_cmd)
    app.command("mllm")(mllm_cmd)
    convert.command("ntcir-a-qrels")(convert_ntcir_a_qrels_cmd)
    convert.command("ntcir-a-groups")(convert_ntcir_a_groups_cmd)
