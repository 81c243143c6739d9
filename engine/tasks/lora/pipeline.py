"""NTCIR-19 ModelRetrieval B: rank style LoRAs for an image they generated.

Every LoRA was run on every content portrait, so a LoRA is a style, not a subject: the adapter
describes images by pooled embeddings and feature-map style statistics (`engine.tasks.lora.features`),
can subtract the mean of the images that share a content image (what is left is the style), and
scores LoRAs by prototype cosine, a kNN vote or a logistic-regression probe, optionally blended
with a zero-shot prior from each LoRA's name and trigger words through an image–text encoder.

Layout (as the organizers ship it): `models.csv` (id, model_name, trigger_words, …), `train.csv`
(image_id, split, model_id, content_image_id, best_seed), test ids `test-<content>-<n>`, images
`<image_id>` / `<test id>.png` in one folder.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from engine.core.encoders.base import IMAGE, TEXT, Encoder, l2_normalize
from engine.errors import EngineError, where
from engine.io.atomic import write_json, write_npy
from engine.io.tables import pick_column, read_rows
from engine.progress import info, track, warn
from engine.tasks.lora.features import FEATURES, effnet_style_features

KIND = "lora-adapter"
VERSION = 1
SCORERS = ("proto", "knn", "probe", "text")
REPRESENTATIONS = ("pooled", "meanvar", "gram", "meanvar+gram", "pooled+meanvar", "pooled+meanvar+gram")
DEFAULT_IMAGE_SPEC = "effnet"
DEFAULT_JOINT_SPEC = "conse"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
_CONTENT_IN_ID = re.compile(r"^(?:test|train)-0*(\d+)-\d+", re.IGNORECASE)
_PROMPT_NOISE = re.compile(r"\[[^\]]*\]|\b(?:lora|loras|sdxl|sd1\.5|sd\s?1\.5|flux|xl|pony|v\d+(?:\.\d+)*)\b",
                           re.IGNORECASE)


# ---------------------------------------------------------------- the task's files

@dataclass(frozen=True)
class Lora:
    id: str
    name: str = ""
    trigger_words: str = ""

    @property
    def prompt(self) -> str:
        """Name and trigger words without version tags ("XL", "[FLUX+SDXL]"), for the text encoder."""
        text = ", ".join(t for t in (self.name, self.trigger_words) if t) or self.id
        clean = re.sub(r"\(\s*\)", " ", _PROMPT_NOISE.sub(" ", text))
        clean = re.sub(r"\s*-?\s*,", ",", re.sub(r"\s+", " ", clean))
        return clean.strip(" ,-") or text


@dataclass(frozen=True)
class TrainImage:
    image_id: str
    lora: str
    content: str
    line: int


def _norm_id(value: object) -> str:
    """'0007' and '7' name the same LoRA or content image."""
    text = str(value if value is not None else "").strip()
    return str(int(text)) if text.isdigit() else text


def read_models(path: str | Path) -> dict[str, Lora]:
    """LoRAs by id from models.csv (`id`, `model_name`, `trigger_words`)."""
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no LoRAs in file")
    cols = rows[0].data.keys()
    id_col = pick_column(path, cols, None, ("id", "lora_id", "model_id"), "LoRA id")
    name_col = next((c for c in ("model_name", "name") if c in cols), None)
    words_col = "trigger_words" if "trigger_words" in cols else None
    out: dict[str, Lora] = {}
    for row in rows:
        lid = _norm_id(row.data.get(id_col))
        if not lid:
            raise EngineError(f"{where(path, row.line)}: empty LoRA id")
        if lid in out:
            raise EngineError(f"{where(path, row.line)}: LoRA id {lid!r} listed twice")
        out[lid] = Lora(lid, str(row.data.get(name_col) or "").strip() if name_col else "",
                        str(row.data.get(words_col) or "").strip() if words_col else "")
    return out


def read_train(path: str | Path, loras: dict[str, Lora] | None = None) -> list[TrainImage]:
    """Labelled images from train.csv (`image_id`, `model_id`, `content_image_id`); with `loras`, an id
    models.csv does not list is an error naming the line."""
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no training images in file")
    cols = rows[0].data.keys()
    img_col = pick_column(path, cols, None, ("image_id", "image", "file"), "image id")
    lora_col = pick_column(path, cols, None, ("model_id", "lora_id", "lora"), "LoRA id")
    content_col = next((c for c in ("content_image_id", "content_id", "content") if c in cols), None)
    out: list[TrainImage] = []
    seen: dict[str, int] = {}
    for row in rows:
        image_id = str(row.data.get(img_col) or "").strip()
        lora = _norm_id(row.data.get(lora_col))
        if not image_id or not lora:
            raise EngineError(f"{where(path, row.line)}: empty image id or LoRA id")
        if image_id in seen:
            raise EngineError(f"{where(path, row.line)}: image {image_id!r} listed twice (first on line "
                              f"{seen[image_id]})")
        if loras is not None and lora not in loras:
            raise EngineError(f"{where(path, row.line)}: unknown LoRA id {lora!r} for image {image_id!r}; "
                              f"the models file lists {len(loras)} LoRAs ({', '.join(list(loras)[:5])}, …): "
                              "fix the id or pass the matching --models file")
        content = _norm_id(row.data.get(content_col)) if content_col else ""
        content = content or (content_of(image_id) or "")
        seen[image_id] = row.line
        out.append(TrainImage(image_id, lora, content, row.line))
    return out


def content_of(image_id: str) -> str | None:
    """The content image an id names (`test-<content>-<n>`, `train-<content>-<lora>`), else None."""
    m = _CONTENT_IN_ID.match(Path(image_id).name)
    return m.group(1) if m else None


def resolve_image(folder: Path, image_id: str) -> Path | None:
    """`folder/image_id`, or with a usual image suffix added (test ids come without one)."""
    direct = folder / image_id
    if direct.is_file():
        return direct
    for suffix in IMAGE_SUFFIXES:
        candidate = folder / f"{image_id}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def find_query_images(queries: str | Path, images: str | Path | None = None) -> list[tuple[str, Path | None]]:
    """(query id, image path or None when missing) from a folder of images or a list of ids/paths.

    In a list, each line is an id resolved in `images` (default: the list's folder and its `images/`)
    or a path; the id of an image file is its name without the suffix."""
    from engine.core.images import find_images
    queries = Path(queries)
    if queries.is_dir():
        found = find_images(queries)
        if not found:
            raise EngineError(f"{queries}: no images in folder")
        return [(p.stem, p) for p in found]
    from engine.io.tables import read_text_lines
    folders = [Path(images)] if images else [queries.parent, queries.parent / "images"]
    if images and not Path(images).is_dir():
        raise EngineError(f"{images}: no such folder (--images)")
    out: list[tuple[str, Path | None]] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(read_text_lines(queries), 1):
        entry = line.strip()
        if not entry or entry.startswith("#") or (n == 1 and entry.lower() in ("image_id", "id")):
            continue
        path = Path(entry) if Path(entry).suffix.lower() in IMAGE_SUFFIXES and Path(entry).is_file() else None
        qid = Path(entry).stem if path is not None else entry
        if path is None:
            path = next((p for f in folders if (p := resolve_image(f, entry)) is not None), None)
        if qid in seen:
            raise EngineError(f"{where(queries, n)}: query {qid!r} listed twice (first on line {seen[qid]})")
        seen[qid] = n
        out.append((qid, path))
    if not out:
        raise EngineError(f"{queries}: no query ids in file")
    return out


# ---------------------------------------------------------------- features

@dataclass
class Extractor:
    """Everything one pass over the images computes: pooled, meanvar, gram and the image–text `joint`."""
    image_spec: str
    joint_spec: str
    encoder: Encoder  # preprocess only: feeds engine.core.images' decode pipeline
    run: Callable[[list], dict[str, np.ndarray]]
    text: Encoder | None  # the joint space's text side (the zero-shot prior)


def make_extractor(image_spec: str = DEFAULT_IMAGE_SPEC, joint_spec: str = DEFAULT_JOINT_SPEC) -> Extractor:
    """`image_spec`: effnet (offline) or clip:ARCH:WEIGHTS for the pooled embedding; `joint_spec`: conse,
    clip:… (the same one) or none, for the text prior. Style statistics always come from EfficientNet-Lite0."""
    from engine.core.encoders import load_encoder
    from engine.core.encoders.efficientnet import efficientnet_transform
    image_spec, joint_spec = image_spec.strip(), joint_spec.strip()
    image_is_clip = image_spec.lower().startswith("clip")
    if not image_is_clip and load_encoder(image_spec).spec != "effnet:efficientnet-lite0":
        raise EngineError(f"image model {image_spec!r}: use effnet or clip:ARCH:WEIGHTS")
    clip_specs = {s for s in (image_spec, joint_spec) if s.lower().startswith("clip")}
    if len(clip_specs) > 1:
        raise EngineError(f"two different CLIP models ({', '.join(sorted(clip_specs))}); give the same spec to "
                          "--image-model and --text-model")
    clip = load_encoder(clip_specs.pop()) if clip_specs else None
    joint: Encoder | None = None
    if joint_spec.lower() not in ("", "none"):
        joint = clip if joint_spec.lower().startswith("clip") else load_encoder(joint_spec)
        if not {TEXT, IMAGE} <= set(joint.modalities):
            raise EngineError(f"text model {joint_spec!r} is not an image–text encoder; use conse or clip:ARCH:WEIGHTS")
    conse = joint if joint is not None and joint is not clip else None
    if conse is not None and conse.preprocess is not efficientnet_transform():
        raise EngineError(f"text model {joint_spec!r}: only conse or the CLIP model given as --image-model can "
                          "share the image pass")
    transform = efficientnet_transform()

    def preprocess(img):
        return transform(img), (clip.preprocess(img) if clip is not None else None)

    def run(tensors: list) -> dict[str, np.ndarray]:
        import torch
        feats = effnet_style_features(torch.stack([t[0] for t in tensors]),
                                      conse.encode_image_batch if conse is not None else None)
        if clip is not None:
            emb = clip.encode_image_batch(torch.stack([t[1] for t in tensors]))
            if image_is_clip:
                feats["pooled"] = emb
            if joint is clip:
                feats["joint"] = emb
        return feats

    feeder = Encoder(spec="lora-features", dim=0, modalities=frozenset({IMAGE}), preprocess=preprocess)
    return Extractor(clip.spec if image_is_clip and clip else "effnet:efficientnet-lite0",
                     joint.spec if joint is not None else "none", feeder, run, joint)


@dataclass
class Features:
    arrays: dict[str, np.ndarray]  # name → (n_ok, dim), rows in `ok` order
    ok: list[int]  # positions (in the input) of the images read
    failed: list[tuple[int, str]] = field(default_factory=list)  # (position, reason)


def extract_features(extractor: Extractor, paths: Sequence[Path | None], batch_size: int = 32, workers: int = 2,
                     description: str = "images") -> Features:
    """Features of every readable image; missing (None) and unreadable ones are listed in `failed`."""
    from engine.core.images import iter_image_batches
    present = [i for i, p in enumerate(paths) if p is not None]
    failed = [(i, "file not found") for i, p in enumerate(paths) if p is None]
    chunks: dict[str, list[np.ndarray]] = {}
    ok: list[int] = []
    batches = iter_image_batches(extractor.encoder, [str(paths[i]) for i in present], batch_size, workers)
    for pos, tensors, bad in track(batches, -(-len(present) // batch_size), f"embedding {description}"):
        failed.extend((present[i], reason) for i, reason in bad)
        if tensors:
            for key, arr in extractor.run(tensors).items():
                chunks.setdefault(key, []).append(arr)
            ok.extend(present[i] for i in pos)
    arrays = {k: np.concatenate(v) for k, v in chunks.items()}
    return Features(arrays, ok, sorted(failed))


def _report_failures(failed: list[tuple[int, str]], describe: Callable[[int], str], total: int,
                     what: str) -> None:
    """Warn about each unreadable image (the first few by name); most of them failing is an error."""
    if not failed:
        return
    for pos, reason in failed[:5]:
        warn(f"{describe(pos)}: {reason}; skipped")
    if len(failed) > 5:
        warn(f"… and {len(failed) - 5} more unreadable {what}")
    if len(failed) == total or len(failed) > total // 2:
        raise EngineError(f"{len(failed)} of {total} {what} are missing or unreadable (first: {describe(failed[0][0])}: "
                          f"{failed[0][1]}); is the image folder right?")


# ---------------------------------------------------------------- representations and scorers

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


def represent(arrays: dict[str, np.ndarray], parts: Sequence[str], stats: dict[str, tuple[np.ndarray, np.ndarray]],
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


def fit_stats(arrays: dict[str, np.ndarray], parts: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for part in parts:
        x = _prepare(part, arrays[part])
        std = x.std(axis=0)
        out[part] = (x.mean(axis=0).astype(np.float32), np.where(std > 1e-6, std, 1.0).astype(np.float32))
    return out


def _zscore(s: np.ndarray) -> np.ndarray:
    sd = s.std(axis=1, keepdims=True)
    return (s - s.mean(axis=1, keepdims=True)) / np.where(sd > 1e-12, sd, 1.0)


def blend(image: np.ndarray | None, prior: np.ndarray | None, weight: float) -> np.ndarray:
    """Image evidence plus `weight` × the text prior, each standardized per query (their scales differ)."""
    if image is None:
        if prior is None:
            raise EngineError("nothing to score with: no image scorer and no text prior")
        return prior
    if prior is None or weight == 0:
        return image
    return _zscore(image) + weight * _zscore(prior)


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


@dataclass(frozen=True)
class LoraConfig:
    """How a query image is scored: representation, scorer, content removal, text-prior weight."""
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
        if self.text_weight < 0:
            raise EngineError(f"text weight {self.text_weight} must be >= 0")
        if self.k < 1:
            raise EngineError(f"k = {self.k}: kNN needs k >= 1")
        return self

    @property
    def label(self) -> str:
        return (f"{self.rep} {self.scorer} content-removal={'on' if self.content_removal else 'off'} "
                f"text={self.text_weight:g}")


@dataclass
class LoraModel:
    """A fitted scorer: per-image embeddings (kNN), prototypes, probe weights and LoRA text vectors."""
    config: LoraConfig
    lora_ids: list[str]
    stats: dict[str, tuple[np.ndarray, np.ndarray]]
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
        parts = representation_parts(config.rep)
        stats = fit_stats(arrays, parts)
        emb = represent(arrays, parts, stats, groups if config.content_removal else None)
        n = len(lora_ids)
        sums = np.zeros((n, emb.shape[1]), np.float64)
        np.add.at(sums, labels, emb)
        protos = l2_normalize(sums)
        model = cls(config, list(lora_ids), stats, emb, labels.astype(np.int64), protos, text=text)
        if config.scorer == "probe":
            model.probe_weights, model.probe_bias = _fit_probe(emb, labels, n, config.probe_c)
        if config.scorer == "text" and text is None:
            raise EngineError("the text scorer needs an image–text model (--text-model conse or clip:…)")
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
            raise EngineError("the text scorer needs image–text embeddings; rebuild with --text-model conse")
        return blend(image, prior, weight)

    # ------------------------------------------------------------ on disk
    def save(self, folder: Path, manifest: dict) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        write_npy(folder / "embeddings.npy", self.embeddings)
        write_npy(folder / "labels.npy", self.labels)
        write_npy(folder / "prototypes.npy", self.prototypes)
        for part, (mean, std) in self.stats.items():
            write_npy(folder / f"stats-{part}-mean.npy", mean)
            write_npy(folder / f"stats-{part}-std.npy", std)
        if self.probe_weights is not None:
            write_npy(folder / "probe-weights.npy", self.probe_weights)
            write_npy(folder / "probe-bias.npy", self.probe_bias)  # type: ignore[arg-type]
        if self.text is not None:
            write_npy(folder / "text.npy", self.text)
        write_json(folder / "manifest.json", {**manifest, "kind": KIND, "version": VERSION,
                                              "config": asdict(self.config), "lora_ids": self.lora_ids})

    @classmethod
    def load(cls, folder: Path) -> tuple["LoraModel", dict]:
        import json
        path = folder / "manifest.json"
        if not path.is_file():
            raise EngineError(f"{folder}: no LoRA adapter here (no manifest.json); build one with `engine lora build`")
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            if manifest.get("kind") != KIND:
                raise EngineError(f"{path}: not a LoRA adapter (kind {manifest.get('kind')!r})")
            config = LoraConfig(**manifest["config"]).check()

            def arr(name: str, required: bool = True) -> np.ndarray | None:
                p = folder / name
                if not p.is_file():
                    if required:
                        raise EngineError(f"{p}: missing; rebuild the adapter with `engine lora build`")
                    return None
                return np.load(p)

            stats = {part: (arr(f"stats-{part}-mean.npy"), arr(f"stats-{part}-std.npy"))
                     for part in representation_parts(config.rep)}
            model = cls(config, list(manifest["lora_ids"]), stats, arr("embeddings.npy"), arr("labels.npy"),
                        arr("prototypes.npy"), arr("probe-weights.npy", config.scorer == "probe"),
                        arr("probe-bias.npy", config.scorer == "probe"), arr("text.npy", False))
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
            raise EngineError(f"{path}: damaged adapter ({type(exc).__name__}: {exc}); rebuild it") from None
        return model, manifest


def _fit_probe(x: np.ndarray, labels: np.ndarray, n_classes: int, c: float) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression; LoRAs absent from training get weights that rank them last."""
    from sklearn.linear_model import LogisticRegression
    present = np.unique(labels)
    weights = np.zeros((n_classes, x.shape[1]), np.float32)
    bias = np.full(n_classes, -1e3, np.float32)
    if len(present) == 1:
        bias[present[0]] = 0.0
        return weights, bias
    clf = LogisticRegression(C=c, max_iter=500, tol=1e-3)  # tol 1e-3: same ranks at a third of the time
    clf.fit(x, labels)
    coef, icpt = clf.coef_, clf.intercept_
    if len(clf.classes_) == 2:  # sklearn keeps one row for two classes
        coef, icpt = np.vstack([-coef / 2, coef / 2]), np.array([-icpt[0] / 2, icpt[0] / 2])
    weights[clf.classes_] = coef
    bias[clf.classes_] = icpt
    return weights, bias


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
                      batch_size: int = 32, workers: int = 2) -> TrainingSet:
    """Read the labels, embed the images (missing or corrupt ones are reported and skipped)."""
    images = Path(images)
    if not images.is_dir():
        raise EngineError(f"{images}: no such folder (--images)")
    loras = read_models(models) if models else None
    rows = read_train(train, loras)
    if loras is None:
        loras = {lid: Lora(lid) for lid in sorted({r.lora for r in rows}, key=_id_key)}
    paths = [resolve_image(images, r.image_id) for r in rows]
    info(f"{len(rows)} training images of {len({r.lora for r in rows})} LoRAs from {train}")
    feats = extract_features(extractor, paths, batch_size, workers, "training images")
    _report_failures(feats.failed, lambda i: f"{where(train, rows[i].line)}: image {images / rows[i].image_id}",
                     len(rows), "training images")
    kept = [rows[i] for i in feats.ok]
    empty = [lid for lid in loras if lid not in {r.lora for r in kept}]
    if empty:
        raise EngineError(f"LoRA {empty[0]} has no readable training image in {train}"
                          + (f" (nor {len(empty) - 1} more LoRAs)" if len(empty) > 1 else "")
                          + "; add its images or drop it from models.csv")
    return TrainingSet(loras, kept, feats)


def _id_key(lid: str) -> tuple:
    return (0, int(lid), "") if lid.isdigit() else (1, 0, lid)


def _text_vectors(extractor: Extractor, loras: dict[str, Lora]) -> np.ndarray | None:
    if extractor.text is None:
        return None
    return extractor.text.encode_texts([lora.prompt for lora in loras.values()])


# ---------------------------------------------------------------- build / submit / eval

def adapter_folder(name: str, root: str | Path) -> Path:
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise EngineError(f"adapter name {name!r}: use a plain folder name")
    return Path(root) / name


def build_adapter(train: str | Path, images: str | Path, models: str | Path | None = None, name: str = "lora",
                  root: str | Path = "indexes", config: LoraConfig = LoraConfig(),
                  image_spec: str = DEFAULT_IMAGE_SPEC, joint_spec: str = DEFAULT_JOINT_SPEC,
                  batch_size: int = 32, workers: int = 2) -> Path:
    """Embed the training images, fit prototypes (and the probe), store all under `root/name`."""
    config.check()
    folder = adapter_folder(name, root)
    extractor = make_extractor(image_spec, joint_spec)
    if config.scorer == "text" and extractor.text is None:
        raise EngineError("the text scorer needs an image–text model; use --text-model conse or clip:…")
    ts = load_training_set(train, images, models, extractor, batch_size, workers)
    model = LoraModel.fit(ts.features.arrays, ts.labels, ts.groups, list(ts.loras), config,
                          _text_vectors(extractor, ts.loras))
    model.save(folder, {"image_model": extractor.image_spec, "text_model": extractor.joint_spec,
                        "train": str(train), "images": str(images), "n_images": len(ts.images),
                        "n_skipped": len(ts.features.failed),
                        "loras": [asdict(lora) for lora in ts.loras.values()],
                        "image_ids": [im.image_id for im in ts.images]})
    info(f"LoRA adapter {folder}: {len(ts.loras)} LoRAs, {len(ts.images)} images, {config.label}")
    return folder


@dataclass
class SubmitReport:
    out: Path
    n_queries: int
    n_skipped: int
    n_lines: int


def submit_run(queries: str | Path, out: str | Path, name: str = "lora", root: str | Path = "indexes",
               images: str | Path | None = None, run_id: str = "engine-lora", text_weight: float | None = None,
               batch_size: int = 32, workers: int = 2) -> SubmitReport:
    """Rank every LoRA for every query image and write a TREC run (`image_id Q0 lora_id rank score runid`)."""
    from engine.eval.runs import write_run
    model, manifest = LoraModel.load(adapter_folder(name, root))
    if text_weight is not None and text_weight < 0:
        raise EngineError(f"text weight {text_weight} must be >= 0")
    items = find_query_images(queries, images)
    extractor = make_extractor(manifest["image_model"], manifest["text_model"])
    feats = extract_features(extractor, [p for _, p in items], batch_size, workers, "query images")
    _report_failures(feats.failed, lambda i: f"query {items[i][0]} ({items[i][1] or 'no image file'})",
                     len(items), "query images")
    qids = [items[i][0] for i in feats.ok]
    groups = [content_of(q) for q in qids]
    if model.config.content_removal:
        sizes = Counter(groups)
        lone = [q for q, g in zip(qids, groups) if g is None or sizes[g] < 2]
        if lone:
            warn(f"{len(lone)} quer{'y has' if len(lone) == 1 else 'ies have'} no content group "
                 f"(id not `test-<content>-<n>` or alone in its group: {', '.join(lone[:3])}); "
                 "they are scored without content removal")
    scores = model.score(feats.arrays, groups, text_weight)
    order = np.argsort(-scores, axis=1, kind="stable")
    rankings = {q: [(model.lora_ids[j], float(scores[r, j])) for j in order[r]] for r, q in enumerate(qids)}
    n = write_run(out, rankings, run_id)
    info(f"wrote {out}: {len(qids)} queries × {len(model.lora_ids)} LoRAs")
    return SubmitReport(Path(out), len(qids), len(feats.failed), n)


@dataclass
class CVResult:
    rows: list[dict]  # one per configuration: rep, scorer, content_removal, text_weight, mrr, r@1, r@5
    n_images: int
    n_loras: int
    n_contents: int
    folds: int
    image_model: str
    text_model: str


CV_METRICS = "mrr,recall@1,recall@5"


def rank_metrics(scores: np.ndarray, qids: Sequence[str], truth: Sequence[str], lora_ids: Sequence[str]) -> dict:
    """MRR, R@1, R@5 of score rows (one relevant LoRA per image), by the project's trec_eval-exact evaluator."""
    from engine.eval.evaluate import evaluate
    run = {q: dict(zip(lora_ids, map(float, row))) for q, row in zip(qids, scores)}
    qrels = {q: {t: 1} for q, t in zip(qids, truth)}
    means = evaluate(run, qrels, CV_METRICS).means
    return {"mrr": means["mrr"], "r@1": means["recall@1"], "r@5": means["recall@5"]}


def cross_validate(train: str | Path, images: str | Path, models: str | Path | None = None, folds: int = 5,
                   reps: Iterable[str] = REPRESENTATIONS, scorers: Iterable[str] = ("proto", "knn", "probe"),
                   removals: Iterable[bool] = (False, True), text_weights: Iterable[float] = (0.0, 0.5),
                   image_spec: str = DEFAULT_IMAGE_SPEC, joint_spec: str = DEFAULT_JOINT_SPEC,
                   batch_size: int = 32, workers: int = 2, base: LoraConfig = LoraConfig()) -> CVResult:
    """Cross-validation grouped by content image (GroupKFold: no content image on both sides), every
    representation × scorer × content removal × text weight from one embedding pass; plus text alone."""
    from sklearn.model_selection import GroupKFold
    reps, scorers, removals = list(reps), list(scorers), list(removals)
    weights = sorted(set(float(w) for w in text_weights))
    for rep in reps:
        representation_parts(rep)
    for s in scorers:
        if s not in SCORERS or s == "text":
            raise EngineError(f"scorer {s!r}: cross-validate proto, knn or probe (text alone is always reported)")
    extractor = make_extractor(image_spec, joint_spec)
    ts = load_training_set(train, images, models, extractor, batch_size, workers)
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
    text = _text_vectors(extractor, ts.loras)
    qids = [im.image_id for im in ts.images]
    truth = [im.lora for im in ts.images]
    arrays = ts.features.arrays
    n = len(qids)
    configs = [(rep, scorer, removal) for rep in reps for removal in removals for scorer in scorers]
    collected: dict[tuple, np.ndarray] = {}
    prior_all = np.zeros((n, len(lora_ids)))
    splits = list(GroupKFold(n_splits=folds).split(np.zeros(n), groups=groups))
    steps = [(f, cfg) for f in range(len(splits)) for cfg in configs]
    for f, (rep, scorer, removal) in track(steps, len(steps), "cross-validating"):
        tr, te = splits[f]
        sub = {k: v[tr] for k, v in arrays.items()}
        held = {k: v[te] for k, v in arrays.items()}
        cfg = LoraConfig(**{**asdict(base), "rep": rep, "scorer": scorer, "content_removal": removal,
                            "text_weight": 0.0})
        model = LoraModel.fit(sub, labels[tr], [groups[i] for i in tr], lora_ids, cfg, text)
        image = model.image_scores(held, [groups[i] for i in te])
        prior = model.prior_scores(held)
        if prior is not None:
            prior_all[te] = prior
        for w in weights:
            collected.setdefault((rep, scorer, removal, w), np.zeros((n, len(lora_ids))))[te] = blend(image, prior, w)
    rows = []
    for (rep, scorer, removal, w), scores in collected.items():
        rows.append({"representation": rep, "scorer": scorer, "content_removal": removal, "text_weight": w,
                     **rank_metrics(scores, qids, truth, lora_ids)})
    if text is not None:
        rows.append({"representation": "-", "scorer": "text", "content_removal": False, "text_weight": 1.0,
                     **rank_metrics(prior_all, qids, truth, lora_ids)})
    return CVResult(rows, n, len(lora_ids), n_groups, folds, extractor.image_spec, extractor.joint_spec)


def format_cv_table(result: CVResult, markdown: bool = False) -> str:
    """The comparison table, best MRR first."""
    head = ["representation", "scorer", "content removal", "text prior", "MRR", "R@1", "R@5"]
    body = [[r["representation"], r["scorer"], "on" if r["content_removal"] else "off",
             "only" if r["scorer"] == "text" else (f"{r['text_weight']:g}" if r["text_weight"] else "off"),
             f"{r['mrr']:.4f}", f"{r['r@1']:.4f}", f"{r['r@5']:.4f}"]
            for r in sorted(result.rows, key=lambda r: -r["mrr"])]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body])


def cv_to_json(result: CVResult) -> dict:
    return asdict(result)


def cv_table_command(train: str | Path, images: str | Path, models: str | Path | None, folds: int,
                     reps: Sequence[str], scorers: Sequence[str], content_removal: str, text_weights: Sequence[str],
                     image_spec: str, joint_spec: str, out: str | Path | None = None, markdown: bool = False,
                     batch_size: int = 32, workers: int = 2) -> str:
    """`engine lora eval`: parse the option strings, cross-validate, write JSON if asked, return the table."""
    modes = {"off": (False,), "on": (True,), "both": (False, True)}
    if content_removal not in modes:
        raise EngineError(f"--content-removal {content_removal!r}: use off, on or both")
    weights = []
    for w in text_weights:
        try:
            weights.append(float(w))
        except ValueError:
            raise EngineError(f"--text-weights: {w!r} is not a number") from None
    if folds < 2:
        raise EngineError(f"--folds {folds}: cross-validation needs at least 2 folds")
    result = cross_validate(train, images, models, folds, reps or REPRESENTATIONS, scorers or ("proto", "knn", "probe"),
                            modes[content_removal], weights, image_spec, joint_spec, batch_size, workers)
    if out:
        write_json(out, cv_to_json(result))
    head = (f"{result.n_images} images, {result.n_loras} LoRAs, {result.n_contents} content images, "
            f"{result.folds}-fold CV grouped by content; image model {result.image_model}, text model "
            f"{result.text_model}")
    return head + "\n\n" + format_cv_table(result, markdown)
