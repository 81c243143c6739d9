"""`engine modelret-a`, `engine mllm`, `engine convert ntcir-a-qrels|ntcir-a-groups`."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.core.cli import Quiet, Root
from engine.errors import EngineError, opt
from engine.io.atomic import write_json
from engine.progress import info, set_quiet
from engine.tasks.model_ranking import data, mllm, modelret_a
from engine.tasks.model_ranking.mllm import MllmOptions
from engine.tasks.model_ranking.modelret_a import ModelretAOptions
from engine.tasks.model_ranking.transfer import TransferOptions

MODELRET_A = ModelretAOptions()
MLLM = MllmOptions()
TRANSFER = TransferOptions()


def _values(values: tuple) -> str:
    return ",".join(f"{v:g}" for v in values)


TransferK = Annotated[Optional[int], typer.Option("--k", help="Nearest training queries to average (default: tuned "
                      f"by leave-one-out over {_values(TRANSFER.ks)}).", show_default=False)]
TransferTemp = Annotated[Optional[float], typer.Option("--temperature", help="Softmax temperature over the "
                         "neighbours' cosines; small = nearest dominates (default: tuned over "
                         f"{_values(TRANSFER.temperatures)}).", show_default=False)]
TransferPrior = Annotated[Optional[float], typer.Option("--prior-weight", help="Weight 0..1 of the candidates' "
                          f"global mean score blended in (default: tuned over {_values(TRANSFER.prior_weights)}).",
                          show_default=False)]
TransferFolds = Annotated[int, typer.Option("--folds", help="With --cv: outer folds (0 = leave-one-out); params are "
                                            "tuned by leave-one-out inside each training fold.")]
TransferModel = Annotated[str, typer.Option("--model", help="Sentence model spec (offline).")]
TransferRunId = Annotated[str, typer.Option("--run-id", help="Run tag written in the last column.")]
TransferReport = Annotated[Optional[Path], typer.Option("--report", help="With --cv: also write the results as JSON.")]
TransferName = Annotated[str, typer.Option("--name", help="Collection (a folder under --root) that stores the "
                                           "embedded training set; reused while its inputs are unchanged.")]


def _transfer(k: Optional[int], temperature: Optional[float], prior_weight: Optional[float], folds: int
              ) -> TransferOptions:
    return TransferOptions(k=k, temperature=temperature, prior_weight=prior_weight, folds=folds)


def _print_cv(table: str, results: dict, report: Optional[Path]) -> None:
    typer.echo(table)
    if report:
        write_json(report, results)


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
    = MODELRET_A.views,
    sample: Annotated[int, typer.Option("--sample", help="Train/val texts embedded per task (mean = text view).")]
    = MODELRET_A.sample,
    k: TransferK = TRANSFER.k,
    temperature: TransferTemp = TRANSFER.temperature,
    prior_weight: TransferPrior = TRANSFER.prior_weight,
    folds: TransferFolds = TRANSFER.folds,
    model: TransferModel = MODELRET_A.model,
    run_id: TransferRunId = MODELRET_A.run_id,
    report: TransferReport = None,
    name: TransferName = MODELRET_A.name,
    root: Root = MODELRET_A.root,
    quiet: Quiet = False,
) -> None:
    """NTCIR-19 ModelRetrieval A: rank candidate models for a task by the normalized F1 they reached on similar
    training tasks."""
    set_quiet(quiet)
    options = ModelretAOptions(model=model, sample=sample, views=views, run_id=run_id, name=name, root=root,
                               transfer=_transfer(k, temperature, prior_weight, folds))
    if cv:
        result = modelret_a.cross_validate_tasks(train, tasks_csv, options)
        _print_cv(result.table(), result.to_json(), report)
        return
    if queries is None or out is None:
        raise EngineError(f"give {opt('queries')} DIR and {opt('out')} RUN to rank models, or {opt('cv')} to "
                          "cross-validate")
    info(modelret_a.rank_tasks(train, queries, out, tasks_csv, options))


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
    = MLLM.targets,
    k: TransferK = TRANSFER.k,
    temperature: TransferTemp = TRANSFER.temperature,
    prior_weight: TransferPrior = TRANSFER.prior_weight,
    folds: TransferFolds = TRANSFER.folds,
    model: TransferModel = MLLM.model,
    run_id: TransferRunId = MLLM.run_id,
    report: TransferReport = None,
    name: TransferName = MLLM.name,
    root: Root = MLLM.root,
    quiet: Quiet = False,
) -> None:
    """TREC 2025 Million LLMs: rank every LLM for a question from the judged dev questions nearest to it."""
    set_quiet(quiet)
    options = MllmOptions(targets=targets, model=model, run_id=run_id, name=name, root=root,
                          transfer=_transfer(k, temperature, prior_weight, folds))
    if cv:
        result = mllm.cross_validate_dev(dev_queries, qrels, llm_ids, options)
        _print_cv(mllm.format_cv(result), result, report)
        return
    if queries is None or out is None:
        raise EngineError(f"give {opt('queries')} TSV and {opt('out')} RUN to rank LLMs, or {opt('cv')} to "
                          "cross-validate")
    info(mllm.rank_questions(dev_queries, qrels, queries, out, llm_ids, options))


def convert_ntcir_a_qrels_cmd(ground_truth: Annotated[Path, typer.Argument(help="ground-truth.csv")],
                              out: Annotated[Path, typer.Argument(help="TREC qrels to write.")]) -> None:
    """NTCIR-19 ModelRetrieval A ground truth → TREC qrels (relevance_score grade)."""
    info(f"wrote {data.ntcir_a_qrels(ground_truth, out)} qrels lines to {out}")


def convert_ntcir_a_groups_cmd(tasks: Annotated[Path, typer.Argument(help="tasks.csv")],
                               out: Annotated[Path, typer.Argument(help="`qid<TAB>group` file to write.")]) -> None:
    """NTCIR-19 ModelRetrieval A task criticality → groups for `engine eval --groups`."""
    info(f"wrote {data.ntcir_a_groups(tasks, out)} task groups to {out}")


def register(app: typer.Typer, validate: typer.Typer, convert: typer.Typer) -> None:
    app.command("modelret-a")(modelret_a_cmd)
    app.command("mllm")(mllm_cmd)
    convert.command("ntcir-a-qrels")(convert_ntcir_a_qrels_cmd)
    convert.command("ntcir-a-groups")(convert_ntcir_a_groups_cmd)
