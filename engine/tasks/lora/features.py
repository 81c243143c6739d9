"""Style statistics of EfficientNet-Lite0's intermediate feature maps, taken in the same forward pass as
its pooled embedding, and the one pass over image files that computes every feature the task uses.

A style LoRA changes colour, texture and stroke far more than what the picture shows. The pooled
embedding mostly encodes the content; the per-channel means and standard deviations of early and
middle feature maps (the statistics AdaIN transfers, Huang & Belongie 2017) and their Gram matrices
(Gatys et al. 2016) are the classic descriptors of exactly what a style changes.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from engine.core.encoders import registry
from engine.core.encoders.base import IMAGE, TEXT, Encoder
from engine.core.encoders.registry import entry_for, specs_for
from engine.errors import EngineError, opt
from engine.progress import track, warn

# model.blocks indices → channels 16, 24, 40, 80, 112, 192 at strides 2…32 (928 values of mean and std)
MEANVAR_STAGES = (0, 1, 2, 3, 4, 5)
# Gram matrices of the 24- and 40-channel stages: 300 + 820 upper-triangle values
GRAM_STAGES = (1, 2)
FEATURES = ("pooled", "meanvar", "gram")


@contextlib.contextmanager
def _capture(model, stages: tuple[int, ...]) -> Iterator[dict]:
    """Forward hooks that keep the chosen blocks' outputs and the pooled vector of the next forward."""
    store: dict = {}

    def keep(key):
        return lambda _module, _inputs, output: store.__setitem__(key, output)

    handles = [model.blocks[i].register_forward_hook(keep(i)) for i in stages]
    handles.append(model.global_pool.register_forward_hook(keep("pooled")))
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


def channel_meanvar(fmap) -> np.ndarray:
    """(B, 2C): each channel's spatial mean and standard deviation."""
    flat = fmap.flatten(2).float()
    return np.concatenate([flat.mean(2).numpy(), flat.std(2, unbiased=False).numpy()], axis=1)


def gram_upper(fmap) -> np.ndarray:
    """(B, C(C+1)/2): the upper triangle of the channel Gram matrix F Fᵀ / HW."""
    flat = fmap.flatten(2).float()
    gram = flat @ flat.transpose(1, 2) / flat.shape[2]
    rows, cols = np.triu_indices(gram.shape[1])
    return gram[:, rows, cols].numpy()


def effnet_style_features(batch, joint_fn: Callable | None = None) -> dict[str, np.ndarray]:
    """`pooled` (1280-d), `meanvar` and `gram` of an EfficientNet-preprocessed batch, in ONE forward pass.

    `joint_fn` (e.g. the conse encoder's `encode_image_batch`, which runs this same network) is the
    forward that is run; its output is returned as `joint`. Without it the plain network runs.
    """
    import torch

    from engine.core.encoders.efficientnet import load_efficientnet_lite0, pooled_and_logits
    model = load_efficientnet_lite0()
    stages = tuple(sorted(set(MEANVAR_STAGES) | set(GRAM_STAGES)))
    with torch.inference_mode(), _capture(model, stages) as store:
        joint = joint_fn(batch) if joint_fn is not None else None
        if "pooled" not in store:  # joint_fn did not run EfficientNet-Lite0
            pooled_and_logits(batch)
    out = {"pooled": store["pooled"].flatten(1).float().numpy().astype(np.float32),
           "meanvar": np.concatenate([channel_meanvar(store[i]) for i in MEANVAR_STAGES], 1).astype(np.float32),
           "gram": np.concatenate([gram_upper(store[i]) for i in GRAM_STAGES], 1).astype(np.float32)}
    if joint is not None:
        out["joint"] = np.asarray(joint, dtype=np.float32)
    return out


# ---------------------------------------------------------------- one pass over image files

@dataclass(frozen=True)
class ExtractOptions:
    """The models of the image pass and how images are fed to it (`engine lora build` and `eval`)."""
    image_model: str = "effnet"  # the pooled embedding: effnet or a CLIP model
    text_model: str = "conse"  # the image–text model of the LoRA-name prior, or "none"
    batch_size: int = 32
    workers: int = 2
    device: str = "auto"  # where the models run (engine.core.encoders.device)
    ray: str | None = None  # `engine lora build --ray`: the image pass in Ray tasks, a chunk of images each

    def check(self) -> "ExtractOptions":
        from engine.core.encoders.device import check_device
        check_device(self.device)
        return self


RAY_CHUNK = 256
"""Images per Ray task of `extract_features_on_ray` (each worker keeps its models loaded between tasks)."""


@dataclass
class Extractor:
    """Everything one pass over the images computes: pooled, meanvar, gram and the image–text `joint`."""
    image_spec: str
    joint_spec: str
    encoder: Encoder  # preprocess only: feeds engine.core.images' decode pipeline
    run: Callable[[list], dict[str, np.ndarray]]
    text: Encoder | None  # the joint space's text side (the zero-shot prior)


def is_clip(spec: str) -> bool:
    return entry_for(spec)[0].prefix == "clip"


def image_text_specs() -> list[str]:
    """The models that embed texts and images in one space: what the text prior can use."""
    return [s for s in specs_for("text") if s in specs_for("image")]


def _pooled_specs() -> list[str]:
    return [s for s in specs_for("image") if entry_for(s)[0].prefix == "effnet" or is_clip(s)]


def make_extractor(image_spec: str = ExtractOptions.image_model,
                   joint_spec: str = ExtractOptions.text_model) -> Extractor:
    """`image_spec`: effnet (offline) or a CLIP model for the pooled embedding; `joint_spec`: an image–text
    model (conse, or the same CLIP model) or none, for the text prior. Style statistics always come from
    EfficientNet-Lite0, in the same forward pass as conse's image side."""
    from engine.core.encoders.efficientnet import efficientnet_transform
    image_spec, joint_spec = image_spec.strip(), joint_spec.strip()
    wants_joint = joint_spec.lower() not in ("", "none")
    image_is_clip = is_clip(image_spec)
    if not image_is_clip and entry_for(image_spec)[0].prefix != "effnet":
        raise EngineError(f"image model {image_spec!r}: use {' or '.join(_pooled_specs())}")
    clip_specs = {s for s in (image_spec, joint_spec if wants_joint else "") if s and is_clip(s)}
    if len(clip_specs) > 1:
        raise EngineError(f"two different CLIP models ({', '.join(sorted(clip_specs))}); give the same spec as "
                          f"{opt('image_model')} and {opt('text_model')}")
    clip = registry.load_encoder(clip_specs.pop()) if clip_specs else None
    joint: Encoder | None = None
    if wants_joint:
        joint = clip if is_clip(joint_spec) else registry.load_encoder(joint_spec)
        if not {TEXT, IMAGE} <= set(joint.modalities):
            raise EngineError(f"text model {joint_spec!r} is not an image–text encoder; use "
                              f"{' or '.join(image_text_specs())}")
    shares_effnet = joint if joint is not None and joint is not clip else None  # conse
    transform = efficientnet_transform()
    if shares_effnet is not None and shares_effnet.preprocess is not transform:
        raise EngineError(f"text model {joint_spec!r} neither runs EfficientNet-Lite0 nor is the CLIP model given as "
                          f"{opt('image_model')}, so it cannot share the image pass")

    def preprocess(img):
        return transform(img), (clip.preprocess(img) if clip is not None else None)

    def run(tensors: list) -> dict[str, np.ndarray]:
        import torch
        feats = effnet_style_features(torch.stack([t[0] for t in tensors]),
                                      shares_effnet.encode_image_batch if shares_effnet is not None else None)
        if clip is not None:
            emb = clip.encode_image_batch(torch.stack([t[1] for t in tensors]))
            if image_is_clip:
                feats["pooled"] = emb
            if joint is clip:
                feats["joint"] = emb
        return feats

    feeder = Encoder(spec="lora-features", dim=0, modalities=frozenset({IMAGE}), preprocess=preprocess)
    pooled_spec = clip.spec if image_is_clip and clip is not None else registry.load_encoder(image_spec).spec
    return Extractor(pooled_spec, joint.spec if joint is not None else "none", feeder, run, joint)


@dataclass
class Features:
    arrays: dict[str, np.ndarray]  # name → (n_ok, dim), rows in `ok` order
    ok: list[int]  # positions (in the input) of the images read
    failed: list[tuple[int, str]] = field(default_factory=list)  # (position, reason)


def extract_features(extractor: Extractor, paths: Sequence[Path | None], batch_size: int = ExtractOptions.batch_size,
                     workers: int = ExtractOptions.workers, description: str = "images") -> Features:
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


def extract_features_on_ray(extractor: Extractor, paths: Sequence[Path | None],
                            batch_size: int = ExtractOptions.batch_size, workers: int = ExtractOptions.workers,
                            description: str = "images", chunk: int = RAY_CHUNK) -> Features:
    """`extract_features` with the image pass split into Ray tasks of `chunk` images (the caller holds the Ray
    session): each worker builds the extractor from its specs once and runs the same code; the features
    come back in input order, as a local pass gives them."""
    from engine.core.cluster import ray_map
    from engine.core.encoders.device import device_setting
    bounds = [(lo, min(len(paths), lo + chunk)) for lo in range(0, len(paths), chunk)]
    args = [(extractor.image_spec, extractor.joint_spec, device_setting(), [None if p is None else str(p)
             for p in paths[lo:hi]], batch_size, workers) for lo, hi in bounds]
    parts: dict[int, Features] = {}
    for n, feats in track(ray_map(_extract_chunk, args), len(bounds), f"embedding {description} on Ray"):
        parts[n] = feats
    arrays: dict[str, list[np.ndarray]] = {}
    ok: list[int] = []
    failed: list[tuple[int, str]] = []
    for n, (lo, _) in enumerate(bounds):
        f = parts.pop(n)
        for key, arr in f.arrays.items():
            arrays.setdefault(key, []).append(arr)
        ok.extend(lo + i for i in f.ok)
        failed.extend((lo + i, reason) for i, reason in f.failed)
    return Features({k: np.concatenate(v) for k, v in arrays.items()}, ok, sorted(failed))


def _extract_chunk(image_spec: str, joint_spec: str, device: str, paths: list[str | None], batch_size: int,
                   workers: int) -> Features:
    """A Ray task: one chunk's features, with the worker's cached extractor."""
    from engine.core.encoders.device import set_device
    from engine.progress import set_quiet
    set_quiet(True)
    set_device(device)
    return extract_features(_worker_extractor(image_spec, joint_spec), [None if p is None else Path(p) for p in paths],
                            batch_size, workers)


_EXTRACTORS: dict[tuple[str, str], Extractor] = {}


def _worker_extractor(image_spec: str, joint_spec: str) -> Extractor:
    key = (image_spec, joint_spec)
    if key not in _EXTRACTORS:
        _EXTRACTORS[key] = make_extractor(image_spec, joint_spec)
    return _EXTRACTORS[key]


def report_failures(failed: list[tuple[int, str]], describe: Callable[[int], str], total: int, what: str) -> None:
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
