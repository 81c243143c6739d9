"""The candidates' own features of a task: each candidate model (a Hugging Face name, or DIR/<name> offline)
is loaded once and embeds every task's labelled training texts — mean-pooled last layer and [CLS] — in
padded batches of similar length across the tasks, and the arrays are cached per model as plain arrays, so a
rerun loads them instead of running any model, and a run stopped part-way keeps every model it finished.

    ROOT/NAME-features/<model id>/   written whole when the model's tasks are embedded (atomic folder)
        features.json                 model name and source; per task: signature (sha256 of the texts, labels,
                                      model name and source, --max-texts, --max-length) and its rows
        mean.npy, cls.npy             rows × hidden size, exactly as computed (float32), tasks one after another
        labels.npy                    each row's class code within its task (0..C−1, classes sorted by name)

A later run with other tasks (a CV run, then a submission) adds them to the model's folder; tasks cached with
another signature are embedded again.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from engine.core.encoders.device import check_device
from engine.errors import EngineError, opt
from engine.progress import info, track
from engine.io.options import Int
from engine.tasks.model_ranking.data import Task, read_models, sample_indices

POOLINGS = ("mean", "cls")
TEXTS = Int(2, 100_000)
"""Labelled texts per task the candidates embed (`--max-texts`, `FeatureOptions.max_texts`)."""
LENGTH = Int(8, 8192)
"""Tokens per text for the candidates (`--max-length`, `FeatureOptions.max_length`)."""
MAX_TEXTS = (int(TEXTS.lo), int(TEXTS.hi))
MAX_LENGTH = (int(LENGTH.lo), int(LENGTH.hi))
BATCH = 32
FEATURES_FILE = "features.json"
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
        TEXTS.check("max_texts", self.max_texts, text=False)
        LENGTH.check("max_length", self.max_length, text=False)
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


def _cache_name(model_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", model_id)


class ModelCache:
    """One candidate's cached features: every task it has embedded, as rows of three plain arrays."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.tasks: dict[str, dict] = {}
        self.arrays: dict[str, np.ndarray] = {}
        try:
            meta = json.loads((folder / FEATURES_FILE).read_text(encoding="utf-8"))
            arrays = {a: np.load(folder / f"{a}.npy") for a in ("mean", "cls", "labels")}
        except (OSError, ValueError):
            return  # absent or damaged: embedded again
        rows = len(arrays["labels"])
        if all(len(a) == rows for a in arrays.values()) and isinstance(meta.get("tasks"), dict) and all(
                0 <= t.get("start", -1) <= t.get("stop", -1) <= rows for t in meta["tasks"].values()):
            self.tasks, self.arrays = meta["tasks"], arrays

    def get(self, task_id: str, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(mean, cls, labels) of a task cached with this signature, else None."""
        t = self.tasks.get(task_id)
        if t is None or t.get("key") != key:
            return None
        rows = slice(t["start"], t["stop"])
        return self.arrays["mean"][rows], self.arrays["cls"][rows], self.arrays["labels"][rows]

    def write(self, model: str, source: str, new: Mapping[str, tuple[str, np.ndarray, np.ndarray, np.ndarray]]
              ) -> None:
        """The cached tasks (those not in `new`) and `new` (task id → key, mean, cls, labels) as the folder."""
        from engine.io.atomic import atomic_dir, write_json
        parts = {tid: (t["key"], *self.get(tid, t["key"])) for tid, t in self.tasks.items() if tid not in new}
        parts.update(new)
        tasks, start = {}, 0
        for tid, (key, mean, _, _) in parts.items():
            tasks[tid] = {"key": key, "start": start, "stop": start + len(mean)}
            start += len(mean)
        dim = next((p[1].shape[1] for p in parts.values() if p[1].ndim == 2), 0)
        with atomic_dir(self.folder) as tmp:
            for n, name in enumerate(("mean", "cls", "labels")):
                empty = np.zeros((0,), np.int64) if name == "labels" else np.zeros((0, dim), np.float32)
                np.save(tmp / f"{name}.npy", np.concatenate([p[n + 1] for p in parts.values()] or [empty]))
            write_json(tmp / FEATURES_FILE, {"model": model, "source": source, "tasks": tasks})
        self.__init__(self.folder)


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
    """(mean-pooled last layer over the real tokens, [CLS] = first token), texts × hidden size, float32. The
    texts go through the model in batches of similar token length (each padded to its own longest), the rows
    come back in the texts' order."""
    import torch

    dim = model.config.hidden_size
    if not texts:
        return np.zeros((0, dim), np.float32), np.zeros((0, dim), np.float32)
    lengths = [len(ids) for ids in tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]]
    order = np.argsort(lengths, kind="stable")
    means = np.empty((len(texts), dim), np.float32)
    firsts = np.empty((len(texts), dim), np.float32)
    with torch.inference_mode():
        for start in range(0, len(texts), batch):
            rows = order[start:start + batch]
            enc = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=max_length,
                            return_tensors="pt").to(device)
            hidden = model(**enc).last_hidden_state.float()
            mask = enc["attention_mask"].unsqueeze(-1).float()
            means[rows] = ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)).cpu().numpy()
            firsts[rows] = hidden[:, 0].cpu().numpy()
    return means, firsts


def task_features(tasks: Sequence[Task], models: Mapping[str, str], options: FeatureOptions, root: Path
                  ) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(task id, model id) → (features of `options.pooling`, class codes) for every task with ≥ 2 classes
    among its sampled texts; cached per model under `root` (a model is loaded only when one of its tasks is
    missing, then once for all of them)."""
    from engine.core.encoders.device import resolve_device

    root = Path(root)
    samples = {t.task_id: labelled_sample(t, options.max_texts) for t in tasks}
    usable = [t.task_id for t in tasks if len(np.unique(samples[t.task_id][1])) > 1]
    out: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    todo: dict[str, list[tuple[str, str]]] = {}
    caches: dict[str, ModelCache] = {}
    pick = POOLINGS.index(options.pooling)
    for mid, name in models.items():
        cache = caches[mid] = ModelCache(root / _cache_name(mid))
        for tid in usable:
            texts, codes = samples[tid]
            key = _key(texts, codes, name, options)
            hit = cache.get(tid, key)
            if hit is None:
                todo.setdefault(mid, []).append((tid, key))
            else:
                out[(tid, mid)] = (hit[pick], hit[2])
    if todo:
        device = resolve_device(options.device)
        info(f"candidate features: {sum(map(len, todo.values()))} (task, model) pairs to embed on {device}, "
             f"{len(models) - len(todo)} model(s) fully cached")
    for mid, pairs in track(todo.items(), total=len(todo), description="candidate models"):
        source = _source(models[mid], options)
        tokenizer, model = load_model(source, device)
        texts = [t for tid, _ in pairs for t in samples[tid][0]]
        mean, cls = embed(tokenizer, model, texts, device, options.max_length)
        new, start = {}, 0
        for tid, key in pairs:
            codes = samples[tid][1]
            stop = start + len(codes)
            new[tid] = (key, mean[start:stop], cls[start:stop], codes)
            out[(tid, mid)] = ((mean, cls)[pick][start:stop], codes)
            start = stop
        caches[mid].write(models[mid], source, new)  # this model's tasks kept, even if a later one fails
        del model
    return out
