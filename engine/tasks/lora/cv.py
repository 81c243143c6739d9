"""`engine lora eval`: cross-validation grouped by content image, every configuration from one embedding pass.

Folds by content image (`engine.core.folds`, as GroupKFold assigns them; never random: the same portrait in train and test would let the content,
not the style, find the LoRA); MRR (the NTCIR-B measure), R@1 and R@5 by the project's evaluator.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.folds import fold_assignment
from engine.core.folds import splits as fold_splits
from engine.display import format_table
from engine.errors import EngineError, opt
from engine.eval.evaluate import evaluate
from engine.eval.profiles import PROFILES
from engine.io.atomic import write_json
from engine.progress import track
from engine.tasks.lora.features import ExtractOptions, make_extractor
from engine.tasks.lora.model import (REPRESENTATIONS, SCORERS, LoraConfig, LoraModel, blend, representation_parts)
from engine.tasks.lora.pipeline import load_training_set, text_vectors

PRIMARY_METRIC = PROFILES["ntcir-b"].metrics  # MRR of the one relevant LoRA
REMOVAL_MODES = {"off": (False,), "on": (True,), "both": (False, True)}


@dataclass(frozen=True)
class EvalOptions:
    """What `engine lora eval` compares; text weights may be given as the strings a user typed."""
    folds: int = 5
    reps: tuple[str, ...] = REPRESENTATIONS
    scorers: tuple[str, ...] = ("proto", "knn", "probe")
    content_removal: str = "both"  # off, on or both
    text_weights: tuple[float | str, ...] = (0.0, 0.5)

    def removals(self) -> tuple[bool, ...]:
        if self.content_removal not in REMOVAL_MODES:
            raise EngineError(f"{opt('content_removal')} {self.content_removal!r}: use off, on or both")
        return REMOVAL_MODES[self.content_removal]

    def weights(self) -> list[float]:
        """The distinct text-prior weights, ascending (none given: 0 only)."""
        out = []
        for w in self.text_weights or (0.0,):
            try:
                out.append(float(w))
            except ValueError:
                raise EngineError(f"{opt('text_weights')}: {w!r} is not a number") from None
        return sorted(set(out))

    def checked_folds(self) -> int:
        if self.folds < 2:
            raise EngineError(f"{opt('folds')} {self.folds}: cross-validation needs at least 2 folds")
        return self.folds


@dataclass
class CVResult:
    rows: list[dict]  # one per configuration: rep, scorer, content_removal, text_weight, mrr, r@1, r@5
    n_images: int
    n_loras: int
    n_contents: int
    folds: int
    image_model: str
    text_model: str


def rank_metrics(scores: np.ndarray, qids: Sequence[str], truth: Sequence[str], lora_ids: Sequence[str]) -> dict:
    """MRR, R@1, R@5 of score rows (one relevant LoRA per image), by the project's trec_eval-exact evaluator."""
    run = {q: dict(zip(lora_ids, map(float, row))) for q, row in zip(qids, scores)}
    qrels = {q: {t: 1} for q, t in zip(qids, truth)}
    means = evaluate(run, qrels, f"{PRIMARY_METRIC},recall@1,recall@5").means
    return {"mrr": means[PRIMARY_METRIC], "r@1": means["recall@1"], "r@5": means["recall@5"]}


def _check_configs(options: EvalOptions) -> tuple[list[str], list[str]]:
    reps, scorers = list(options.reps or REPRESENTATIONS), list(options.scorers or EvalOptions.scorers)
    for rep in reps:
        representation_parts(rep)
    for s in scorers:
        if s not in SCORERS or s == "text":
            raise EngineError(f"scorer {s!r}: cross-validate proto, knn or probe (text alone is always reported)")
    return reps, scorers


def cross_validate(train: str | Path, images: str | Path, models: str | Path | None = None,
                   options: EvalOptions = EvalOptions(), extract: ExtractOptions = ExtractOptions(),
                   base: LoraConfig = LoraConfig()) -> CVResult:
    """Cross-validation grouped by content image (no content image on both sides), every representation ×
    scorer × content removal × text weight from one embedding pass; plus the text prior alone."""
    removals, weights, folds = options.removals(), options.weights(), options.checked_folds()
    reps, scorers = _check_configs(options)
    extractor = make_extractor(extract.image_model, extract.text_model)
    ts = load_training_set(train, images, models, extractor, extract.batch_size, extract.workers)
    groups = ts.groups
    if any(g is None for g in groups):
        raise EngineError(f"{train}: images without a content id (content_image_id column or `train-<content>-…` "
                          "names) cannot be cross-validated by content")
    n_groups = len(set(groups))
    if n_groups < 2:
        raise EngineError(f"{train}: all images share one content image; grouped CV needs two or more")
    folds = max(2, min(folds, n_groups))
    if extractor.text is None:
        weights = [0.0]
    labels, lora_ids = ts.labels, list(ts.loras)
    text = text_vectors(extractor, ts.loras)
    qids = [im.image_id for im in ts.images]
    truth = [im.lora for im in ts.images]
    arrays = ts.features.arrays
    n = len(qids)
    configs = [(rep, scorer, removal) for rep in reps for removal in removals for scorer in scorers]
    collected: dict[tuple, np.ndarray] = {}
    prior_all = np.zeros((n, len(lora_ids)))
    splits = list(fold_splits(fold_assignment(n, folds, groups=groups)))
    steps = [(f, cfg) for f in range(len(splits)) for cfg in configs]
    for f, (rep, scorer, removal) in track(steps, len(steps), "cross-validating"):
        tr, te = splits[f]
        cfg = LoraConfig(**{**asdict(base), "rep": rep, "scorer": scorer, "content_removal": removal,
                            "text_weight": 0.0})
        model = LoraModel.fit({k: v[tr] for k, v in arrays.items()}, labels[tr], [groups[i] for i in tr],
                              lora_ids, cfg, text)
        held = {k: v[te] for k, v in arrays.items()}
        image = model.image_scores(held, [groups[i] for i in te])
        prior = model.prior_scores(held)
        if prior is not None:
            prior_all[te] = prior
        for w in weights:
            collected.setdefault((rep, scorer, removal, w), np.zeros((n, len(lora_ids))))[te] = blend(image, prior, w)
    rows = [{"representation": rep, "scorer": scorer, "content_removal": removal, "text_weight": w,
             **rank_metrics(scores, qids, truth, lora_ids)}
            for (rep, scorer, removal, w), scores in collected.items()]
    if text is not None:
        rows.append({"representation": "-", "scorer": "text", "content_removal": False, "text_weight": 1.0,
                     **rank_metrics(prior_all, qids, truth, lora_ids)})
    return CVResult(rows, n, len(lora_ids), n_groups, folds, extractor.image_spec, extractor.joint_spec)


def format_cv_table(result: CVResult, markdown: bool = False) -> str:
    """The comparison table, best MRR first (every column left-aligned, as it always was)."""
    head = ["representation", "scorer", "content removal", "text prior", "MRR", "R@1", "R@5"]
    body = [[r["representation"], r["scorer"], "on" if r["content_removal"] else "off",
             "only" if r["scorer"] == "text" else (f"{r['text_weight']:g}" if r["text_weight"] else "off"),
             f"{r['mrr']:.4f}", f"{r['r@1']:.4f}", f"{r['r@5']:.4f}"]
            for r in sorted(result.rows, key=lambda r: -r["mrr"])]
    return format_table(head, body, markdown=markdown, left=len(head))


def cv_to_json(result: CVResult) -> dict:
    return asdict(result)


def cv_report(train: str | Path, images: str | Path, models: str | Path | None = None,
              options: EvalOptions = EvalOptions(), extract: ExtractOptions = ExtractOptions(),
              out: str | Path | None = None, markdown: bool = False) -> str:
    """`engine lora eval`: cross-validate, write the JSON if asked, return the heading and the table."""
    result = cross_validate(train, images, models, options, extract)
    if out:
        write_json(out, cv_to_json(result))
    head = (f"{result.n_images} images, {result.n_loras} LoRAs, {result.n_contents} content images, "
            f"{result.folds}-fold CV grouped by content; image model {result.image_model}, text model "
            f"{result.text_model}")
    return head + "\n\n" + format_cv_table(result, markdown)
