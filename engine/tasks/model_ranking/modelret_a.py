"""NTCIR-19 ModelRetrieval A: rank the 20 candidate BERT models for a text-classification task.

A task is represented only by what participants get — its instruction (tasks.csv), its label names and
its train/val texts — in four views: `text` (mean sentence embedding of a bounded sample of texts),
`instruction`, `labels` (the label names as one sentence) and `stats` (number of classes, label entropy,
text length…, z-scored). The training tasks' normalized F1 (F1 / best F1 of the task) per model is
transferred to a new task from its nearest training tasks (`transfer`). The training tasks' views and scores
are stored as a collection (`training_store`) and reused while the release's files are unchanged.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from engine.core.collection import DEFAULT_ROOT
from engine.core.encoders.base import l2_normalize
from engine.core.encoders.registry import DEFAULT_TEXT_SPEC
from engine.errors import EngineError, opt
from engine.eval.evaluate import evaluate
from engine.eval.metrics import Judged, parse_metrics
from engine.eval.profiles import PROFILES
from engine.io.runs import write_run
from engine.eval.validate import check_written
from engine.tasks.model_ranking import (baseline_blend, candidate_features, encoding, ltr, matrix_metrics,
                                        training_store, transferability)
from engine.tasks.model_ranking.candidate_features import FeatureOptions
from engine.tasks.model_ranking.data import (Task, TrainingSet, grade_qrels, read_models, read_query_tasks,
                                             read_training, sample_indices, tier_name)
from engine.tasks.model_ranking.study import Study, memoized, run_variant
from engine.tasks.model_ranking.training_store import TrainingSide
from engine.tasks.model_ranking.transfer import (DEFAULT_RUN_ID, run_tag, QueryCollection, TransferOptions, TransferParams,
                                                 blend_views, column_prior, ensemble, mean_rank_order, rank_targets,
                                                 rankings, select, transfer, tune)

TASK = "modelret-a"
VIEWS = ("text", "instruction", "labels", "stats")
METRICS = parse_metrics(PROFILES["ntcir-a"].metrics)
"""nDCG@1/3/5 with gain 2^rel − 1: what is reported, and (their mean) what tuning maximizes."""
TIERS = ("high", "medium", "low")
GAINS = (0.0, 1.0, 3.0, 7.0)
"""LambdaRank's gain per grade: 2^rel − 1, as the official nDCG."""
FEATURE_METHODS = tuple(transferability.SCORES)
METHODS = ("guarded", "guarded-ranking", "ensemble", "ltr", "blend") + FEATURE_METHODS
FIXED = TransferParams(k=5, temperature=0.1, prior_weight=0.5)
"""The ensemble's and LTR's transfer params, fixed before the 5 × 10-fold study (docs/model-ranking.md):
the middle of the old grid, half the weight on the prior; never re-tuned per run."""
REPEATS = 5
BASELINE = "average rank (baseline)"
"""The mean of ground-truth.csv's model_rank over the training tasks (`transfer.mean_rank_order`): the baseline the
organizers' leaderboard names, and what every guarded default falls back on."""


@dataclass(frozen=True)
class ModelretAOptions:
    """`engine modelret-a`'s settings (the command reads its defaults here)."""
    model: str = DEFAULT_TEXT_SPEC
    sample: int = 32
    """train/val texts embedded per task; their mean is the text view."""
    method: str = "guarded"
    """guarded: the view ensemble (with candidate features: LTR over them) blended with the average rank per rank
    position (position 1 by a weight that must raise nDCG@1, 2–3 by one that must raise nDCG@3, the rest nDCG@5),
    each weight by nested CV (`baseline_blend.guarded_positions`); guarded-ranking: one weight for the whole
    ranking, 0 unless every nDCG gains (the previous default); ensemble: mean of the views' transferred predictions at FIXED params; ltr:
    LambdaRank; blend: the best view blend and params by leave-one-out (the first version's default, which
    over-fits 79 tasks); logme/hscore/knn/linear: the candidates' transferability scores (needs features)."""
    views: str | None = None
    """views to use (None: all four); with `blend`, exactly this blend."""
    full_cv: bool = False
    """--cv also runs the nested variants that tune per fold (several minutes)."""
    run_id: str = DEFAULT_RUN_ID
    name: str = TASK
    root: Path = DEFAULT_ROOT
    transfer: TransferOptions = field(default_factory=TransferOptions)
    features: FeatureOptions = field(default_factory=FeatureOptions)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise EngineError(f"unknown method {self.method!r}; methods: {', '.join(METHODS)}")
        if self.method in FEATURE_METHODS and self.features.candidates is None:
            raise EngineError(f"{opt('method')} {self.method} scores the candidates' own features: give "
                              f"{opt('candidates')} models.csv (and {opt('checkpoints')} DIR offline)")


# ---------------------------------------------------------------- views


def _sample(texts: Sequence[str], size: int, task_id: str) -> list[str]:
    return [texts[i] for i in sample_indices(len(texts), size, task_id)]


def embed_views(tasks: Sequence[Task], model: str, sample: int,
                stats_reference: tuple[np.ndarray, np.ndarray] | None = None, encoder=None
                ) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The four views of each task (rows; a missing instruction is a zero row) and the stats' mean/std.

    Texts are embedded by `encoder` (default `encoding.text_encoder(model)`: the encoder `engine build` encodes
    texts with, onnxruntime on the CPU). Stats are z-scored with `stats_reference` (the training tasks' mean and
    std) when given.
    """
    encoder = encoder if encoder is not None else encoding.text_encoder(model)
    samples = [_sample([t for t in task.texts if t], sample, task.task_id) for task in tasks]
    flat = [t for s in samples for t in s]
    emb = encoding.embed(flat, model, encoder, f"sampled texts of {len(tasks)} tasks")
    text = np.zeros((len(tasks), encoder.dim), np.float32)
    start = 0
    for i, s in enumerate(samples):
        if s:
            text[i] = emb[start:start + len(s)].mean(axis=0)
        start += len(s)
    instruction = np.zeros_like(text)
    has = [i for i, t in enumerate(tasks) if t.instruction]
    if has:
        instruction[has] = encoding.embed([tasks[i].instruction for i in has], model, encoder, "instructions")
    labels = encoding.embed(["Labels: " + ", ".join(t.label_names) for t in tasks], model, encoder, "label lists")
    raw = np.stack([t.statistics() for t in tasks])
    mean, std = stats_reference if stats_reference is not None else (raw.mean(axis=0), raw.std(axis=0))
    stats = (raw - mean) / np.where(std > 1e-9, std, 1.0)
    return {"text": text, "instruction": instruction, "labels": labels, "stats": stats}, (mean, std)


def parse_views(spec: str | None) -> list[str]:
    """`text,stats` → the views to blend; None or `all` → all four."""
    if spec is None or spec.strip().lower() in ("", "all"):
        return list(VIEWS)
    names = [v.strip().lower() for v in spec.split(",") if v.strip()]
    bad = [v for v in names if v not in VIEWS]
    if bad:
        raise EngineError(f"unknown view {bad[0]!r}; views: {', '.join(VIEWS)}")
    return list(dict.fromkeys(names))


def blends(views: dict[str, np.ndarray], names: Sequence[str], fixed: bool = False) -> dict[str, np.ndarray]:
    """Equal-weight blends of every non-empty subset of `names` (or only of all of them when `fixed`)."""
    subsets = [tuple(names)] if fixed else [c for r in range(1, len(names) + 1)
                                             for c in itertools.combinations(names, r)]
    return {"+".join(s): blend_views(views, {n: 1.0 for n in s}) for s in subsets}


# ---------------------------------------------------------------- the stored training side


def training_inputs(train_dir: str | Path, tasks_csv: str | Path | None) -> dict[str, Path]:
    """Every file `read_training` reads, by its place in the release."""
    train_dir = Path(train_dir)
    inputs = {"tasks.csv": Path(tasks_csv) if tasks_csv else train_dir / "tasks.csv",
              "models.csv": train_dir / "models.csv", "ground-truth.csv": train_dir / "ground-truth.csv"}
    folder = train_dir / "task-data" / "train-tasks"
    for task in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        for split in ("train.jsonl", "val.jsonl"):
            inputs[f"{task.name}/{split}"] = task / split
    return inputs


def _settings(options: ModelretAOptions, encoder) -> dict:
    """The stored side's settings: the encoder's identity (spec, runtime, a local model's files), the sample, the
    baseline."""
    return {"model": encoding.encoder_identity(encoder, options.model), "sample": options.sample,
            "baseline": "model_rank"}


def store_training(training: TrainingSet, options: ModelretAOptions, key: str, encoder) -> TrainingSide:
    """Embed the training tasks' views and store them with their scores under options.root/options.name."""
    views, (mean, std) = embed_views(training.tasks, options.model, options.sample, encoder=encoder)
    side = TrainingSide(training.task_ids, training.model_ids, views, training.normalized_f1, training.grades,
                        meta=[{"criticality": t.criticality} for t in training.tasks],
                        arrays={"stats_mean": mean, "stats_std": std, "model_rank": training.published_ranks})
    training_store.save(side, TASK, options.name, options.root, key, options.model, _settings(options, encoder))
    return side


def training_side(train_dir: str | Path, tasks_csv: str | Path | None, options: ModelretAOptions
                  ) -> TrainingSide:
    """The stored training side, embedded (and stored) first when the release, the encoder or the settings
    changed. The release is read (and so checked) before the encoder, whose identity is part of the key, loads."""
    training = read_training(train_dir, tasks_csv)
    encoder = encoding.text_encoder(options.model)
    key = training_store.signature(training_inputs(train_dir, tasks_csv), _settings(options, encoder))
    side = training_store.load(TASK, options.name, options.root, key)
    return side if side is not None else store_training(training, options, key, encoder)


# ---------------------------------------------------------------- metric


def _metric_values() -> dict[str, matrix_metrics.RowValue]:
    return {m.name: (lambda rels, judged, m=m: m.definition.fn(Judged(rels, judged), m.k)) for m in METRICS}


def objective_for(grades: np.ndarray):
    """Mean of the profile's nDCG@1/3/5 over the given rows: what tuning maximizes (values remembered per task
    and top 5: tuning scores thousands of rankings of the same tasks)."""
    values = _metric_values()
    return matrix_metrics.mean_objective(grades, lambda rels, judged: sum(v(rels, judged) for v in values.values())
                                         / len(values), max(m.k for m in METRICS), remember=True)


def labels() -> dict[str, str]:
    """Metric name → its column label (nDCG@1, …)."""
    return {m.name: f"nDCG@{m.k}" for m in METRICS}


# ---------------------------------------------------------------- the methods


def unit_views(views: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each view's rows L2-normalized (a missing view stays a zero row)."""
    return {name: l2_normalize(emb) for name, emb in views.items()}


def ensemble_predict(train: dict[str, np.ndarray], queries: dict[str, np.ndarray], scores: np.ndarray,
                     params: TransferParams) -> np.ndarray:
    """The mean of the views' transferred predictions (unit-row views; a query's missing view is left out)."""
    sims = {v: queries[v] @ train[v].T for v in queries}
    present = {v: np.abs(queries[v]).sum(axis=1) > 0 for v in queries}
    return ensemble(sims, scores, column_prior(scores), params, present)


def ltr_predict(train: dict[str, np.ndarray], queries: dict[str, np.ndarray], scores: np.ndarray,
                grades: np.ndarray, descriptors: np.ndarray, params: TransferParams,
                ltr_params: ltr.LTRParams | None = None,
                extra: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """LambdaRank over the views' transfer features, the task statistics, the model-name descriptors and (given)
    the candidates' transferability scores (`extra`: the training tasks' rows, the new tasks' rows), trained on
    the training tasks with gain 2^grade − 1."""
    train_extra, query_extra = extra if extra is not None else (None, None)
    return ltr.predict(ltr.Side({v: train[v] @ train[v].T for v in train}, train["stats"], train_extra, grades),
                       ltr.Side({v: queries[v] @ train[v].T for v in queries}, queries["stats"], query_extra),
                       scores, GAINS, params, descriptors, ltr_params)


def model_descriptors(train_dir: str | Path, model_ids: Sequence[str]) -> np.ndarray:
    """Descriptors parsed from the candidates' names in models.csv (the id itself when it is not listed)."""
    names = read_models(Path(train_dir) / "models.csv")
    return ltr.candidate_descriptors([names.get(m, m) for m in model_ids])


# ---------------------------------------------------------------- candidate features


def candidate_models(options: ModelretAOptions, train_dir: str | Path) -> dict[str, str] | None:
    """`--candidates` (id → name) in the column order of the training set's models.csv; an id it does not list
    is an error; None without `--candidates`."""
    if options.features.candidates is None:
        return None
    model_ids = list(read_models(Path(train_dir) / "models.csv"))
    models = candidate_features.read_candidates(options.features)
    unknown = [m for m in models if m not in model_ids]
    if unknown:
        raise EngineError(f"{options.features.candidates}: model id {unknown[0]!r} is not a candidate of the "
                          "training set (its models.csv)")
    return {m: models[m] for m in model_ids if m in models}


def score_matrices(tasks: Sequence[Task], models: dict[str, str], options: ModelretAOptions,
                   model_ids: Sequence[str]) -> dict[str, np.ndarray]:
    """Each transferability method's scores (tasks × candidates, NaN: no features) from the cached features."""
    feats = candidate_features.task_features(tasks, models, options.features,
                                             Path(options.root) / f"{options.name}-features")
    ids = [t.task_id for t in tasks]
    return {m: transferability.score_matrix(feats, ids, list(model_ids), m) for m in FEATURE_METHODS}


def score_ranking(scores: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    """Candidates by a transferability score; a candidate (or task) without one falls back on the baseline."""
    r = rank_targets(scores)
    return np.where(np.isnan(r), -1.0, r) + baseline_blend.TIE * rank_targets(baseline)


def row_values(grades: np.ndarray):
    """(predictions, rows) → nDCG@1/3/5 per row: what the guarded blend's weight is fitted to."""
    return matrix_metrics.row_values(grades, _metric_values(), max(m.k for m in METRICS))


@dataclass
class Rows:
    """Views and candidate-feature block of the training tasks followed by any query tasks (row n on): fold
    predictors index them by row; targets exist for the training rows only."""
    views: dict[str, np.ndarray]
    nf1: np.ndarray
    grades: np.ndarray
    descriptors: np.ndarray
    ranks: np.ndarray
    """the published model_rank of the training rows: what the baseline averages."""
    extra: np.ndarray | None = None

    def sub(self, rows: np.ndarray, only: Sequence[str] = VIEWS) -> dict[str, np.ndarray]:
        return {v: self.views[v][rows] for v in only}

    def baseline(self, tr: np.ndarray, te: np.ndarray) -> np.ndarray:
        """The average-rank baseline: the mean published rank over the training rows `tr` (ties: column order)."""
        return np.tile(mean_rank_order(self.ranks[tr]), (len(te), 1))

    def ensemble(self, names: Sequence[str], params: TransferParams):
        return lambda tr, te: ensemble_predict(self.sub(tr, names), self.sub(te, names), self.nf1[tr], params)

    def ltr(self, params: TransferParams, features: bool):
        extra = self.extra if features else None
        return lambda tr, te: ltr_predict(self.sub(tr), self.sub(te), self.nf1[tr], self.grades[tr],
                                          self.descriptors, params,
                                          extra=None if extra is None else (extra[tr], extra[te]))

    def method(self, names: Sequence[str], params: TransferParams):
        """What the guards blend: the view ensemble, or LTR over the candidate features when there are any
        (remembered per fold: both guards ask for the same inner folds)."""
        return memoized(self.ltr(params, True) if self.extra is not None else self.ensemble(names, params))

    def guarded(self, names: Sequence[str], params: TransferParams, chosen: list[float] | None = None,
                method=None):
        """`method` blended with the average rank, one weight fitted inside the training rows (`baseline_blend`)."""
        metrics = [m.name for m in METRICS]
        return baseline_blend.guarded(method or self.method(names, params), self.baseline, row_values(self.grades),
                                      metrics, metrics, self.nf1.shape[1], chosen)

    def guarded_positions(self, names: Sequence[str], params: TransferParams,
                          chosen: list[tuple[float, ...]] | None = None, method=None):
        """`method` blended with the average rank per rank position: position 1 by nDCG@1, 2–3 by nDCG@3, the
        rest by nDCG@5, each weight fitted inside the training rows (`baseline_blend.guarded_positions`)."""
        bands = [m.name for m in sorted(METRICS, key=lambda m: m.k)]
        cuts = [m.k for m in sorted(METRICS, key=lambda m: m.k)][:-1] + [self.nf1.shape[1]]
        return baseline_blend.guarded_positions(method or self.method(names, params), self.baseline,
                                                row_values(self.grades), bands, cuts, chosen=chosen)


def feature_block(mats: dict[str, np.ndarray]) -> np.ndarray:
    return ltr.query_candidate_block([mats[m] for m in FEATURE_METHODS])


# ---------------------------------------------------------------- cross-validation


def cross_validate_tasks(train_dir: str | Path, tasks_csv: str | Path | None = None,
                         options: ModelretAOptions = ModelretAOptions(), repeats: int = REPEATS) -> Study:
    """`engine modelret-a --cv`: every method on the same `repeats` × k-fold splits, nDCG@1/3/5 overall and
    per criticality tier, mean ± std over repeats, paired p against the average-rank baseline. With
    `--candidates`, also each transferability score and LTR over them (features computed once, then cached)."""
    models = candidate_models(options, train_dir)  # before anything is embedded: bad input fails fast
    side = training_side(train_dir, tasks_csv, options)
    n, m = side.scores.shape
    nf1, grades, views = side.scores, side.grades, unit_views(side.embeddings)
    names = parse_views(options.views)
    params = options.transfer.fixed(FIXED)
    qrels = grade_qrels(side.query_ids, side.candidate_ids, grades)
    mats = None
    if models is not None:
        mats = score_matrices(read_training(train_dir, tasks_csv).tasks, models, options, side.candidate_ids)
    data = Rows(views, nf1, grades, model_descriptors(train_dir, side.candidate_ids), side.arrays["model_rank"],
                feature_block(mats) if mats is not None else None)
    objective = objective_for(grades)
    grid = options.transfer.grid(n)
    ranks = rank_targets(nf1)

    def per_query(predictions: np.ndarray) -> dict[str, np.ndarray]:
        run = {tid: dict(zip(side.candidate_ids, map(float, row))) for tid, row in zip(side.query_ids, predictions)}
        ev = evaluate(run, qrels, METRICS)
        return {metric.name: np.array([ev.per_query[t][metric.name] for t in side.query_ids]) for metric in METRICS}

    def prior_of(targets: np.ndarray):
        return lambda tr, te: np.tile(column_prior(targets[tr]), (len(te), 1))

    def tuned_ensemble(tr, te):
        preds = []
        for v in names:
            tuned, _ = tune(views[v][tr] @ views[v][tr].T, nf1[tr], objective, grid, rows=tr)
            preds.append(transfer(views[v][te] @ views[v][tr].T, nf1[tr], column_prior(nf1[tr]), tuned))
        return np.mean(preds, axis=0)

    def best_blend(tr, te):
        candidates = blends({v: side.embeddings[v][tr] for v in names}, names, fixed=options.views is not None)
        name, tuned, _ = select({b: e @ e.T for b, e in candidates.items()}, nf1[tr], objective, grid, rows=tr)
        query = blend_views({v: side.embeddings[v][te] for v in names}, {v: 1.0 for v in name.split("+")})
        return transfer(query @ candidates[name].T, nf1[tr], column_prior(nf1[tr]), tuned)

    def mark(label: str, method: str) -> str:
        return label + (" (default)" if options.method == method else "")

    label = "+".join(names)
    chosen: list[float] = []
    inner = "LTR over the candidate features" if mats is not None else f"view ensemble {label}"
    variants: list[tuple[str, Callable, str]] = [
        (BASELINE, data.baseline, "mean of ground-truth.csv's model_rank over the training folds; ties by column order"),
        ("mean rank position of normalized F1", prior_of(ranks), ""), ("mean normalized F1 (prior)", prior_of(nf1), "")]
    variants += [(f"transfer: {v}", data.ensemble([v], params), str(params)) for v in VIEWS]
    variants += [
        (mark(f"view ensemble: {label}", "ensemble"), data.ensemble(names, params),
         f"mean of the views' predictions, {params} for each"),
        (f"view ensemble: {label}, params tuned per fold", tuned_ensemble,
         "each view's k/T/w by inner leave-one-out on the training folds (nested)"),
        (mark("LTR (LambdaRank)", "ltr") if mats is None else "LTR (LambdaRank), no candidate features",
         data.ltr(params, False), f"LightGBM {ltr.LTRParams()}; transfer features at {params}"),
        (mark("best blend chosen per fold (previous default)", "blend"), best_blend,
         "view subset and params by inner leave-one-out among 15 blends × the grid (nested)")]
    if mats is not None:
        variants += [(mark(f"{method} (candidate features)", method),
                      (lambda mat: lambda tr, te: score_ranking(mat[te], data.baseline(tr, te)))(mats[method]),
                      f"{method} score of each candidate's features on the task's labelled texts")
                     for method in FEATURE_METHODS]
        variants += [(mark("LTR (LambdaRank) + candidate features", "ltr"), data.ltr(params, True),
                      "LightGBM over the transfer features and each score's within-task z and rank")]
    per_position: list[tuple[float, ...]] = []
    method = data.method(names, params)
    variants += [(mark(f"guarded: {inner} ⊕ average rank, one weight", "guarded-ranking"),
                  data.guarded(names, params, chosen, method), f"weight of {inner}: {baseline_blend.RULE} (nested)"),
                 (mark(f"guarded: {inner} ⊕ average rank per position", "guarded"),
                  data.guarded_positions(names, params, per_position, method),
                  f"weights of {inner} (position 1 by nDCG@1, 2–3 by nDCG@3, the rest by nDCG@5): "
                  f"{baseline_blend.RULE} per metric (nested)")]
    if not options.full_cv:
        variants = [v for v in variants if "per fold" not in v[0] or "(default)" in v[0]]
    tiers = [tier_name(meta["criticality"]) for meta in side.meta]
    groups = {t: np.flatnonzero(np.array(tiers) == t) for t in TIERS if t in tiers}
    scored = [run_variant(name, fn, per_query, n, m, options.transfer.folds, repeats, note)
              for name, fn, note in variants]
    scored[-2].note += f"; weights chosen: {_weights(chosen)}"
    scored[-1].note += f"; weights chosen: {_weights([' / '.join(f'{w:g}' for w in t) for t in per_position])}"
    return Study(scored, [metric.name for metric in METRICS], BASELINE, options.transfer.folds, repeats, groups)


def _weights(chosen: Sequence[float | str]) -> str:
    values, counts = np.unique(np.asarray(chosen), return_counts=True)
    return ", ".join(f"{v:g} ×{c}" if not isinstance(v, str) else f"{v} ×{c}" for v, c in zip(values.tolist(), counts))


# ---------------------------------------------------------------- ranking


def rank_tasks(train_dir: str | Path, queries_dir: str | Path, out: str | Path,
               tasks_csv: str | Path | None = None, options: ModelretAOptions = ModelretAOptions()) -> str:
    """`engine modelret-a --queries`: rank every candidate model for every query task, write a TREC run.

    `guarded` (default) blends the view ensemble (LTR over candidate features, given them) with the average
    rank, the weight by CV inside the training tasks; `ensemble` and `ltr` use fixed params; `blend` chooses the
    blend and params by leave-one-out; logme/hscore/knn/linear rank by the candidates' own features on the
    query task. Returns a one-line summary.
    """
    train_dir = Path(train_dir)
    tasks_csv = Path(tasks_csv) if tasks_csv else train_dir / "tasks.csv"
    names = parse_views(options.views)
    training = read_training(train_dir, tasks_csv)
    queries = read_query_tasks(queries_dir, tasks_csv)  # before the model loads: a bad query folder fails fast
    models = candidate_models(options, train_dir)
    encoder = encoding.text_encoder(options.model)
    key = training_store.signature(training_inputs(train_dir, tasks_csv), _settings(options, encoder))
    side = training_store.load(TASK, options.name, options.root, key)
    if side is None:
        side = store_training(training, options, key, encoder)
    reference = (side.arrays["stats_mean"], side.arrays["stats_std"])
    query_views, _ = embed_views(queries, options.model, options.sample, stats_reference=reference, encoder=encoder)
    query_ids = [q.task_id for q in queries]
    params = options.transfer.fixed(FIXED)
    n, q = len(side.query_ids), len(queries)
    train, new = unit_views(side.embeddings), unit_views(query_views)
    data = Rows({v: np.concatenate([train[v], new[v]]) for v in VIEWS}, side.scores, side.grades,
                model_descriptors(train_dir, side.candidate_ids), side.arrays["model_rank"])
    tr, te = np.arange(n), np.arange(n, n + q)
    if options.method in FEATURE_METHODS:
        mats = score_matrices(queries, models, options, side.candidate_ids)
        predictions = score_ranking(mats[options.method], data.baseline(tr, te))
        how = f"{options.method} of each candidate's features ({options.features.pooling}-pooled)"
    elif options.method in ("ensemble", "ltr", "guarded", "guarded-ranking"):
        if models is not None and options.method != "ensemble":
            training = training or read_training(train_dir, tasks_csv)
            mats = score_matrices(list(training.tasks) + list(queries), models, options, side.candidate_ids)
            data.extra = feature_block(mats)
        if options.method == "ensemble":
            predictions = data.ensemble(names, params)(tr, te)
            how = f"mean of views {'+'.join(names)}, {params}"
        elif options.method == "ltr":
            predictions = data.ltr(params, True)(tr, te)
            how = f"LambdaRank over all views' transfer features{' and candidate features' * (models is not None)}"
        elif options.method == "guarded-ranking":
            chosen: list[float] = []
            predictions = data.guarded(names, params, chosen)(tr, te)
            how = f"weight {chosen[0]:g} on {'LTR' if models is not None else 'the view ensemble'}, the rest on " \
                  f"the average rank ({baseline_blend.RULE})"
        else:
            bands: list[tuple[float, ...]] = []
            predictions = data.guarded_positions(names, params, bands)(tr, te)
            how = f"weights {' / '.join(f'{w:g}' for w in bands[0])} (positions 1, 2–3, 4–) on " \
                  f"{'LTR' if models is not None else 'the view ensemble'}, the rest on the average rank " \
                  f"({baseline_blend.RULE}, per metric)"
    else:
        candidates = blends(side.embeddings, names, fixed=options.views is not None)
        sims = {name: emb @ emb.T for name, emb in candidates.items()}
        grid = options.transfer.grid(len(side.query_ids))
        name, tuned, value = select(sims, side.scores, objective_for(side.grades), grid)
        collection = QueryCollection(side.query_ids, side.candidate_ids, candidates[name], side.scores)
        query_emb = blend_views(query_views, {v: 1.0 for v in name.split("+")})
        predictions = collection.predict(query_emb, tuned)
        how = f"views {name}, {tuned}; leave-one-out nDCG@1/3/5 mean {value:.4f}"
    write_run(out, rankings(query_ids, side.candidate_ids, predictions), run_tag(options.run_id, options.method))
    check_written(out, "ntcir-a", query_ids, side.candidate_ids)
    return f"{len(queries)} tasks × {len(side.candidate_ids)} models → {out} ({options.method}: {how})"
