"""The training side of transfer, stored as a collection and reused while its inputs are unchanged, so
cross-validation and ranking embed the training queries once.

    ROOT/NAME/manifest.json        extra: task, layout, signature (sha256 of the inputs' contents and the
                                   settings: model, sample size, grade map), the settings themselves
    ROOT/NAME/embeddings-G.npy     the main representation of each training query, L2-normalized
    ROOT/NAME/items-G.jsonl        {"id": training query id, ...its metadata (criticality, text)}
    ROOT/NAME/emb_<name>-G.npy     every representation exactly as computed (transfer normalizes it itself,
                                   so results from the stored arrays equal those of a fresh run)
    ROOT/NAME/scores-G.npy         training queries × candidates: the targets transfer averages (NaN: unknown)
    ROOT/NAME/grades-G.npy         training queries × candidates: the grades tuning scores with
    ROOT/NAME/candidates-G.json    the candidate ids, in column order
    ROOT/NAME/<array>-G.npy        a task's further arrays (modelret-a: stats_mean, stats_std)
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from engine.core.storage.store import generations
from engine.core.collection import MANIFEST, Collection, collection_path
from engine.errors import EngineError, opt
from engine.progress import info, warn

LAYOUT = 1
"""What a stored training side holds; one of another layout is embedded again."""
EMBEDDING_ROLE = "emb_"


@dataclass
class TrainingSide:
    """What transfer needs of the training queries: one row each in every array, one column per candidate."""
    query_ids: list[str]
    candidate_ids: list[str]
    embeddings: dict[str, np.ndarray]
    """name → (queries × dim); the first is the collection's main vectors."""
    scores: np.ndarray
    grades: np.ndarray
    meta: list[dict[str, Any]] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def signature(inputs: Mapping[str, str | Path | None], settings: Mapping[str, Any]) -> str:
    """sha256 over the contents of the input files (by role; an absent one counts as absent) and the settings."""
    digests = {role: generations.sha256(Path(p)) if p is not None and Path(p).is_file() else None
               for role, p in inputs.items()}
    record = {"layout": LAYOUT, "settings": dict(settings), "inputs": digests}
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def array_digest(array: np.ndarray) -> str:
    """Embeddings a caller gives instead of a model, as a setting of the signature."""
    a = np.ascontiguousarray(array)
    return "given:" + hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()


def _not_ours(path: Path, task: str, holds: str) -> EngineError:
    return EngineError(f"{path} holds {holds}, not a stored {task} training set; give another {opt('name')} or "
                       f"{opt('root')}, or remove the folder")


def load(task: str, name: str, root: str | Path | None, key: str) -> TrainingSide | None:
    """The training side `task` stored under root/name from the same inputs and settings (`key`, a `signature`),
    or None when it has to be embedded (again). A folder that holds anything else is an error, never overwritten."""
    path = collection_path(name, root)
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return None
    if not (path / MANIFEST).is_file():
        raise _not_ours(path, task, "no collection" if path.is_dir() else "a file")
    hint = f"remove the folder or give another {opt('name')}"
    col = Collection(path, generations.read_manifest(path, hint))
    stored_task = col.extra.get("task")
    if stored_task != task:
        raise _not_ours(path, task, f"the {stored_task} training set" if stored_task else
                        f"collection {col.name!r} ({col.manifest.get('encoder') or 'vectors only'})")
    if col.extra.get("layout") != LAYOUT or col.extra.get("signature") != key:
        info(f"the inputs or settings differ from those of the training set stored in {path}: embedding it again")
        return None
    try:
        generations.verify(path, col.manifest, "embedding the training set again")
    except EngineError as exc:
        warn(str(exc))
        return None
    info(f"reusing the training set stored in {path}")
    return _read(col)


def _read(col: Collection) -> TrainingSide:
    extra = col.extra
    return TrainingSide(
        query_ids=col.ids, candidate_ids=[str(c) for c in col.document("candidates")],
        embeddings={n: np.array(col.array(EMBEDDING_ROLE + n)) for n in extra["embeddings"]},
        scores=np.array(col.array("scores")), grades=np.array(col.array("grades")),
        meta=[{k: v for k, v in item.items() if k != "id"} for item in col.items],
        arrays={n: np.array(col.array(n)) for n in extra["arrays"]})


def save(side: TrainingSide, task: str, name: str, root: str | Path | None, key: str, encoder_spec: str | None,
         settings: Mapping[str, Any]) -> None:
    """Store `side` as collection root/name (replacing a stored training side of `task`)."""
    main = next(iter(side.embeddings))
    arrays = {**{EMBEDDING_ROLE + n: a for n, a in side.embeddings.items()},
              "scores": side.scores, "grades": side.grades, **side.arrays}
    col = Collection.from_vectors(
        name, side.query_ids, side.embeddings[main], encoder_spec, "text", root=root, meta=side.meta or None,
        force=True, arrays=arrays, documents={"candidates": list(side.candidate_ids)},
        extra={"task": task, "layout": LAYOUT, "signature": key, "embeddings": list(side.embeddings),
               "arrays": list(side.arrays), **settings})
    info(f"stored the training set in {col.path}")
