"""`engine modelret-a`, `engine mllm`, `engine convert ntcir-a-qrels|ntcir-a-groups`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.commands.collection import Device, Quiet, Root
from engine.errors import EngineError, opt
from engine.io.atomic import write_json
from engine.io.options import Int, Range, cli, options_command, taken
from engine.progress import info, set_quiet
from engine.tasks.model_ranking import data, mllm, modelret_a
from engine.tasks.model_ranking.candidate_features import LENGTH, MAX_LENGTH, MAX_TEXTS, TEXTS, FeatureOptions
from engine.tasks.model_ranking.mllm import MllmOptions
from engine.tasks.model_ranking.modelret_a import ModelretAOptions
from engine.tasks.model_ranking.study import Study
from engine.tasks.model_ranking.transfer import RANGES as TRANSFER_RANGES, TransferOptions

MODELRET_A = ModelretAOptions()
MLLM = MllmOptions()
TRANSFER = TransferOptions()
FEATURES = FeatureOptions()


def _values(values: tuple) -> str:
    return ",".join(f"{v:g}" for v in values)


LEAVE_ONE_OUT = Range(2, 1_000, integer=True, zero=True)
"""--folds where 0 means leave-one-out (the help says so)."""
TransferK = Annotated[Optional[int], typer.Option("--k", help="Nearest training queries to average (default: the "
                      f"method's fixed value, see --method; tuned by leave-one-out over {_values(TRANSFER.ks)} with the "
                      "tuning methods).", show_default=False)]
TransferTemp = Annotated[Optional[float], typer.Option("--temperature", help="Softmax temperature over the "
                         "neighbours' cosines; small = nearest dominates (default: the method's fixed value; tuned "
                         f"over {_values(TRANSFER.temperatures)} with the tuning methods).", show_default=False)]
TransferPrior = Annotated[Optional[float], typer.Option("--prior-weight", help="Weight 0..1 of the candidates' "
                          "global mean score blended in (default: the method's fixed value; tuned over "
                          f"{_values(TRANSFER.prior_weights)} with the tuning methods).", show_default=False)]
TransferFolds = Annotated[int, typer.Option("--folds", help="With --cv: folds per repeat (0 = leave-one-out); a "
                                            "variant that tunes does it by leave-one-out inside each training fold.")]
TransferRepeats = Annotated[int, typer.Option("--repeats", help="With --cv: repeats of the k-fold split (seeds "
                                              "0..R-1); the table shows mean ± std over them.")]
TransferModel = Annotated[str, typer.Option("--model", help="Sentence model spec (offline).")]
TransferRunId = Annotated[str, typer.Option("--run-id", help="Run tag written in the last column (default: "
                                                       "engine-<method>).")]
TransferReport = Annotated[Optional[Path], typer.Option("--report", help="With --cv: also write the results as JSON.")]
TransferName = Annotated[str, typer.Option("--name", help="Collection (a folder under --root) that stores the "
                                           "embedded training set; reused while its inputs are unchanged.")]


def _transfer(k: Optional[int], temperature: Optional[float], prior_weight: Optional[float], folds: int
              ) -> TransferOptions:
    return TransferOptions(k=k, temperature=temperature, prior_weight=prior_weight, folds=folds)


def _print_cv(study: Study, labels: dict[str, str], report: Optional[Path]) -> None:
    typer.echo(study.table(labels))
    if report:
        write_json(report, study.to_json())


@dataclass(frozen=True)
class ModelretACommandOptions:
    """What `engine modelret-a` is told, each option declared once (engine.io.options.options_command)."""
    train: Annotated[Path, cli(typer.Option("--train", help="Folder laid out like ntcir19-modelretrieval-a: tasks.csv, "
                                        "models.csv, ground-truth.csv, task-data/train-tasks/<id>/{train,val}.jsonl."))]
    queries: Annotated[Optional[Path], cli(typer.Option("--queries", help="Folder of <task_id>/{train,val}.jsonl to "
                                                    "rank "
                                                    "models for."))] = None
    tasks_csv: Annotated[Optional[Path], cli(typer.Option("--tasks-csv", help="Task table with task_instruction, "
                         "task_criticalness, text_col, label_col (default: TRAIN/tasks.csv).", show_default=False))] \
        = None
    out: Annotated[Optional[Path], cli(typer.Option("--out", help="TREC run to write (task_id Q0 model_id …)."))] \
        = None
    cv: Annotated[bool, cli(typer.Option("--cv", help="Cross-validate on the training tasks: nDCG@1/3/5 "
                                     "(gain 2^rel−1), "
                                     "overall and per criticality, for the average-rank baseline, the prior, each "
                                     "view's transfer, the view ensemble and LTR, mean ± std over --repeats, "
                                     "paired p against the baseline."))] = False
    method: Annotated[str, cli(typer.Option("--method", help="guarded: the view ensemble (with --candidates: LTR over "
                      "the candidate features) blended with the average rank per rank position (position 1 by a weight "
                      "that must raise nDCG@1, 2–3 nDCG@3, the rest nDCG@5; each by CV inside the training tasks, 0 "
                      "unless its gain is significant); guarded-ranking: one weight, 0 unless every nDCG gains "
                      "significantly; ensemble: mean of the views' transferred predictions at "
                      f"fixed k={modelret_a.FIXED.k} T={modelret_a.FIXED.temperature:g} prior weight "
                      f"{modelret_a.FIXED.prior_weight:g}; ltr: LightGBM LambdaRank over transfer features (and "
                      "candidate features); blend: the view blend and params with the best leave-one-out score (the "
                      "first version's default; it over-fits 79 tasks); logme, hscore, knn, linear: the candidates' "
                      "transferability scores on the task's labelled texts (needs --candidates)."))] = MODELRET_A.method
    candidates: Annotated[Optional[Path], cli(typer.Option("--candidates", help="models.csv (model_id, model_name) "
                          "of the "
                          "candidates to load and embed each task's labelled training texts with (cached per task "
                          "and model under ROOT/NAME-features).", show_default=False))] = None
    checkpoints: Annotated[Optional[Path], cli(typer.Option("--checkpoints", help="Folder holding each candidate as "
                           "DIR/<model_name> (offline; default: load by Hugging Face name).", show_default=False))] \
        = None
    device: Annotated[str, cli(Device)] = FEATURES.device
    max_texts: Annotated[int, cli(typer.Option("--max-texts", help="Labelled training texts per task the candidates "
                         f"embed ({MAX_TEXTS[0]}..{MAX_TEXTS[1]}; a fixed sample).")), TEXTS] = FEATURES.max_texts
    max_length: Annotated[int, cli(typer.Option("--max-length", help="Tokens per text for the candidates "
                          f"({MAX_LENGTH[0]}..{MAX_LENGTH[1]}).")), LENGTH] = FEATURES.max_length
    views: Annotated[Optional[str], cli(typer.Option("--views", help="Views to use (comma-separated: text, "
                     "instruction, "
                     "labels, stats) (default: all four); with --method blend, exactly this blend.",
                     show_default=False))] = MODELRET_A.views
    sample: Annotated[int, cli(typer.Option("--sample", help="Train/val texts embedded per task (mean = "
                      "text view).")), Int(1, 1_000_000)] \
        = MODELRET_A.sample
    k: Annotated[Optional[int], cli(TransferK), TRANSFER_RANGES["k"]] = TRANSFER.k
    temperature: Annotated[Optional[float], cli(TransferTemp), TRANSFER_RANGES["temperature"]] = TRANSFER.temperature
    prior_weight: Annotated[Optional[float], cli(TransferPrior),
                            TRANSFER_RANGES["prior_weight"]] = TRANSFER.prior_weight
    folds: Annotated[int, cli(TransferFolds), LEAVE_ONE_OUT] = TRANSFER.folds
    repeats: Annotated[int, cli(TransferRepeats), Int(1, 1_000)] = modelret_a.REPEATS
    full: Annotated[bool, cli(typer.Option("--full", help="With --cv: also the nested variants that tune per fold (the "
                                       "view ensemble with tuned params, the first version's blend choice; "
                                       "minutes)."))] \
        = MODELRET_A.full_cv
    model: Annotated[str, cli(TransferModel)] = MODELRET_A.model
    run_id: Annotated[str, cli(TransferRunId)] = MODELRET_A.run_id
    report: Annotated[Optional[Path], cli(TransferReport)] = None
    name: Annotated[str, cli(TransferName)] = MODELRET_A.name
    root: Annotated[Path, cli(Root)] = MODELRET_A.root
    quiet: Annotated[bool, cli(Quiet)] = False


def _modelret_a(o: ModelretACommandOptions) -> None:
    """NTCIR-19 ModelRetrieval A: rank candidate models for a task by the normalized F1 they reached on similar
    training tasks."""
    set_quiet(o.quiet)
    options = taken(ModelretAOptions, o, full_cv=o.full, features=taken(FeatureOptions, o),
                    transfer=_transfer(o.k, o.temperature, o.prior_weight, o.folds))
    if o.cv:
        _print_cv(modelret_a.cross_validate_tasks(o.train, o.tasks_csv, options, o.repeats), modelret_a.labels(),
                  o.report)
        return
    if o.queries is None or o.out is None:
        raise EngineError(f"give {opt('queries')} DIR and {opt('out')} RUN to rank models, or {opt('cv')} to "
                          "cross-validate")
    info(modelret_a.rank_tasks(o.train, o.queries, o.out, o.tasks_csv, options))


modelret_a_cmd = options_command(ModelretACommandOptions, _modelret_a)


@dataclass(frozen=True)
class MllmCommandOptions:
    """What `engine mllm` is told, each option declared once (engine.io.options.options_command)."""
    dev_queries: Annotated[Path, cli(typer.Option("--dev-queries", help="Judged questions: TSV `qid<TAB>text` "
                                                  "(llm_dev_data.tsv), CSV or JSONL."))]
    qrels: Annotated[Path, cli(typer.Option("--qrels", help="Dev qrels `qid 0 llm_id grade` (0 not, 1 most, 2 "
                                            "second-most relevant)."))]
    queries: Annotated[Optional[Path], cli(typer.Option("--queries", help="Questions to rank LLMs for (TSV "
                                                        "`qid<TAB>text`)."))] = None
    out: Annotated[Optional[Path], cli(typer.Option("--out", help="TREC run to write (every LLM for every "
                                                    "question)."))] = None
    cv: Annotated[bool, cli(typer.Option("--cv", help="Cross-validate on the dev questions: nDCG@10 and MRR of the "
                                         "prior, transfer (fixed and tuned per fold), LTR, the ensemble and the "
                                         "guarded blends, mean ± std over --repeats, paired p against the "
                                         "prior."))] = False
    method: Annotated[str, cli(typer.Option("--method", help="guarded: the ensemble, LambdaRank alone or the topic "
                      "mixture alone blended with the popularity prior per rank position, the first place by the method and weight that must "
                      "raise MRR, the rest by those that must raise nDCG@10 (each by CV inside the dev questions, the "
                      "prior unless a gain is significant); "
                      "guarded-ranking: one weight for the whole ranking, 0 unless nDCG@10 and MRR both gain "
                      "significantly; ensemble: the mean rank position of LambdaRank, of transfer at the fixed "
                      f"params and at k={mllm.BROAD.k} T={mllm.BROAD.temperature:g} and of the topic mixture (latent "
                      "topics of the dev questions by EM over their embeddings and relevance) (with --discovery also of the "
                      "discovery confidences at that scale); ltr: LightGBM LambdaRank "
                      "over transfer features; transfer: "
                      f"fixed k={mllm.FIXED.k} T={mllm.FIXED.temperature:g} prior weight "
                      f"{mllm.FIXED.prior_weight:g}; tuned: params by leave-one-out nDCG@10 on the dev questions (the "
                      "first version's default)."))] = MLLM.method
    llm_ids: Annotated[Optional[Path], cli(typer.Option("--llm-ids", help="All candidate LLM ids, one per line "
                       "(llm_ids.txt) (default: the LLMs in the qrels).", show_default=False))] = None
    discovery: Annotated[Optional[Path], cli(typer.Option("--discovery", help="The discovery set (JSONL, TSV or "
                         "parquet; one row per question and LLM answer: query_id, query_text, llm_id, answer, "
                         "logprobs): per-LLM statistics and the answers' confidences near each question become "
                         "LambdaRank features and its questions further LambdaRank training queries (labelled by the "
                         "answers' confidence), and the confidences of its 30 nearest questions one more ranking of the "
                         "ensemble; stored with the dev side, so a rerun reads it no more.",
                         show_default=False))] = None
    discovery_columns: Annotated[Optional[str], cli(typer.Option("--discovery-columns", help="Map the discovery "
                                 "file's column names: field=column pairs, e.g. "
                                 "query_id=qid,logprobs=token_logprobs.", show_default=False))] = None
    targets: Annotated[str, cli(typer.Option("--targets", help="Grade → target map; also the nDCG gains."))] \
        = MLLM.targets
    k: Annotated[Optional[int], cli(TransferK), TRANSFER_RANGES["k"]] = TRANSFER.k
    temperature: Annotated[Optional[float], cli(TransferTemp), TRANSFER_RANGES["temperature"]] = TRANSFER.temperature
    prior_weight: Annotated[Optional[float], cli(TransferPrior),
                            TRANSFER_RANGES["prior_weight"]] = TRANSFER.prior_weight
    folds: Annotated[int, cli(TransferFolds), LEAVE_ONE_OUT] = TRANSFER.folds
    repeats: Annotated[int, cli(TransferRepeats), Int(1, 1_000)] = mllm.REPEATS
    full: Annotated[bool, cli(typer.Option("--full", help="With --cv: also transfer with params tuned per fold "
                                           "(nested; minutes at the real size)."))] = MLLM.full_cv
    model: Annotated[str, cli(TransferModel)] = MLLM.model
    run_id: Annotated[str, cli(TransferRunId)] = MLLM.run_id
    report: Annotated[Optional[Path], cli(TransferReport)] = None
    name: Annotated[str, cli(TransferName)] = MLLM.name
    root: Annotated[Path, cli(Root)] = MLLM.root
    quiet: Annotated[bool, cli(Quiet)] = False


def _mllm(o: MllmCommandOptions) -> None:
    """TREC 2025 Million LLMs: rank every LLM for a question from the judged dev questions nearest to it."""
    set_quiet(o.quiet)
    options = taken(MllmOptions, o, full_cv=o.full, transfer=_transfer(o.k, o.temperature, o.prior_weight, o.folds))
    if o.cv:
        _print_cv(mllm.cross_validate_dev(o.dev_queries, o.qrels, o.llm_ids, options, repeats=o.repeats),
                  mllm.labels(), o.report)
        return
    if o.queries is None or o.out is None:
        raise EngineError(f"give {opt('queries')} TSV and {opt('out')} RUN to rank LLMs, or {opt('cv')} to "
                          "cross-validate")
    info(mllm.rank_questions(o.dev_queries, o.qrels, o.queries, o.out, o.llm_ids, options))


mllm_cmd = options_command(MllmCommandOptions, _mllm)


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
