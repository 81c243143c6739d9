"""Representations, scorers and the fitted LoRA model, stored as one collection.

A query image is described by standardized style features (optionally with its content image's mean
subtracted) and scored against every LoRA by prototype cosine, a kNN vote or a logistic-regression probe,
optionally blended with a zero-shot prior from each LoRA's name and trigger words.

The adapter is the collection `ROOT/NAME` (kind "lora-adapter", vectors only: the representation is
no single encoder's output). Its main vectors are the LoRA prototypes (ids = LoRA ids, metadata = name and
trigger words), so `engine info` and `search_vectors` work on it; beside them, stored verbatim:

    prototypes                      the prototypes as fitted (scores come from these, not from the main
                                    vectors, which the store re-normalizes)
    train_embeddings, labels        per-image training embeddings (kNN) and their LoRA rows
    stats_<part>_mean / _std        standardization of each representation part
    probe_weights, probe_bias       the logistic-regression probe (probe scorer)
    text                            the LoRA prompts in the image–text space (text prior)
    image_ids                       JSON document: the training image of each embedding row
    extra                           config, image and text models, training files and counts
"""
from __future__ import annotations


import importlib
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import numpy as np

from engine.core.collection import MANIFEST, Collection, collection_path
from engine.core.encoders.base import l2_normalize
from engine.io.fusion import normalize_array
from engine.errors import EngineError, missing_extra, opt
from engine.io.options import WEIGHT, K
from engine.tasks.lora.features import FEATURES, image_text_specs

KIND = "lora-adapter"
SCORERS = ("proto", "knn", "probe", "text")
REPRESENTATIONS = ("pooled", "meanvar", "gram", "meanvar+gram", "pooled+meanvar", "pooled+meanvar+gram")


def sklearn(module: str) -> ModuleType:
    """A scikit-learn module; scikit-learn is the optional `lora` extra."""
    try:
        return importlib.import_module(f"sklearn.{module}")
    except ImportError:
        raise missing_extra("scikit-learn", "lora") from None


def text_scorer_needs_a_model() -> str:
    """The error of a text scorer without an image–text model, naming the models that would do."""
    return f"the text scorer needs an image–text model; use {opt('text_model')} {' or '.join(image_text_specs())}"


# ---------------------------------------------------------------- representations

def representation_parts(rep: str) -> list[str]:
    parts = [p.strip() for p in rep.split("+") if p.strip()]
    if not parts or any(p not in FEATURES for p in parts):
        raise EngineError(f"representation {rep!r}: join {', '.join(FEATURES)} with '+', e.g. pooled+meanvar")
    return parts


def _prepare(part: str, x: np.ndarray) -> np.ndarray:
    """Gram entries are heavy-tailed products: a signed square root (power normalization) tames them."""
    x = np.asarray(x, dtype=np.float32)
    return np.sign(x) * np.sqrt(np.abs(x)) if part == "gram" else x


def remove_content(x: np.ndarray, groups: Sequence[str | None]) -> np.ndarray:
    """Subtract, within each content image's group (two or more images), the group's mean row."""
    out = x.copy()
    members: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        if g is not None and g != "":
            members.setdefault(g, []).append(i)
    for idx in members.values():
        if len(idx) > 1:
            out[idx] -= x[idx].mean(axis=0, keepdims=True)
    return out


Stats = dict[str, tuple[np.ndarray, np.ndarray]]  # part → (mean, std) of the training rows


def represent(arrays: dict[str, np.ndarray], parts: Sequence[str], stats: Stats,
              groups: Sequence[str | None] | None) -> np.ndarray:
    """Standardize each part, remove content (with `groups`), L2-normalize parts, concatenate, normalize."""
    blocks = []
    for part in parts:
        mean, std = stats[part]
        x = (_prepare(part, arrays[part]) - mean) / std
        if groups is not None:
            x = remove_content(x, groups)
        blocks.append(l2_normalize(x))
    return l2_normalize(np.concatenate(blocks, axis=1))


def fit_stats(arrays: dict[str, np.ndarray], parts: Sequence[str]) -> Stats:
    out = {}
    for part in parts:
        x = _prepare(part, arrays[part])
        std = x.std(axis=0)
        out[part] = (x.mean(axis=0).astype(np.float32), np.where(std > 1e-6, std, 1.0).astype(np.float32))
    return out


# ---------------------------------------------------------------- scorers

def blend(image: np.ndarray | None, prior: np.ndarray | None, weight: float) -> np.ndarray:
    """Image evidence plus `weight` × the text prior, each z-scored per query (their scales differ)."""
    if image is None:
        if prior is None:
            raise EngineError("nothing to score with: no image scorer and no text prior")
        return prior
    if prior is None or weight == 0:
        return image
    return normalize_array(image, "zscore", axis=1) + weight * normalize_array(prior, "zscore", axis=1)


def knn_vote(sims: np.ndarray, labels: np.ndarray, n_classes: int, k: int, temperature: float = 0.05) -> np.ndarray:
    """Votes of the k nearest training images, weighted exp((s − s_best)/τ); a class without votes is
    ordered by its nearest image (a tiny tie-break term), so every LoRA gets a rank."""
    k = max(1, min(k, sims.shape[1]))
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    top_sims = np.take_along_axis(sims, top, axis=1)
    weights = np.exp((top_sims - top_sims.max(axis=1, keepdims=True)) / temperature)
    votes = np.zeros((sims.shape[0], n_classes), np.float64)
    np.add.at(votes, (np.repeat(np.arange(sims.shape[0]), k), labels[top].ravel()), weights.ravel())
    nearest = np.full((sims.shape[0], n_classes), -1.0)
    for c in range(n_classes):
        mask = labels == c
        if mask.any():
            nearest[:, c] = sims[:, mask].max(axis=1)
    return votes + 1e-3 * nearest


def fit_probe(x: np.ndarray, labels: np.ndarray, n_classes: int, c: float) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression; LoRAs absent from training get weights that rank them last."""
    present = np.unique(labels)
    weights = np.zeros((n_classes, x.shape[1]), np.float32)
    bias = np.full(n_classes, -1e3, np.float32)
    if len(present) == 1:
        bias[present[0]] = 0.0
        return weights, bias
    clf = sklearn("linear_model").LogisticRegression(C=c, max_iter=500, tol=1e-3)  # tol 1e-3: same ranks, ⅓ time
    clf.fit(x, labels)
    coef, icpt = clf.coef_, clf.intercept_
    if len(clf.classes_) == 2:  # sklearn keeps one row for two classes
        coef, icpt = np.vstack([-coef / 2, coef / 2]), np.array([-icpt[0] / 2, icpt[0] / 2])
    weights[clf.classes_] = coef
    bias[clf.classes_] = icpt
    return weights, bias


RANGES = {"text_weight": WEIGHT, "k": K}
"""Each `LoraConfig` number's range: its check, `submit`'s text weight and the flags of the same names."""


@dataclass(frozen=True)
class LoraConfig:
    """How a query image is scored (the options of `engine lora build`): representation, scorer, content
    removal, text-prior weight."""
    rep: str = "meanvar+gram"  # the best in benchmarks/lora_cv.py (docs/lora.md)
    scorer: str = "probe"
    content_removal: bool = True
    text_weight: float = 0.0
    k: int = 10
    probe_c: float = 10.0

    def check(self) -> "LoraConfig":
        representation_parts(self.rep)
        if self.scorer not in SCORERS:
            raise EngineError(f"scorer {self.scorer!r}: use one of {', '.join(SCORERS)}")
        for name, declared in RANGES.items():
            declared.check(name, getattr(self, name), text=False)
        return self

    @property
    def label(self) -> str:
        return (f"{self.rep} {self.scorer} content-removal={'on' if self.content_removal else 'off'} "
                f"text={self.text_weight:g}")


# ---------------------------------------------------------------- the fitted model

@dataclass
class LoraModel:
    """A fitted scorer: per-image embeddings (kNN), prototypes, probe weights and LoRA text vectors."""
    config: LoraConfig
    lora_ids: list[str]
    stats: Stats
    embeddings: np.ndarray  # (n_train, d), represented (content removed when configured)
    labels: np.ndarray  # (n_train,) index into lora_ids
    prototypes: np.ndarray  # (n_loras, d) normalized means; zero rows for LoRAs without images
    probe_weights: np.ndarray | None = None  # (n_loras, d)
    probe_bias: np.ndarray | None = None  # (n_loras,)
    text: np.ndarray | None = None  # (n_loras, joint dim) LoRA prompts in the image–text space

    @classmethod
    def fit(cls, arrays: dict[str, np.ndarray], labels: np.ndarray, groups: Sequence[str | None],
            lora_ids: Sequence[str], config: LoraConfig, text: np.ndarray | None = None) -> "LoraModel":
        config.check()
        if config.scorer == "text" and text is None:
            raise EngineError(text_scorer_needs_a_model())
        parts = representation_parts(config.rep)
        stats = fit_stats(arrays, parts)
        emb = represent(arrays, parts, stats, groups if config.content_removal else None)
        n = len(lora_ids)
        sums = np.zeros((n, emb.shape[1]), np.float64)
        np.add.at(sums, labels, emb)
        model = cls(config, list(lora_ids), stats, emb, labels.astype(np.int64), l2_normalize(sums), text=text)
        if config.scorer == "probe":
            model.probe_weights, model.probe_bias = fit_probe(emb, labels, n, config.probe_c)
        return model

    def image_scores(self, arrays: dict[str, np.ndarray], groups: Sequence[str | None] | None) -> np.ndarray | None:
        """(n_queries, n_loras) image evidence; None for the text-only scorer."""
        if self.config.scorer == "text":
            return None
        q = represent(arrays, representation_parts(self.config.rep), self.stats,
                      groups if self.config.content_removal else None)
        if self.config.scorer == "proto":
            return q @ self.prototypes.T
        if self.config.scorer == "knn":
            return knn_vote(q @ self.embeddings.T, self.labels, len(self.lora_ids), self.config.k)
        return q @ self.probe_weights.T + self.probe_bias  # type: ignore[union-attr,operator]

    def prior_scores(self, arrays: dict[str, np.ndarray]) -> np.ndarray | None:
        """Cosine of the query's image–text embedding with each LoRA's name and trigger words."""
        if self.text is None or "joint" not in arrays:
            return None
        return l2_normalize(arrays["joint"]) @ self.text.T

    def score(self, arrays: dict[str, np.ndarray], groups: Sequence[str | None] | None,
              text_weight: float | None = None) -> np.ndarray:
        weight = self.config.text_weight if text_weight is None else text_weight
        image = self.image_scores(arrays, groups)
        prior = self.prior_scores(arrays) if (weight > 0 or image is None) else None
        if image is None and prior is None:
            raise EngineError(f"{text_scorer_needs_a_model()}; rebuild the adapter with one")
        return blend(image, prior, weight)

    # ------------------------------------------------------------ stored as a collection
    def save(self, name: str, root: str | Path, loras: Sequence[dict], image_ids: Sequence[str],
             extra: dict[str, Any], force: bool = False) -> Collection:
        """The adapter as the collection `root/name` (see the module docstring); `loras` are the items'
        metadata (name, trigger words) in `lora_ids` order."""
        arrays = {"prototypes": self.prototypes, "train_embeddings": self.embeddings, "labels": self.labels}
        for part, (mean, std) in self.stats.items():
            arrays[f"stats_{part}_mean"], arrays[f"stats_{part}_std"] = mean, std
        if self.probe_weights is not None and self.probe_bias is not None:
            arrays["probe_weights"], arrays["probe_bias"] = self.probe_weights, self.probe_bias
        if self.text is not None:
            arrays["text"] = self.text
        return Collection.from_vectors(name, self.lora_ids, self.prototypes, None, KIND, root=root, meta=loras,
                                       force=force, arrays=arrays,
                                       documents={"image_ids": list(image_ids)},
                                       extra={**extra, "config": asdict(self.config)})

    @classmethod
    def load(cls, col: Collection) -> "LoraModel":
        """The model an adapter collection stores (arrays memory-mapped)."""
        try:
            config = LoraConfig(**col.extra["config"]).check()
        except (KeyError, TypeError) as exc:
            raise EngineError(f"{col.path}: damaged adapter ({type(exc).__name__}: {exc}); rebuild it with "
                              f"engine lora build ({opt('force')})") from None
        stored = set(col.stored)

        def optional(role: str) -> np.ndarray | None:
            return col.array(role) if role in stored else None

        stats = {part: (col.array(f"stats_{part}_mean"), col.array(f"stats_{part}_std"))
                 for part in representation_parts(config.rep)}
        probe = (col.array("probe_weights"), col.array("probe_bias")) if config.scorer == "probe" \
            else (optional("probe_weights"), optional("probe_bias"))
        return cls(config, col.ids, stats, col.array("train_embeddings"), col.array("labels"),
                   col.array("prototypes"), *probe, optional("text"))


def open_adapter(name: str, root: str | Path) -> Collection:
    """The adapter collection `root/name`, checked; the layout of earlier engines is named with its rebuild."""
    path = collection_path(name, root)
    if not (path / MANIFEST).is_file():
        raise EngineError(f"{path}: no LoRA adapter here; build one with engine lora build")
    col = Collection.open(name, root, verify=False)
    kind = col.manifest.get("kind")
    if kind != KIND:
        raise EngineError(f"{path}: not a LoRA adapter (a collection of kind {kind!r})")
    if "format" not in col.manifest:
        train = col.manifest.get("train")
        raise EngineError(f"{path}: a LoRA adapter of format 1 (written by an earlier engine), which this one no "
                          f"longer reads; rebuild it{f' from {train}' if train else ''} with engine lora build "
                          f"({opt('force')})")
    col.verify()
    return col
