"""NTCIR-19 ModelRetrieval B: rank style LoRAs for an image they generated — build and submit.

Every LoRA was run on every content portrait, so a LoRA is a style, not a subject: the adapter
describes images by pooled embeddings and feature-map style statistics (`features`), can subtract the
mean of the images that share a content image (what is left is the style), and scores LoRAs as
`model.LoraModel` says. `build_adapter` embeds the training images and stores the fitted model as a
collection; `submit_run` ranks every LoRA for every query image into a TREC run. Cross-validation is
in `cv`.
"""
from __future__ import annotations


from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.core.collection import DEFAULT_ROOT, MANIFEST, Collection, collection_path
from engine.core.storage.store.replaced import announce_replacement, replaced_kind
from engine.io.ranking import top_k_rows
from engine.errors import EngineError, opt, where
from engine.progress import info, warn
from engine.tasks.lora.data import (Lora, TrainImage, check_image_folder, content_of, find_query_images, loras_of,
                                    read_models, read_train, resolve_image)
from engine.tasks.lora.features import (ExtractOptions, Extractor, Features, extract_features,
                                        extract_features_on_ray, make_extractor,
                                        report_failures)
from engine.tasks.lora.model import KIND, RANGES, LoraConfig, LoraModel, open_adapter, text_scorer_needs_a_model

DEFAULT_NAME = "lora"
# the files of the layout earlier engines wrote (format 1), removed when a build replaces one
_FORMAT1_FILES = ("embeddings.npy", "labels.npy", "prototypes.npy", "probe-weights.npy", "probe-bias.npy", "text.npy")


# ---------------------------------------------------------------- the labelled training set

@dataclass
class TrainingSet:
    loras: dict[str, Lora]
    images: list[TrainImage]  # the readable ones, in feature-row order
    features: Features

    @property
    def labels(self) -> np.ndarray:
        index = {lid: i for i, lid in enumerate(self.loras)}
        return np.array([index[im.lora] for im in self.images], np.int64)

    @property
    def groups(self) -> list[str | None]:
        return [im.content or None for im in self.images]


def load_training_set(train: str | Path, images: str | Path, models: str | Path | None, extractor: Extractor,
                      batch_size: int = ExtractOptions.batch_size,
                      workers: int = ExtractOptions.workers, on_ray: bool = False) -> TrainingSet:
    """Read the labels, embed the images (missing or corrupt ones are reported and skipped)."""
    images = check_image_folder(images)
    loras = read_models(models) if models else None
    rows = read_train(train, loras)
    if loras is None:
        loras = loras_of(rows)
    paths = [resolve_image(images, r.image_id) for r in rows]
    info(f"{len(rows)} training images of {len({r.lora for r in rows})} LoRAs from {train}")
    extract = extract_features_on_ray if on_ray else extract_features
    feats = extract(extractor, paths, batch_size, workers, "training images")
    report_failures(feats.failed, lambda i: f"{where(train, rows[i].line)}: image {images / rows[i].image_id}",
                    len(rows), "training images")
    kept = [rows[i] for i in feats.ok]
    empty = [lid for lid in loras if lid not in {r.lora for r in kept}]
    if empty:
        raise EngineError(f"LoRA {empty[0]} has no readable training image in {train}"
                          + (f" (nor {len(empty) - 1} more LoRAs)" if len(empty) > 1 else "")
                          + "; add its images or drop it from models.csv")
    return TrainingSet(loras, kept, feats)


def text_vectors(extractor: Extractor, loras: dict[str, Lora]) -> np.ndarray | None:
    """Each LoRA's name and trigger words in the image–text space (None without an image–text model)."""
    if extractor.text is None:
        return None
    return extractor.text.encode_texts([lora.prompt for lora in loras.values()])


# ---------------------------------------------------------------- build

def build_adapter(train: str | Path, images: str | Path, models: str | Path | None = None,
                  name: str = DEFAULT_NAME, root: str | Path = DEFAULT_ROOT, config: LoraConfig = LoraConfig(),
                  extract: ExtractOptions = ExtractOptions(), force: bool = False) -> Collection:
    """Embed the training images, fit prototypes (and the probe), store all as the collection `root/name`."""
    config.check()
    extract.check()
    folder = collection_path(name, root)
    if (folder / MANIFEST).exists() and not force:
        kind = replaced_kind(folder)
        if kind == KIND:
            raise EngineError(f"LoRA adapter {name!r} already exists in {folder.parent}/; rebuild it with "
                              f"{opt('force')}")
        raise EngineError(f"{name!r} in {folder.parent}/ is a collection of kind {kind!r}, not a LoRA adapter; "
                          f"replace it with {opt('force')} or pick another {opt('name')}")
    if force:
        announce_replacement(folder, KIND)
    from engine.core.cluster import ray_or_here
    from engine.core.encoders.device import set_device
    set_device(extract.device)
    with ray_or_here(extract.ray):
        return _build(train, images, models, name, root, config, extract, force)


def _build(train, images, models, name: str, root, config: LoraConfig, extract: ExtractOptions,
           force: bool) -> Collection:
    folder = collection_path(name, root)
    extractor = make_extractor(extract.image_model, extract.text_model)
    if config.scorer == "text" and extractor.text is None:
        raise EngineError(text_scorer_needs_a_model())
    ts = load_training_set(train, images, models, extractor, extract.batch_size, extract.workers,
                           on_ray=extract.ray is not None)
    model = LoraModel.fit(ts.features.arrays, ts.labels, ts.groups, [lora.id for lora in ts.loras.values()], config,
                          text_vectors(extractor, ts.loras))
    col = model.save(name, root, [{"name": lora.name, "trigger_words": lora.trigger_words}
                                  for lora in ts.loras.values()],
                     [im.image_id for im in ts.images],
                     {"image_model": extractor.image_spec, "text_model": extractor.joint_spec, "train": str(train),
                      "images": str(images), "n_images": len(ts.images), "n_skipped": len(ts.features.failed)},
                     force=force)
    _remove_format1_files(folder)
    info(f"LoRA adapter {folder}: {len(ts.loras)} LoRAs, {len(ts.images)} images, {config.label}")
    return col


def _remove_format1_files(folder: Path) -> None:
    """A rebuild over an earlier engine's adapter leaves none of its files behind."""
    for path in [*(folder / n for n in _FORMAT1_FILES), *folder.glob("stats-*-mean.npy"),
                 *folder.glob("stats-*-std.npy")]:
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------- submit

@dataclass(frozen=True)
class SubmitOptions:
    """The options of `engine lora submit` (the models come from the adapter)."""
    run_id: str = "engine-lora"
    text_weight: float | None = None  # None: the adapter's own weight
    batch_size: int = ExtractOptions.batch_size
    workers: int = ExtractOptions.workers


@dataclass
class SubmitReport:
    out: Path
    n_queries: int
    n_skipped: int
    n_lines: int


def submit_run(queries: str | Path, out: str | Path, name: str = DEFAULT_NAME, root: str | Path = DEFAULT_ROOT,
               images: str | Path | None = None, options: SubmitOptions = SubmitOptions()) -> SubmitReport:
    """Rank every LoRA for every query image and write a TREC run (`image_id Q0 lora_id rank score runid`)."""
    from engine.io.runs import write_run
    from engine.eval.validate import check_written
    RANGES["text_weight"].check("text_weight", options.text_weight, text=False)
    col = open_adapter(name, root)
    model = LoraModel.load(col)
    items = find_query_images(queries, images)
    extractor = make_extractor(col.extra["image_model"], col.extra["text_model"])
    feats = extract_features(extractor, [p for _, p in items], options.batch_size, options.workers, "query images")
    report_failures(feats.failed, lambda i: f"query {items[i][0]} ({items[i][1] or 'no image file'})",
                    len(items), "query images")
    qids = [items[i][0] for i in feats.ok]
    groups = [content_of(q) for q in qids]
    if model.config.content_removal:
        _warn_lone_queries(qids, groups)
    scores = model.score(feats.arrays, groups, options.text_weight)
    order = top_k_rows(scores, len(model.lora_ids))
    rankings = {q: [(model.lora_ids[j], float(scores[r, j])) for j in order[r]] for r, q in enumerate(qids)}
    n = write_run(out, rankings, options.run_id)
    check_written(out, "ntcir-b", qids, model.lora_ids)
    info(f"wrote {out}: {len(qids)} queries × {len(model.lora_ids)} LoRAs")
    return SubmitReport(Path(out), len(qids), len(feats.failed), n)


def _warn_lone_queries(qids: list[str], groups: list[str | None]) -> None:
    """Queries without a content group (or alone in it) get no content removal: say which."""
    sizes = Counter(groups)
    lone = [q for q, g in zip(qids, groups) if g is None or sizes[g] < 2]
    if lone:
        warn(f"{len(lone)} quer{'y has' if len(lone) == 1 else 'ies have'} no content group "
             f"(id not `test-<content>-<n>` or alone in its group: {', '.join(lone[:3])}); "
             "they are scored without content removal")

