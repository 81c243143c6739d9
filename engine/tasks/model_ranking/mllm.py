"""TREC 2025 Million LLMs: rank every LLM for a user question from the judged dev questions nearest to it.

Dev questions are embedded with a sentence model; their qrels grades (0 not relevant, 1 most relevant,
2 second-most relevant) become per-LLM targets through a grade → target map (the public baseline's
0 → 0, 1 → 1.0, 2 → 0.7); `engine.tasks.model_ranking.transfer` does the rest. Unjudged LLMs count as grade 0, as in TREC.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from engine.errors import EngineError, where
from engine.io.tables import read_queries
from engine.eval.metrics import ndcg, reciprocal_rank
from engine.io.tables import read_text_lines
from engine.progress import info, warn
from engine.eval.runs import read_qrels, write_run
from engine.tasks.model_ranking.transfer import (DEFAULT_KS, DEFAULT_PRIOR_WEIGHTS, DEFAULT_TEMPERATURES, QueryCollection,
                             TransferParams, cross_validate, param_grid, rankings)

DEFAULT_TARGETS = "0:0,1:1.0,2:0.7"
NDCG_DEPTH = 10


def parse_targets(spec: str) -> dict[int, float]:
    """`0:0,1:1.0,2:0.7` → {grade: target}; grades the map leaves out are an error when met."""
    out: dict[int, float] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        grade, sep, value = part.partition(":")
        try:
            g, v = int(grade.strip()), float(value.strip())
        except ValueError:
            raise EngineError(f"grade map {spec!r}: {part.strip()!r} is not `grade:target` "
                              "(e.g. 0:0,1:1.0,2:0.7)") from None
        if not sep or not np.isfinite(v):
            raise EngineError(f"grade map {spec!r}: {part.strip()!r} is not `grade:target`")
        out[g] = v
    if not out:
        raise EngineError(f"grade map {spec!r} is empty; e.g. {DEFAULT_TARGETS}")
    return out


def read_llm_ids(path: str | Path) -> list[str]:
    """One LLM id per line; duplicates are an error naming the line."""
    ids: list[str] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(read_text_lines(path), 1):
        llm = line.strip()
        if not llm:
            continue
        if llm in seen:
            raise EngineError(f"{where(path, n)}: LLM id {llm!r} listed twice (first on line {seen[llm]})")
        seen[llm] = n
        ids.append(llm)
    if not ids:
        raise EngineError(f"{path}: no LLM ids")
    return ids


@dataclass
class DevSet:
    """Judged dev questions: ids, texts, LLM ids, target matrix and the grades behind it."""
    query_ids: list[str]
    texts: list[str]
    llm_ids: list[str]
    targets: np.ndarray
    grades: np.ndarray
    gain: dict[int, float]


def read_dev(dev_queries: str | Path, qrels: str | Path, llm_ids: str | Path | None = None,
             targets: str = DEFAULT_TARGETS) -> DevSet:
    """Dev questions that have judgments; the candidates are `llm_ids` (file) or every LLM in the qrels."""
    gain = parse_targets(targets)
    questions = dict(read_queries(dev_queries))
    judged = read_qrels(qrels)
    candidates = read_llm_ids(llm_ids) if llm_ids else sorted({d for docs in judged.values() for d in docs})
    col = {c: j for j, c in enumerate(candidates)}
    unknown_q = [q for q in judged if q not in questions]
    if unknown_q:
        warn(f"{len(unknown_q)} qrels quer{'y is' if len(unknown_q) == 1 else 'ies are'} not in {dev_queries} "
             f"and skipped: {', '.join(unknown_q[:5])}")
    qids = [q for q in questions if q in judged]
    if len(qids) < 2:
        raise EngineError(f"{qrels}: only {len(qids)} of the questions in {dev_queries} are judged; "
                          "transfer needs at least 2 (do the query ids match?)")
    unjudged = len(questions) - len(qids)
    if unjudged:
        warn(f"{unjudged} dev question(s) have no judgments and are not used")
    grades = np.zeros((len(qids), len(candidates)), dtype=int)
    for i, q in enumerate(qids):
        for doc, g in judged[q].items():
            if doc not in col:
                raise EngineError(f"{qrels}: query {q} judges LLM {doc!r}, which is not in {llm_ids}; "
                                  "fix the id or the LLM list")
            if g not in gain:
                raise EngineError(f"{qrels}: query {q}, LLM {doc}: grade {g} has no target in the grade map "
                                  f"{targets!r}; add it, e.g. --targets {targets},{g}:0")
            grades[i, col[doc]] = g
    if 0 not in gain:
        gain[0] = 0.0
    lookup = np.vectorize(lambda g: gain[int(g)], otypes=[float])
    return DevSet(qids, [questions[q] for q in qids], candidates, lookup(grades), grades, gain)


def objective_for(dev: DevSet):
    """nDCG@10 over the given rows, with the grade map's targets as gains: what CV tunes for."""
    judged = [[int(g) for g in row if g > 0] for row in dev.grades]
    gain = dev.gain

    def objective(predictions: np.ndarray, rows: np.ndarray) -> float:
        depth = min(NDCG_DEPTH, predictions.shape[1])
        tops = np.argpartition(-predictions, depth - 1, axis=1)[:, :depth]
        total = 0.0
        for pred, top, r in zip(predictions, tops, rows):
            top = top[np.argsort(-pred[top], kind="stable")]
            total += ndcg([int(dev.grades[r, j]) for j in top], judged[r], NDCG_DEPTH, lambda g: gain.get(g, 0.0))
        return total / max(len(rows), 1)

    return objective


def scores_of(dev: DevSet, predictions: np.ndarray) -> dict[str, float]:
    """Mean nDCG@10 (grade-map gains) and MRR (first LLM with grade >= 1) over the dev questions."""
    nd, rr = 0.0, 0.0
    for row, g in zip(predictions, dev.grades):
        order = np.argsort(-row, kind="stable")
        rels = [int(x) for x in g[order]]
        judged = [int(x) for x in g if x > 0]
        nd += ndcg(rels, judged, NDCG_DEPTH, lambda x: dev.gain.get(x, 0.0))
        rr += reciprocal_rank(rels)
    n = len(dev.grades)
    return {"ndcg@10": nd / n, "mrr": rr / n}


def grid_for(n_train: int, k: int | None, temperature: float | None, prior_weight: float | None
             ) -> list[TransferParams]:
    return param_grid([k] if k else DEFAULT_KS, [temperature] if temperature else DEFAULT_TEMPERATURES,
                      [prior_weight] if prior_weight is not None else DEFAULT_PRIOR_WEIGHTS, n_train)


def embed(texts: Sequence[str], model: str | None) -> np.ndarray:
    from engine.core.encoders import DEFAULT_TEXT_SPEC, load_encoder
    encoder = load_encoder(model or DEFAULT_TEXT_SPEC)
    info(f"embedding {len(texts)} questions with {encoder.spec}")
    return encoder.encode_texts(list(texts))


def cross_validate_dev(dev_queries: str | Path, qrels: str | Path, llm_ids: str | Path | None = None,
                       targets: str = DEFAULT_TARGETS, folds: int = 10, model: str | None = None,
                       k: int | None = None, temperature: float | None = None,
                       prior_weight: float | None = None, seed: int = 0,
                       embeddings: np.ndarray | None = None) -> dict[str, dict[str, float] | str]:
    """`engine mllm --cv`: nDCG@10 and MRR out of fold for the prior alone and for transfer
    (params tuned inside each training fold). `embeddings` skips the sentence model (tests)."""
    dev = read_dev(dev_queries, qrels, llm_ids, targets)
    emb = embeddings if embeddings is not None else embed(dev.texts, model)
    objective = objective_for(dev)
    prior = cross_validate(np.ones((len(dev.query_ids), 1), np.float32), dev.targets, objective,
                           [TransferParams(1, 1.0, 1.0)], folds, seed, description="prior")
    res = cross_validate(emb, dev.targets, objective, grid_for(len(dev.query_ids), k, temperature, prior_weight),
                         folds, seed, description="transfer")
    return {"prior": scores_of(dev, prior.predictions), "transfer": scores_of(dev, res.predictions),
            "chosen": res.summary(), "queries": {"n": len(dev.query_ids)}, "llms": {"n": len(dev.llm_ids)}}


def rank_questions(dev_queries: str | Path, qrels: str | Path, queries: str | Path, out: str | Path,
                   llm_ids: str | Path | None = None, targets: str = DEFAULT_TARGETS, model: str | None = None,
                   k: int | None = None, temperature: float | None = None, prior_weight: float | None = None,
                   run_id: str = "engine-transfer", embeddings: Mapping[str, np.ndarray] | None = None) -> str:
    """`engine mllm --queries`: rank every LLM for every question and write a TREC run.

    Params the user did not fix are chosen by leave-one-out nDCG@10 over the dev questions.
    """
    dev = read_dev(dev_queries, qrels, llm_ids, targets)
    new = read_queries(queries)
    if embeddings is not None:
        dev_emb, new_emb = embeddings["dev"], embeddings["queries"]
    else:
        both = embed(dev.texts + [t for _, t in new], model)
        dev_emb, new_emb = both[:len(dev.texts)], both[len(dev.texts):]
    collection = QueryCollection(dev.query_ids, dev.llm_ids, dev_emb, dev.targets)
    params, value = collection.tune(objective_for(dev), grid_for(len(dev.query_ids), k, temperature, prior_weight))
    ranked = rankings([q for q, _ in new], dev.llm_ids, collection.predict(new_emb, params))
    lines = write_run(out, ranked, run_id)
    return (f"{len(new)} questions × {len(dev.llm_ids)} LLMs → {out} ({lines} lines; {params}; "
            f"leave-one-out nDCG@10 on dev {value:.4f})")


def format_cv(result: Mapping) -> str:
    """The CV result as a small markdown table."""
    lines = ["| variant | nDCG@10 | MRR |", "|---|---|---|"]
    for name in ("prior", "transfer"):
        lines.append(f"| {name} | {result[name]['ndcg@10']:.4f} | {result[name]['mrr']:.4f} |")
    return "\n".join(lines) + (f"\n\ntransfer chose {result['chosen']}" if result.get("chosen") else "")
