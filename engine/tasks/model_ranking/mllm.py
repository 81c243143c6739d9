"""TREC 2025 Million LLMs: rank every LLM for a user question from the judged dev questions nearest to it.

Dev questions are embedded with a sentence model; their qrels grades (0 not relevant, 1 most relevant,
2 second-most relevant) become per-LLM targets through a grade → target map (`data.read_dev`), which also
gives the nDCG gains; `transfer` does the rest. The dev side (embeddings, targets, grades, LLM ids) is stored
as a collection (`training_store`) and reused while the dev files, the model and the grade map are unchanged.
The discovery set (`discovery.py`), when given, is stored with it and feeds LambdaRank, the ensemble and the
topic mixture's topics. The default blends an ensemble of LambdaRank, transfer at two scales and the latent-topic
mixture (`ensemble`), or LambdaRank alone, or the topic mixture alone (`topics.py`), with the popularity prior per
rank position (`guarded_positions`): which of the three, and with what weight, is decided per band inside the dev
questions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from engine.core.collection import DEFAULT_ROOT
from engine.core.encoders.base import l2_normalize
from engine.core.encoders.registry import DEFAULT_TEXT_SPEC
from engine.errors import EngineError
from engine.eval.metrics import Metric, ndcg, parse_metrics, reciprocal_rank
from engine.eval.profiles import PROFILES
from engine.io.runs import write_run
from engine.eval.validate import check_written
from engine.io.tables import read_queries
from engine.progress import info
from engine.tasks.model_ranking import baseline_blend, encoding, ltr, matrix_metrics, topics, training_store
from engine.tasks.model_ranking.data import DEFAULT_TARGETS, DevSet, grade_gains, parse_targets, read_dev
from engine.tasks.model_ranking.study import Study, memoized, run_variant
from engine.tasks.model_ranking.training_store import TrainingSide
from engine.tasks.model_ranking.transfer import (DEFAULT_RUN_ID, run_tag, QueryCollection, TransferOptions, TransferParams,
                                                 column_prior, rank_targets, rankings, transfer, tune)

TASK = "mllm"
METRICS = parse_metrics(PROFILES["mllm"].metrics)
"""nDCG@10 (with the grade map's gains) and MRR (first LLM with grade >= 1)."""
TUNED = next(m for m in METRICS if m.family == "ndcg")
"""What tuning maximizes: nDCG@10."""
LABELS = {"ndcg": "nDCG", "mrr": "MRR"}
EMBEDDING = "question"
METHODS = ("guarded", "guarded-ranking", "ensemble", "ltr", "transfer", "tuned")
FIXED = TransferParams(k=10, temperature=0.1, prior_weight=0.5)
"""Transfer's params, fixed before the repeated-CV study (docs/model-ranking.md): never re-tuned per run."""
BROAD = TransferParams(k=30, temperature=1.0, prior_weight=0.0)
"""The ensemble's second transfer scale: the 30 nearest dev questions weighed almost alike. Where a topic's
questions are many and noisy it averages the noise out; where they are few, the fixed scale keeps the nearest.
Chosen on planted sets of other seeds than the ones reported (docs/model-ranking.md)."""
REPEATS = 5
BASELINE = "prior (mean target)"


@dataclass(frozen=True)
class MllmOptions:
    """`engine mllm`'s settings (the command reads its defaults here)."""
    targets: str = DEFAULT_TARGETS
    """grade → target map; also the nDCG gains."""
    model: str = DEFAULT_TEXT_SPEC
    method: str = "guarded"
    """guarded: the ensemble (LambdaRank, transfer at two scales and the topic mixture, `ensemble`), LambdaRank
    alone or the topic mixture alone (`topics.topic_mixture`) blended with the prior per rank position: the
    first place by the (method, weight) that must raise MRR, the rest by one that must raise nDCG@10, each by CV
    inside the dev questions and the prior unless a gain is shown (`baseline_blend.guarded_positions` over the
    three methods); guarded-ranking: one weight for the whole ranking, 0 unless nDCG@10 and MRR both gain;
    ensemble: the mean rank position of LambdaRank, transfer at FIXED and at BROAD params, the topic mixture (and
    with a discovery set its confidences at BROAD, `discovery_transfer`); ltr:
    LambdaRank over transfer features; transfer: FIXED params; tuned:
    params by leave-one-out nDCG@10 (the first version's default)."""
    discovery: Path | None = None
    """The discovery set (`discovery.py`): per-LLM statistics and, per question, the confidences of the LLMs
    that answered the nearest discovery questions, as LambdaRank features; its questions as further LambdaRank
    training queries; the confidences at the broad scale as one more ranking of the ensemble; and its
    questions, labelled by their most confident LLMs, beside the dev questions in the topic mixture's fit
    (`discovery_topics`)."""
    discovery_columns: str | None = None
    """field=column pairs mapping the discovery file's column names."""
    full_cv: bool = False
    """--cv also runs transfer with params tuned per fold (nested; minutes at the real size)."""
    run_id: str = DEFAULT_RUN_ID
    name: str = TASK
    root: Path = DEFAULT_ROOT
    transfer: TransferOptions = field(default_factory=TransferOptions)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise EngineError(f"unknown method {self.method!r}; methods: {', '.join(METHODS)}")
        if self.discovery is not None:
            from engine.tasks.model_ranking.discovery import check_discovery
            check_discovery(self.discovery, self.discovery_columns)
        elif self.discovery_columns is not None:
            from engine.errors import opt
            raise EngineError(f"{opt('discovery_columns')} maps the columns of {opt('discovery')} FILE; give it too")


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
    """nDCG@10 over the given rows, with the grade map's targets as gains: what tuning maximizes. The LLMs tied
    at the cut are chosen by the "partition" rule (`matrix_metrics`): another choice changes the objective,
    and so which params are chosen."""
    return matrix_metrics.mean_objective(grades, lambda rels, judged: ndcg(rels, judged, TUNED.k, _gain_of(gain)),
                                         TUNED.k, ties="partition")


def per_query_scores(grades: np.ndarray, gain: Mapping[int, float], predictions: np.ndarray
                     ) -> dict[str, np.ndarray]:
    """The profile's metrics (nDCG@10 with grade-map gains, MRR), one value per dev question."""
    values = matrix_metrics.row_values(
        grades, {m.name: (lambda rels, judged, m=m: metric_value(m, rels, judged, gain)) for m in METRICS},
        grades.shape[1])
    return values(predictions, np.arange(len(grades)))


def scores_of(grades: np.ndarray, gain: Mapping[int, float], predictions: np.ndarray) -> dict[str, float]:
    """The profile's metrics averaged over the dev questions."""
    return {name: float(v.mean()) for name, v in per_query_scores(grades, gain, predictions).items()}


def labels() -> dict[str, str]:
    """Metric name → its column label (nDCG@10, MRR)."""
    return {m.name: LABELS[m.family] + (f"@{m.k}" if m.k else "") for m in METRICS}


# ---------------------------------------------------------------- the stored dev side


question_encoder = encoding.text_encoder
"""The encoder the questions are embedded with (`encoding.text_encoder`: the one `engine build` encodes texts
with)."""


def embed(texts: Sequence[str], model: str, encoder=None) -> np.ndarray:
    """The questions' rows, encoded by `encoder` (default: `question_encoder(model)`) as a build encodes texts."""
    return encoding.embed(texts, model, encoder if encoder is not None else question_encoder(model), "questions")


encoder_identity = encoding.encoder_identity


def embed_cached(texts: Sequence[str], model: str, folder: Path) -> np.ndarray:
    """`embed`, each distinct text once, remembered under `folder` by the encoder's identity (`encoder_identity`)
    and the texts' content: the discovery set's ~15,000 questions are embedded once, not again when the dev
    files, the grade map or the answers change."""
    import hashlib
    import json

    from engine.io.atomic import write_npy

    unique = list(dict.fromkeys(texts))
    encoder = question_encoder(model)
    key = hashlib.sha256(json.dumps([encoder_identity(encoder, model), unique], ensure_ascii=False,
                                    default=str).encode()).hexdigest()
    path = folder / f"{key}.npy"
    emb = None
    if path.is_file():
        try:
            emb = np.load(path)
        except (OSError, ValueError):
            emb = None
        if emb is not None and emb.shape[0] != len(unique):
            emb = None
        if emb is not None:
            info(f"reusing the embeddings of {len(unique)} questions in {path}")
    if emb is None:
        emb = np.asarray(embed(unique, model, encoder), np.float32)
        folder.mkdir(parents=True, exist_ok=True)
        write_npy(path, emb)
    at = {t: i for i, t in enumerate(unique)}
    return emb[[at[t] for t in texts]]


def _dev_key(dev_queries: str | Path, qrels: str | Path, llm_ids: str | Path | None, options: MllmOptions,
             given: np.ndarray | None, discovery_given: np.ndarray | None = None, encoder=None) -> tuple[str, dict]:
    """The signature of the dev side (files, the encoder's identity — spec, runtime, a local model's files:
    `encoder_identity` — or given embeddings, grade map) and its settings."""
    settings = {"model": training_store.array_digest(given) if given is not None else
                encoder_identity(encoder if encoder is not None else question_encoder(options.model), options.model),
                "targets": sorted(parse_targets(options.targets).items())}
    inputs = {"dev_queries": dev_queries, "qrels": qrels, "llm_ids": llm_ids}
    if options.discovery is not None:
        inputs["discovery"] = options.discovery
        settings["discovery_columns"] = options.discovery_columns
        if discovery_given is not None:
            settings["discovery_embeddings"] = training_store.array_digest(discovery_given)
    return training_store.signature(inputs, settings), settings


def store_dev(dev: DevSet, options: MllmOptions, key: str, settings: dict, given: np.ndarray | None,
              discovery_given: np.ndarray | None = None, encoder=None) -> TrainingSide:
    """Embed the dev questions (unless `given`) and store them with their targets and grades; with a discovery
    set, its questions' embeddings (unless `discovery_given`), soft labels and per-LLM statistics beside them."""
    arrays = {}
    if options.discovery is not None:
        from engine.tasks.model_ranking.discovery import read_discovery
        found = read_discovery(options.discovery, dev.llm_ids, options.discovery_columns)
        info(f"discovery set: {len(found.query_ids)} questions, {found.rows} rows"
             + (f" ({found.unknown_llms} of LLMs not among the candidates, skipped)" if found.unknown_llms else ""))
        if discovery_given is not None and len(discovery_given) != len(found.query_ids):
            raise EngineError(f"{len(discovery_given)} discovery embeddings for {len(found.query_ids)} discovery "
                              "questions")
        arrays = {DISCOVERY_EMB: discovery_given if discovery_given is not None else
                  embed_cached(found.texts, options.model, Path(options.root) / f"{options.name}-question-embeddings"),
                  DISCOVERY_SOFT: found.soft, LLM_STATS: found.llm_stats}
    emb = given if given is not None else embed(dev.texts, options.model, encoder)
    side = TrainingSide(dev.query_ids, dev.llm_ids, {EMBEDDING: emb}, dev.targets, dev.grades,
                        meta=[{"text": t} for t in dev.texts], arrays=arrays)
    training_store.save(side, TASK, options.name, options.root, key, options.model if given is None else None,
                        settings)
    return side


# ---------------------------------------------------------------- commands


def label_gain(gain: Mapping[int, float]) -> list[float]:
    """LambdaRank's gain per integer label (the grade): the grade map."""
    return [float(gain.get(g, 0.0)) for g in range(max(gain) + 1)]


DISCOVERY_EMB, DISCOVERY_SOFT, LLM_STATS = "discovery_emb", "discovery_soft", "llm_stats"
"""The discovery set's arrays in the stored dev side."""


def discovery_transfer(emb: np.ndarray, arrays: Mapping[str, np.ndarray], params: TransferParams,
                       own: np.ndarray | None = None) -> np.ndarray | None:
    """(questions × LLMs) each LLM's confidence (z-scored within each discovery question) on the k discovery
    questions nearest to the question, softmax-weighted as transfer weighs neighbours (no prior). None without a
    discovery set. `own`: the questions ARE these discovery questions (their indices), each one's neighbours the
    others only."""
    if DISCOVERY_EMB not in arrays:
        return None
    disc = l2_normalize(np.asarray(arrays[DISCOVERY_EMB], np.float32))
    soft = np.asarray(arrays[DISCOVERY_SOFT], np.float64)
    sim = l2_normalize(np.asarray(emb, np.float32)) @ disc.T
    if own is not None:
        sim[np.arange(len(own)), own] = -np.inf
    prior = np.nan_to_num(column_prior(soft))
    return transfer(sim, soft, prior, TransferParams(params.k, params.temperature, 0.0))


def discovery_block(emb: np.ndarray, arrays: Mapping[str, np.ndarray], params: TransferParams,
                    own: np.ndarray | None = None) -> np.ndarray | None:
    """(questions × LLMs × 2) LambdaRank features from the discovery set: `discovery_transfer` as a z-score and a
    rank position within the question. None without one."""
    pred = discovery_transfer(emb, arrays, params, own)
    return None if pred is None else ltr.query_candidate_block([pred])


def pseudo_grades(soft: np.ndarray) -> np.ndarray:
    """Integer labels of discovery questions from their soft labels, shaped like the dev qrels: the LLM with the
    highest confidence grade 1 (most relevant), the next grade 2, the rest 0 (an LLM that did not answer: 0)."""
    soft = np.where(np.isfinite(soft), soft, -np.inf)
    order = np.argsort(-soft, axis=1, kind="stable")
    out = np.zeros(soft.shape, dtype=np.int64)
    rows = np.arange(len(soft))
    for grade, col in ((1, 0), (2, 1)):
        if soft.shape[1] > col:
            pick = order[:, col]
            ok = np.isfinite(soft[rows, pick])
            out[rows[ok], pick[ok]] = grade
    return out


def pseudo_queries(train_emb: np.ndarray, arrays: Mapping[str, np.ndarray], params: TransferParams
                   ) -> ltr.Side | None:
    """Discovery questions as further LambdaRank training queries (None without a discovery set): as many as
    there are training questions at most (evenly spread over the discovery set, so the fit costs at most twice
    as much), labelled by `pseudo_grades`, their features made as a new question's (transfer from the training
    questions; the discovery confidences of the other discovery questions near it)."""
    if DISCOVERY_EMB not in arrays:
        return None
    disc = l2_normalize(np.asarray(arrays[DISCOVERY_EMB], np.float32))
    pick = np.unique(np.linspace(0, len(disc) - 1, min(len(disc), len(train_emb))).round().astype(np.int64))
    soft = np.asarray(arrays[DISCOVERY_SOFT], np.float64)[pick]
    return ltr.Side({EMBEDDING: disc[pick] @ l2_normalize(train_emb).T},
                    extra=discovery_block(disc[pick], arrays, params, own=pick), labels=pseudo_grades(soft))


TOPIC_DISCOVERY = 2
"""How many discovery questions per training question shape the topic mixture's topics at most."""


def discovery_topics(arrays: Mapping[str, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The discovery questions that shape the topic mixture's topics beside `n` training questions (None without
    a discovery set): up to TOPIC_DISCOVERY × n, evenly spread over the set, their unit embeddings and as
    relevant their two most confident LLMs (`pseudo_grades`). A topic's centre and its LLMs' relevance rates
    then rest on many more questions than the dev side has; its mean targets still come from the dev questions.
    The default's topic mixture (alone and in the ensemble) whenever a discovery set is given: chosen on planted
    seeds 200.. and reported on 0.. (benchmarks/mllm_guard_power.py --discovery, docs/model-ranking.md)."""
    if DISCOVERY_EMB not in arrays:
        return None
    disc = l2_normalize(np.asarray(arrays[DISCOVERY_EMB], np.float32))
    pick = np.unique(np.linspace(0, len(disc) - 1, min(len(disc), TOPIC_DISCOVERY * n)).round().astype(np.int64))
    return disc[pick], (pseudo_grades(np.asarray(arrays[DISCOVERY_SOFT], np.float64)[pick]) > 0).astype(np.float64)


@dataclass(frozen=True)
class Evidence:
    """What LambdaRank reads besides the questions: the candidate LLM ids (descriptors are parsed from them), the
    stored dev side's `arrays` (with a discovery set: per-LLM statistics, confidences, its questions; empty:
    none) and whether the discovery questions also train it (`pseudo`)."""
    candidate_ids: Sequence[str]
    arrays: Mapping[str, np.ndarray] | None = None
    pseudo: bool = True


def ltr_predict(train_emb: np.ndarray, query_emb: np.ndarray, scores: np.ndarray, grades: np.ndarray,
                gain: Mapping[int, float], evidence: Evidence, params: TransferParams) -> np.ndarray:
    """LambdaRank over the transfer features and descriptors parsed from the LLM ids; with a discovery set
    (`evidence.arrays`), its per-LLM statistics and the discovery confidences near each question as features
    and (`evidence.pseudo`) its questions as further training queries (`pseudo_queries`)."""
    arrays, pseudo = evidence.arrays or {}, evidence.pseudo
    descriptors = ltr.candidate_descriptors(evidence.candidate_ids)
    if LLM_STATS in arrays:
        descriptors = np.concatenate([descriptors, np.asarray(arrays[LLM_STATS], np.float64)], axis=1)
    train_extra, query_extra = discovery_block(train_emb, arrays, params), discovery_block(query_emb, arrays, params)
    more = pseudo_queries(train_emb, arrays, params) if pseudo else None
    train_emb, query_emb = l2_normalize(train_emb), l2_normalize(query_emb)
    return ltr.predict(ltr.Side({EMBEDDING: train_emb @ train_emb.T}, extra=train_extra, labels=grades),
                       ltr.Side({EMBEDDING: query_emb @ train_emb.T}, extra=query_extra), scores,
                       label_gain(gain), params, descriptors, pseudo=more)


def ensemble(ltr_predictions: np.ndarray, sim: np.ndarray, scores: np.ndarray, params: TransferParams,
             discovery: np.ndarray | None = None, topic_predictions: np.ndarray | None = None) -> np.ndarray:
    """The mean rank position (1 best … 0 worst per question) of LambdaRank's predictions and of transfer at
    `params` and at BROAD from the training questions (`sim`: questions × training questions, their `scores`),
    with a discovery set of `discovery` (`discovery_transfer` at BROAD: the confidences of the 30 nearest
    discovery questions, a view of the question that the dev questions' few neighbours cannot give), and of
    `topic_predictions` (`topics.topic_mixture`: the questions' latent topics, where a topic's centre averages
    out the noise that single neighbours carry).
    LambdaRank learns the LLMs' base rates and the neighbours' evidence together but varies with ~100 training
    questions; transfer is steadier; averaging the rankings holds up better than any one on the planted sets
    (docs/model-ranking.md)."""
    prior = column_prior(scores)
    parts = [ltr_predictions, transfer(sim, scores, prior, params), transfer(sim, scores, prior, BROAD)]
    parts += [p for p in (discovery, topic_predictions) if p is not None]
    return np.mean([rank_targets(p) for p in parts], axis=0)


def fold_methods(emb: np.ndarray, scores: np.ndarray, grades: np.ndarray, gain: Mapping[int, float],
                 evidence: Evidence, params: TransferParams) -> tuple[Callable, Callable, Callable]:
    """The default's methods as fold predictors over the rows of `emb` (unit embeddings; `scores` and `grades`
    of the judged rows), each memoized per split, in `GUARDED_NAMES`' order: the ensemble (LambdaRank, transfer
    at `params` and at BROAD, the topic mixture; with a discovery set in `evidence.arrays` its confidences),
    LambdaRank alone and the topic mixture alone (with a discovery set its questions also shape the topics:
    `discovery_topics`)."""
    arrays = evidence.arrays or {}
    ltr_fold = memoized(lambda tr, te: ltr_predict(emb[tr], emb[te], scores[tr], grades[tr], gain, evidence, params))
    topics_fold = memoized(lambda tr, te: topics.topic_mixture(emb[tr], scores[tr], emb[te],
                                                               discovery_topics(arrays, len(tr))))
    ensemble_fold = memoized(lambda tr, te: ensemble(ltr_fold(tr, te), emb[te] @ emb[tr].T, scores[tr], params,
                                                     discovery_transfer(emb[te], arrays, BROAD), topics_fold(tr, te)))
    return ensemble_fold, ltr_fold, topics_fold


def dev_side(dev_queries: str | Path, qrels: str | Path, llm_ids: str | Path | None, options: MllmOptions,
             embeddings: np.ndarray | None = None, discovery_embeddings: np.ndarray | None = None) -> TrainingSide:
    """The stored dev side, embedded (and stored) first when the files, the encoder or the settings changed. The
    dev files are read (and so checked) before the encoder, whose identity is part of the key, loads."""
    dev = read_dev(dev_queries, qrels, llm_ids, options.targets)
    encoder = question_encoder(options.model) if embeddings is None else None
    return _stored_side(dev, (dev_queries, qrels, llm_ids), options, embeddings, discovery_embeddings, encoder)


def _stored_side(dev: DevSet, files: tuple, options: MllmOptions, given: np.ndarray | None,
                 discovery_given: np.ndarray | None, encoder) -> TrainingSide:
    """The dev side stored under its signature (`_dev_key` over `files`: dev questions, qrels, LLM ids), embedded
    and stored first when there is none."""
    key, settings = _dev_key(*files, options, given, discovery_given, encoder)
    side = training_store.load(TASK, options.name, options.root, key)
    return side if side is not None else store_dev(dev, options, key, settings, given, discovery_given, encoder)


def cross_validate_dev(dev_queries: str | Path, qrels: str | Path, llm_ids: str | Path | None = None,
                       options: MllmOptions = MllmOptions(), embeddings: np.ndarray | None = None,
                       repeats: int = REPEATS, discovery_embeddings: np.ndarray | None = None) -> Study:
    """`engine mllm --cv`: nDCG@10 and MRR out of fold, mean ± std over `repeats` k-fold splits, paired p
    against the prior, for the prior, transfer at the fixed params, transfer tuned per fold and LTR.
    `embeddings` (one row per judged dev question) replace the sentence model, e.g. in tests."""
    side = dev_side(dev_queries, qrels, llm_ids, options, embeddings, discovery_embeddings)
    gain = grade_gains(options.targets)
    objective = objective_for(side.grades, gain)
    (n, m), folds = side.scores.shape, options.transfer.folds
    emb = l2_normalize(side.embeddings[EMBEDDING])
    scores, grades, params = side.scores, side.grades, options.transfer.fixed(FIXED)
    grid = options.transfer.grid(n)

    def tuned(tr, te):
        best, _ = tune(emb[tr] @ emb[tr].T, scores[tr], objective, grid, rows=tr)
        return transfer(emb[te] @ emb[tr].T, scores[tr], column_prior(scores[tr]), best)

    ensemble_fold, ltr_fold, topics_fold = fold_methods(emb, scores, grades, gain,
                                                        Evidence(side.candidate_ids, side.arrays), params)

    chosen: list[float] = []
    per_position: list[tuple[float, ...]] = []
    ltr_positions: list[tuple[float, ...]] = []
    either_positions: list[tuple[float, ...]] = []
    either_picked: list[tuple[int, ...]] = []
    three_positions: list[tuple[float, ...]] = []
    three_picked: list[tuple[int, ...]] = []

    variants: list[tuple[str, Callable, str]] = [
        (BASELINE, lambda tr, te: np.tile(column_prior(scores[tr]), (len(te), 1)), "mean target per LLM"),
        ("transfer" + (" (default)" if options.method == "transfer" else ""),
         lambda tr, te: transfer(emb[te] @ emb[tr].T, scores[tr], column_prior(scores[tr]), params), str(params)),
        ("transfer, params tuned per fold" + (" (default)" if options.method == "tuned" else ""), tuned,
         "k/T/w by inner leave-one-out nDCG@10 (the first version's default)"),
        ("LTR (LambdaRank)" + (" (default)" if options.method == "ltr" else ""), ltr_fold,
         f"LightGBM {ltr.LTRParams()}; transfer features at {params}"),
        ("topic mixture", topics_fold, f"latent topics by EM over embeddings and relevance, K in {topics.KS}"
         + (", the discovery questions shaping them" if DISCOVERY_EMB in side.arrays else "")),
        ("ensemble" + (" (default)" if options.method == "ensemble" else ""), ensemble_fold,
         f"mean rank position of LTR, transfer at {params} and at {BROAD}, the topic mixture"
         + (" and the discovery confidences at the broad scale" if DISCOVERY_EMB in side.arrays else "")),
        ("guarded: LTR ⊕ prior per position", guarded_positions(ltr_fold, scores, grades, gain, m, ltr_positions),
         "the blend per position over LTR alone (the previous default)"),
        ("guarded: ensemble ⊕ prior, one weight" + (" (default)" if options.method == "guarded-ranking" else ""),
         guarded(ensemble_fold, scores, grades, gain, m, chosen),
         f"weight of the ensemble: {baseline_blend.RULE} (nested)"),
        ("guarded: ensemble ⊕ prior per position", guarded_positions(ensemble_fold, scores, grades, gain, m,
                                                                     per_position),
         "the blend per position over the ensemble alone"),
        ("guarded: ensemble or LTR ⊕ prior per position",
         guarded_positions([ensemble_fold, ltr_fold], scores, grades, gain, m, either_positions, either_picked),
         f"per band the ensemble or LTR and its weight (the previous default's rule): "
         f"{baseline_blend.rule(2, GUARD)} (nested)"),
        (DEFAULT_VARIANT + (" (default)" if options.method == "guarded" else ""),
         guarded_positions([ensemble_fold, ltr_fold, topics_fold], scores, grades, gain, m, three_positions,
                           three_picked),
         f"per band the ensemble, LTR or the topic mixture and its weight (first place by MRR, the rest by "
         f"nDCG@10): {baseline_blend.rule(len(GUARDED_NAMES), GUARD)} (nested)")]
    if not options.full_cv:
        variants = [v for v in variants if "per fold" not in v[0] or "(default)" in v[0]]
    scored = [run_variant(name, fn, lambda p: per_query_scores(grades, gain, p), n, m, folds, repeats, note)
              for name, fn, note in variants]
    values, counts = np.unique(np.asarray(chosen), return_counts=True)
    scored[-4].note += "; weights chosen: " + ", ".join(f"{v:g} ×{c}" for v, c in zip(values, counts))

    def picks_of(positions: list[tuple[float, ...]], picked: list[tuple[int, ...]]) -> list[str]:
        return ["/".join(f"{GUARDED_NAMES[i]} {w:g}" if w else "prior" for w, i in zip(weights, picks))
                for weights, picks in zip(positions, picked)]
    for variant, pairs in ((scored[-5], [f"{a:g}/{b:g}" for a, b in ltr_positions]),
                           (scored[-3], [f"{a:g}/{b:g}" for a, b in per_position]),
                           (scored[-2], picks_of(either_positions, either_picked)),
                           (scored[-1], picks_of(three_positions, three_picked))):
        variant.note += "; weights chosen (first/rest): " + ", ".join(f"{v} ×{pairs.count(v)}"
                                                                       for v in sorted(set(pairs)))
    return Study(scored, [metric.name for metric in METRICS], BASELINE, folds, repeats)


def guarded(method: Callable, scores: np.ndarray, grades: np.ndarray, gain: Mapping[int, float], m: int,
            chosen: list[float] | None = None) -> Callable:
    """`method` blended with the prior (mean target), the weight fitted inside the training rows on nDCG@10 and
    MRR, both guarded (`baseline_blend`)."""
    metrics = [metric.name for metric in METRICS]
    return baseline_blend.guarded(method, lambda tr, te: np.tile(column_prior(scores[tr]), (len(te), 1)),
                                  lambda p, rows: per_query_scores(grades[rows], gain, p), metrics, metrics, m,
                                  chosen)


DEFAULT_VARIANT = "guarded: ensemble, LTR or topics ⊕ prior per position"
"""The default's row in `engine mllm --cv`."""
GUARDED_NAMES = ("ensemble", "LTR", "topics")
"""The methods the default chooses among per band, in this order: the ensemble (which holds up where a topic's
questions are few), LambdaRank alone (where the questions' neighbours are mixed and it learns how far to trust
them) and the topic mixture alone (where a topic's questions are many: its centre is steadier than any ranking
that also averages single neighbours); chosen on planted sets of other seeds than the reported ones."""


POSITION_BANDS = ("mrr", TUNED.name)
"""The metric deciding each band of rank positions: the first place (MRR), the rest (nDCG@10)."""


GUARD = baseline_blend.InnerCV(own=baseline_blend.ALPHA, pick="mean")
"""The rule the default's bands are fitted by (`baseline_blend.InnerCV`): each (method, weight) candidate's own
metric tested at ALPHA (not ALPHA / candidates) and the qualifying one with the largest mean gain kept. The
Bonferroni level over the twelve candidates and the largest lower bound gave up a real gain (on planted `mixture`
sets about a third of the topic mixture's nDCG@10 gain) where the candidates are one method at four weights,
strongly correlated; chosen on planted seeds 200.. over every construction, reported on 0.. (docs/model-ranking.md)."""


def guarded_positions(method: Callable | Sequence[Callable], scores: np.ndarray, grades: np.ndarray,
                      gain: Mapping[int, float], m: int, chosen: list[tuple[float, ...]] | None = None,
                      picked: list[tuple[int, ...]] | None = None, cv: baseline_blend.InnerCV = GUARD) -> Callable:
    """`method` blended with the prior per rank position (`baseline_blend.guarded_positions` by the rule `cv`):
    the first place by the weight whose MRR gain is shown inside the training rows, the rest by the one whose
    nDCG@10 gain is; among several methods, each band's method with its weight."""
    return baseline_blend.guarded_positions(
        method, lambda tr, te: np.tile(column_prior(scores[tr]), (len(te), 1)),
        lambda p, rows: per_query_scores(grades[rows], gain, p), POSITION_BANDS, (1, m), cv, chosen, picked)


def rank_questions(dev_queries: str | Path, qrels: str | Path, queries: str | Path, out: str | Path,
                   llm_ids: str | Path | None = None, options: MllmOptions = MllmOptions(),
                   embeddings: Mapping[str, np.ndarray] | None = None) -> str:
    """`engine mllm --queries`: rank every LLM for every question and write a TREC run.

    `guarded` (default) blends the ensemble (LambdaRank, transfer at two scales, the topic mixture), LambdaRank
    alone or the topic mixture alone with the prior per rank position, `guarded-ranking` the ensemble with one
    weight, `ensemble` is that ensemble alone, `ltr` trains LambdaRank on the dev questions' transfer features, `transfer` uses FIXED params (or
    those the user sets), `tuned` chooses them by leave-one-out nDCG@10 over the dev questions. `embeddings`
    ({"dev": ..., "queries": ..., "discovery": ...}) replace the sentence model, e.g. in tests.
    """
    given = embeddings["dev"] if embeddings is not None else None
    disc_given = embeddings.get("discovery") if embeddings is not None else None
    dev = read_dev(dev_queries, qrels, llm_ids, options.targets)
    new = read_queries(queries)  # before the model loads: a bad question file fails fast
    encoder = question_encoder(options.model) if embeddings is None else None
    side = _stored_side(dev, (dev_queries, qrels, llm_ids), options, given, disc_given, encoder)
    new_emb = embeddings["queries"] if embeddings is not None else embed([t for _, t in new], options.model, encoder)
    gain = grade_gains(options.targets)
    params = options.transfer.fixed(FIXED)
    if options.method in ("guarded", "guarded-ranking", "ensemble"):
        emb = l2_normalize(np.concatenate([side.embeddings[EMBEDDING], new_emb]))
        n, m, chosen = len(side.query_ids), len(side.candidate_ids), []
        fold, ltr_fold, topics_fold = fold_methods(emb, side.scores, side.grades, gain,
                                                   Evidence(side.candidate_ids, side.arrays), params)
        shaped = DISCOVERY_EMB in side.arrays
        mixture = "the topic mixture" + (" (its topics shaped by the discovery questions too)" if shaped else "")
        what = (f"the ensemble (LambdaRank, transfer at {params} and at {BROAD}, {mixture}"
                + (", discovery confidences at the broad scale)" if shaped else ")"))
        if options.method == "guarded":
            picked: list[tuple[int, ...]] = []
            predictions = guarded_positions([fold, ltr_fold, topics_fold], side.scores, side.grades, gain, m,
                                            chosen, picked)(np.arange(n), np.arange(n, len(emb)))
            names = (what, "LambdaRank alone", f"{mixture} alone")
            band = [f"{w:g} on {names[i]}" if w else "the prior" for w, i in zip(chosen[0], picked[0])]
            how = (f"first place: {band[0]}; the rest: {band[1]}; the remainder on the prior "
                   f"({baseline_blend.rule(len(names), GUARD)})")
        elif options.method == "guarded-ranking":
            predictions = guarded(fold, side.scores, side.grades, gain, m, chosen)(
                np.arange(n), np.arange(n, len(emb)))
            how = f"weight {chosen[0]:g} on {what}, the rest on the prior ({baseline_blend.RULE})"
        else:
            predictions = fold(np.arange(n), np.arange(n, len(emb)))
            how = what
    elif options.method == "ltr":
        predictions = ltr_predict(side.embeddings[EMBEDDING], new_emb, side.scores, side.grades, gain,
                                  Evidence(side.candidate_ids, side.arrays), params)
        how = f"LambdaRank over transfer features at {params}"
    else:
        collection = QueryCollection(side.query_ids, side.candidate_ids, side.embeddings[EMBEDDING], side.scores)
        if options.method == "tuned":
            params, value = collection.tune(objective_for(side.grades, gain),
                                            options.transfer.grid(len(side.query_ids)))
            how = f"{params}; leave-one-out nDCG@10 on dev {value:.4f}"
        else:
            how = str(params)
        predictions = collection.predict(new_emb, params)
    ranked = rankings([q for q, _ in new], side.candidate_ids, predictions)
    lines = write_run(out, ranked, run_tag(options.run_id, options.method))
    check_written(out, "mllm", [q for q, _ in new], side.candidate_ids)
    return f"{len(new)} questions × {len(side.candidate_ids)} LLMs → {out} ({lines} lines; {options.method}: {how})"
