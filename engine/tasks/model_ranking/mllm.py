"""TREC 2025 Million LLMs: rank every LLM for a user question from the judged dev questions nearest to it.

Dev questions are embedded with a sentence model; their qrels grades (0 not relevant, 1 most relevant,
2 second-most relevant) become per-LLM targets through a grade → target map (`data.read_dev`), which also
gives the nDCG gains; `transfer` does the rest. The dev side (embeddings, targets, grades, LLM ids) is stored
as a collection (`training_store`) and reused while the dev files, the model and the grade map are unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from engine.core.collection import DEFAULT_ROOT
from engine.core.encoders import DEFAULT_TEXT_SPEC
from engine.core.ranking import top_k_rows
from engine.display import format_table
from engine.errors import EngineError
from engine.eval.metrics import Metric, ndcg, parse_metrics, reciprocal_rank
from engine.eval.profiles import PROFILES
from engine.eval.runs import write_run
from engine.eval.validate import check_written
from engine.io.tables import read_queries
from engine.progress import info
from engine.tasks.model_ranking import training_store
from engine.tasks.model_ranking.data import DEFAULT_TARGETS, DevSet, grade_gains, parse_targets, read_dev
from engine.tasks.model_ranking.training_store import TrainingSide
from engine.tasks.model_ranking.transfer import (DEFAULT_RUN_ID, QueryCollection, TransferOptions, TransferParams,
                                                 cross_validate, rankings)

TASK = "mllm"
METRICS = parse_metrics(PROFILES["mllm"].metrics)
"""nDCG@10 (with the grade map's gains) and MRR (first LLM with grade >= 1)."""
TUNED = next(m for m in METRICS if m.family == "ndcg")
"""What tuning maximizes: nDCG@10."""
LABELS = {"ndcg": "nDCG", "mrr": "MRR"}
EMBEDDING = "question"


@dataclass(frozen=True)
class MllmOptions:
    """`engine mllm`'s settings (the command reads its defaults here)."""
    targets: str = DEFAULT_TARGETS
    """grade → target map; also the nDCG gains."""
    model: str = DEFAULT_TEXT_SPEC
    run_id: str = DEFAULT_RUN_ID
    name: str = TASK
    root: Path = DEFAULT_ROOT
    transfer: TransferOptions = field(default_factory=TransferOptions)


# ---------------------------------------------------------------- metric


def _gain_of(gain: Mapping[int, float]) -> Callable[[int], float]:
    return lambda g: gain.get(g, 0.0)


def metric_value(metric: Metric, rels: Sequence[int], judged: Sequence[int], gain: Mapping[int, float]) -> float:
    """One of the profile's metrics for one ranked question, nDCG with the grade map's gains."""
    if metric.family == "ndcg":
        return ndcg(rels, judged, metric.k, _gain_of(gain))
    if metric.family == "mrr":
        return reciprocal_rank(rels, metric.k)
    raise EngineError(f"metric {metric.name} is not one Million LLMs reports")


def objective_for(grades: np.ndarray, gain: Mapping[int, float]):
    """nDCG@10 over the given rows, with the grade map's targets as gains: what tuning maximizes."""
    judged = [[int(g) for g in row if g > 0] for row in grades]

    def objective(predictions: np.ndarray, rows: np.ndarray) -> float:
        depth = min(TUNED.k, predictions.shape[1])
        # the top as a set, then ordered (not `top_k`, which keeps the first by position of the LLMs tied at
        # the cut: a different choice changes the objective, and so which params are chosen)
        tops = np.argpartition(-predictions, depth - 1, axis=1)[:, :depth]
        total = 0.0
        for pred, top, r in zip(predictions, tops, rows):
            top = top[np.argsort(-pred[top], kind="stable")]
            total += ndcg([int(grades[r, j]) for j in top], judged[r], TUNED.k, _gain_of(gain))
        return total / max(len(rows), 1)

    return objective


def scores_of(grades: np.ndarray, gain: Mapping[int, float], predictions: np.ndarray) -> dict[str, float]:
    """The profile's metrics (nDCG@10 with grade-map gains, MRR), averaged over the dev questions."""
    totals = dict.fromkeys((m.name for m in METRICS), 0.0)
    for order, g in zip(top_k_rows(predictions, predictions.shape[1]), grades):
        rels = [int(x) for x in g[order]]
        judged = [int(x) for x in g if x > 0]
        for m in METRICS:
            totals[m.name] += metric_value(m, rels, judged, gain)
    return {name: total / len(grades) for name, total in totals.items()}


def format_cv(result: Mapping) -> str:
    """The CV result as a small markdown table."""
    heads = ["variant"] + [LABELS[m.family] + (f"@{m.k}" if m.k else "") for m in METRICS]
    rows = [[name] + [f"{result[name][m.name]:.4f}" for m in METRICS] for name in ("prior", "transfer")]
    return format_table(heads, rows, markdown=True) + (
        f"\n\ntransfer chose {result['chosen']}" if result.get("chosen") else "")


# ---------------------------------------------------------------- the stored dev side


def embed(texts: Sequence[str], model: str) -> np.ndarray:
    from engine.core.encoders import load_encoder
    encoder = load_encoder(model)
    info(f"embedding {len(texts)} questions with {encoder.spec}")
    return encoder.encode_texts(list(texts))


def _dev_key(dev_queries: str | Path, qrels: str | Path, llm_ids: str | Path | None, options: MllmOptions,
             given: np.ndarray | None) -> tuple[str, dict]:
    """The signature of the dev side (files, model or given embeddings, grade map) and its settings."""
    settings = {"model": options.model if given is None else training_store.array_digest(given),
                "targets": sorted(parse_targets(options.targets).items())}
    inputs = {"dev_queries": dev_queries, "qrels": qrels, "llm_ids": llm_ids}
    return training_store.signature(inputs, settings), settings


def store_dev(dev: DevSet, options: MllmOptions, key: str, settings: dict, given: np.ndarray | None
              ) -> TrainingSide:
    """Embed the dev questions (unless `given`) and store them with their targets and grades."""
    emb = given if given is not None else embed(dev.texts, options.model)
    side = TrainingSide(dev.query_ids, dev.llm_ids, {EMBEDDING: emb}, dev.targets, dev.grades,
                        meta=[{"text": t} for t in dev.texts])
    training_store.save(side, TASK, options.name, options.root, key, options.model if given is None else None,
                        settings)
    return side


# ---------------------------------------------------------------- commands


def cross_validate_dev(dev_queries: str | Path, qrels: str | Path, llm_ids: str | Path | None = None,
                       options: MllmOptions = MllmOptions(), embeddings: np.ndarray | None = None
                       ) -> dict[str, dict[str, float] | str]:
    """`engine mllm --cv`: nDCG@10 and MRR out of fold for the prior alone and for transfer
    (params tuned inside each training fold). `embeddings` (one row per judged dev question) replace the
    sentence model, e.g. in tests."""
    key, settings = _dev_key(dev_queries, qrels, llm_ids, options, embeddings)
    side = training_store.load(TASK, options.name, options.root, key)
    if side is None:
        side = store_dev(read_dev(dev_queries, qrels, llm_ids, options.targets), options, key, settings, embeddings)
    gain = grade_gains(options.targets)
    objective = objective_for(side.grades, gain)
    n, folds, seed = len(side.query_ids), options.transfer.folds, options.transfer.seed
    prior = cross_validate(np.ones((n, 1), np.float32), side.scores, objective, [TransferParams(1, 1.0, 1.0)],
                           folds, seed, description="prior")
    res = cross_validate(side.embeddings[EMBEDDING], side.scores, objective, options.transfer.grid(n), folds, seed,
                         description="transfer")
    return {"prior": scores_of(side.grades, gain, prior.predictions),
            "transfer": scores_of(side.grades, gain, res.predictions),
            "chosen": res.summary(), "queries": {"n": n}, "llms": {"n": len(side.candidate_ids)}}


def rank_questions(dev_queries: str | Path, qrels: str | Path, queries: str | Path, out: str | Path,
                   llm_ids: str | Path | None = None, options: MllmOptions = MllmOptions(),
                   embeddings: Mapping[str, np.ndarray] | None = None) -> str:
    """`engine mllm --queries`: rank every LLM for every question and write a TREC run.

    Params the user did not fix are chosen by leave-one-out nDCG@10 over the dev questions. `embeddings`
    ({"dev": ..., "queries": ...}) replace the sentence model, e.g. in tests.
    """
    given = embeddings["dev"] if embeddings is not None else None
    key, settings = _dev_key(dev_queries, qrels, llm_ids, options, given)
    side = training_store.load(TASK, options.name, options.root, key)
    dev = read_dev(dev_queries, qrels, llm_ids, options.targets) if side is None else None
    new = read_queries(queries)  # before embedding: a bad question file fails fast
    if side is None:
        side = store_dev(dev, options, key, settings, given)
    new_emb = embeddings["queries"] if embeddings is not None else embed([t for _, t in new], options.model)
    collection = QueryCollection(side.query_ids, side.candidate_ids, side.embeddings[EMBEDDING], side.scores)
    params, value = collection.tune(objective_for(side.grades, grade_gains(options.targets)),
                                    options.transfer.grid(len(side.query_ids)))
    ranked = rankings([q for q, _ in new], side.candidate_ids, collection.predict(new_emb, params))
    lines = write_run(out, ranked, options.run_id)
    check_written(out, "mllm", [q for q, _ in new], side.candidate_ids)
    return (f"{len(new)} questions × {len(side.candidate_ids)} LLMs → {out} ({lines} lines; {params}; "
            f"leave-one-out nDCG@10 on dev {value:.4f})")
