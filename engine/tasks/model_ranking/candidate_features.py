"""The candidates' own features of a task: each candidate model (a Hugging Face name, or DIR/<name> offline)
embeds the task's labelled training texts once — mean-pooled last layer and [CLS] — and the arrays are cached
per (task, model) as a collection, so a rerun loads them instead of running any model.

    ROOT/NAME-features/<task>--<model id>/   a collection: main vectors = the mean-pooled features (normalized);
        mean-G.npy, cls-G.npy                 texts × hidden size, exactly as computed (float32)
        labels-G.npy                          the texts' class codes (0..C−1, classes sorted by name)
        manifest extra: signature (sha256 of the texts, labels, model name and source, --max-texts, --max-length)
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from engine.core.collection import MANIFEST, Collection
from engine.core.encoders.device import check_device
from engine.errors import EngineError, opt
from engine.progress import info, track
from engine.io.options import RANGES
from engine.tasks.model_ranking.data import Task, read_models, sample_indices

POOLINGS = ("mean", "cls")
MAX_TEXTS = (int(RANGES["max_texts"].lo), int(RANGES["max_texts"].hi))  # declared once, in the option layer
MAX_LENGTH = (int(RANGES["max_length"].lo), int(RANGES["max_length"].hi))
BATCH = 32
Features = Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray]]
"""(task id, model id) → (features: texts × dim, class codes per text)."""


@dataclass(frozen=True)
class FeatureOptions:
    """Where the candidates come from and how much of each task they embed (`engine modelret-a --candidates`)."""
    candidates: Path | None = None
    """models.csv (model_id, model_name): the candidates to load; None: no candidate features."""
    checkpoints: Path | None = None
    """a folder holding each candidate as DIR/<model_name> (offline); None: load by Hugging Face name."""
    device: str = "auto"
    max_texts: int = 256
    """labelled training texts embedded per task (a fixed sample per task)."""
    max_length: int = 128
    """tokens per text."""
    pooling: str = "mean"
    """which stored features the scores use (both are stored)."""

    def __post_init__(self) -> None:
        for flag, value, (lo, hi) in (("max_texts", self.max_texts, MAX_TEXTS),
                                      ("max_length", self.max_length, MAX_LENGTH)):
            if not lo <= value <= hi:
                raise EngineError(f"{opt(flag)} must be within {lo}..{hi}, not {value}")
        check_device(self.device)
        if self.pooling not in POOLINGS:
            raise EngineError(f"pooling must be one of {', '.join(POOLINGS)}, not {self.pooling!r}")
        if self.candidates is not None and not Path(self.candidates).is_file():
            raise EngineError(f"{opt('candidates')} {self.candidates}: no such file (models.csv: model_id, model_name)")
        if self.checkpoints is not None and not Path(self.checkpoints).is_dir():
            raise EngineError(f"{opt('checkpoints')} {self.checkpoints}: no such folder (DIR/<model_name>/ per "
                              "candidate)")


def read_candidates(options: FeatureOptions) -> dict[str, str]:
    """model id → name from `--candidates`; with `--checkpoints`, every DIR/<name> must exist (checked before
    any model loads)."""
    models = read_models(options.candidates)
    if options.checkpoints is not None:
        for mid, name in models.items():
            if not (Path(options.checkpoints) / name).is_dir():
                raise EngineError(f"{opt('checkpoints')}: no folder {Path(options.checkpoints) / name} for model "
                                  f"{mid} ({name}) of {options.candidates}")
    return models


def _source(name: str, options: FeatureOptions) -> str:
    return str(Path(options.checkpoints) / name) if options.checkpoints is not None else name


def labelled_sample(task: Task, max_texts: int) -> tuple[list[str], np.ndarray]:
    """The task's fixed sample of labelled training texts and their class codes."""
    rows = [task.labelled[i] for i in sample_indices(len(task.labelled), max_texts, task.task_id)]
    _, codes = np.unique([label for _, label in rows], return_inverse=True)
    return [text for text, _ in rows], codes.astype(np.int64).reshape(-1)


def _key(texts: Sequence[str], codes: np.ndarray, name: str, options: FeatureOptions) -> str:
    record = {"texts": hashlib.sha256("\x00".join(texts).encode()).hexdigest(), "labels": codes.tolist(),
              "model": name, "source": _source(name, options), "max_texts": options.max_texts,
              "max_length": options.max_length}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _cache_name(task_id: str, model_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{task_id}--{model_id}")


def _cached(root: Path, name: str, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    path = root / name
    if not (path / MANIFEST).is_file():
        return None
    col = Collection.open(name, root, verify=False)
    if col.extra.get("signature") != key:
        return None
    return tuple(np.array(col.array(a)) for a in ("mean", "cls", "labels"))  # type: ignore[return-value]


def _store(root: Path, name: str, key: str, task_id: str, model: str, mean: np.ndarray, cls: np.ndarray,
           codes: np.ndarray) -> None:
    Collection.from_vectors(name, [str(i) for i in range(len(mean))], mean, None, "text", root=root, force=True,
                            arrays={"mean": mean, "cls": cls, "labels": codes},
                            extra={"task": "modelret-a-features", "signature": key, "task_id": task_id,
                                   "model": model})


def load_model(source: str, device: str):
    """A candidate's tokenizer and encoder (fp16 on CUDA), or one line naming it when it cannot be loaded."""
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from transformers import AutoModel, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModel.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot load candidate {source!r} ({str(exc).splitlines()[0][:200]}); without a network "
                          f"give {opt('checkpoints')} DIR holding DIR/<model_name>/") from exc
    model = model.to(device).eval()
    if device.startswith("cuda"):
        model = model.half()
    return tokenizer, model


def embed(tokenizer, model, texts: Sequence[str], device: str, max_length: int, batch: int = BATCH
          ) -> tuple[np.ndarray, np.ndarray]:
    """(mean-pooled last layer over the real tokens, [CLS] = first token), texts × hidden size, float32."""
    import torch

    means, firsts = [], []
    with torch.inference_mode():
        for start in range(0, len(texts), batch):
            enc = tokenizer(list(texts[start:start + batch]), padding=True, truncation=True, max_length=max_length,
                            return_tensors="pt").to(device)
            hidden = model(**enc).last_hidden_state.float()
            mask = enc["attention_mask"].unsqueeze(-1).float()
            means.append((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0))
            firsts.append(hidden[:, 0])
    dim = model.config.hidden_size
    cat = (lambda xs: torch.cat(xs).cpu().numpy().astype(np.float32)) if texts else (
        lambda xs: np.zeros((0, dim), np.float32))
    return cat(means), cat(firsts)


def task_features(tasks: Sequence[Task], models: Mapping[str, str], options: FeatureOptions, root: Path
                  ) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(task id, model id) → (features of `options.pooling`, class codes) for every task with ≥ 2 classes
    among its sampled texts; cached under `root` (a model is loaded only when one of its tasks is missing)."""
    from engine.core.encoders.device import resolve_device

    root = Path(root)
    samples = {t.task_id: labelled_sample(t, options.max_texts) for t in tasks}
    usable = [t.task_id for t in tasks if len(np.unique(samples[t.task_id][1])) > 1]
    out: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    todo: dict[str, list[tuple[str, str]]] = {}
    for mid, name in models.items():
        for tid in usable:
            texts, codes = samples[tid]
            key, cache = _key(texts, codes, name, options), _cache_name(tid, mid)
            hit = _cached(root, cache, key)
            if hit is None:
                todo.setdefault(mid, []).append((tid, key))
            else:
                out[(tid, mid)] = (hit[POOLINGS.index(options.pooling)], hit[2])
    if todo:
        device = resolve_device(options.device)
        info(f"candidate features: {sum(map(len, todo.values()))} (task, model) pairs to embed on {device}, "
             f"{len(models) - len(todo)} model(s) fully cached")
    for mid, pairs in track(todo.items(), total=len(todo), description="candidate models"):
        tokenizer, model = load_model(_source(models[mid], options), device)
        for tid, key in pairs:
            texts, codes = samples[tid]
            mean, cls = embed(tokenizer, model, texts, device, options.max_length)
            _store(root, _cache_name(tid, mid), key, tid, models[mid], mean, cls, codes)
            out[(tid, mid)] = ((mean, cls)[POOLINGS.index(options.pooling)], codes)
        del model
    return out
