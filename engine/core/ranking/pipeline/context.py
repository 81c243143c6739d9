"""What a pipeline runs in: the collections' root, the stage cache, the collections opened so far, what the
stages share (`Shared`, one typed field per kind of thing a stage computes once) and a record of each costly
stage of each run (`StageRecord`)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine.errors import EngineError

if TYPE_CHECKING:
    import numpy as np

    from engine.core.ranking.pipeline.cache import StageCache


@dataclass
class StageRecord:
    """One costly stage of a run: its text, whether its output was read from the cache, the seconds it computed
    (its own, without the stages it read), the counts it reported (`Context.note`), why its output fell
    short (`Context.degrade`; empty when it did not) and the process's CPU seconds while it computed (every
    thread's: a model's worker threads count)."""
    text: str
    cached: bool
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    degraded: list[str] = field(default_factory=list)
    cpu_seconds: float = 0.0


@dataclass
class Shared:
    """What the stages of the runs in one context compute once and share, each kind in its own field."""
    positions: dict[str, dict[str, int]] = field(default_factory=dict)
    """collection → item id → row."""
    query_vectors: dict[tuple[str, str, tuple[str, ...], str], Any] = field(default_factory=dict)
    """(encoder spec, pooling, texts, query prompt) → the texts' sentence vectors."""
    keys: dict[tuple[str, str | None], list[str]] = field(default_factory=dict)
    """(collection, group field) → each row's key: its group's value, or its id."""
    group_fields: dict[tuple[str, str | None], dict[str, dict]] = field(default_factory=dict)
    """(collection, group field) → group → what a later stage reads of its first item."""
    matrix: dict[tuple[str, str | None], "np.ndarray"] = field(default_factory=dict)
    """(collection, stored array or None for the embeddings) → the float32 matrix."""
    texts: dict[tuple[str, tuple[str, ...]], list[str]] = field(default_factory=dict)
    """(collection, text fields) → each row's stored text."""
    rerank_docs: dict[tuple[str, str | None, tuple[str, ...]], dict[str, dict]] = field(default_factory=dict)
    """(collection, group field, text fields) → id or group → what a reranker reads of it."""
    children: dict[tuple[str, str | None, str | None], dict[str, list[str]]] = field(default_factory=dict)
    """(collection, via, parent field) → parent → its live children."""
    live_ids: dict[str, set[str]] = field(default_factory=dict)
    """collection → the ids of its live rows."""
    vectors: dict[str, "np.ndarray"] = field(default_factory=dict)
    """collection → its embeddings as float32."""
    fingerprints: dict[int, str] = field(default_factory=dict)
    """stage id → the fingerprint of what computes it (model files hashed once per context, not per use)."""
    indexes: dict[tuple[str, str], Any] = field(default_factory=dict)
    """(role, collection) → a stored index loaded once (a learned sparse index, a multi-vector store)."""


@dataclass
class Context:
    """Where a pipeline runs: the collections' root, the stage cache (None: no cache), the collections opened
    so far (each opened once), what the stages share, and a record of each costly stage of each run."""
    root: str | os.PathLike | None = None
    cache: "StageCache | None" = None
    opened: dict[str, Any] = field(default_factory=dict)
    log: list[StageRecord] = field(default_factory=list)
    state: Shared = field(default_factory=Shared)
    counts: dict[int, dict[str, int]] = field(default_factory=dict)
    """What each stage reported of its own work (`note`) in the run under way, by the stage's id."""
    degraded: dict[int, list[str]] = field(default_factory=dict)
    """Why a stage's output fell short (`degrade`) in the run under way, by the stage's id."""

    def note(self, stage: Any, **counts: int) -> None:
        """Counts a stage reports about its own work in this run (`pairs_scored`, `pairs_cached`), added up."""
        mine = self.counts.setdefault(id(stage), {})
        for k, v in counts.items():
            mine[k] = mine.get(k, 0) + int(v)

    def degrade(self, stage: Any, why: str) -> None:
        """The stage's output is not what it promises (a listwise window kept in its input order, an answer
        that could not be read, a fallback): it is said, and never cached as if it had succeeded."""
        self.degraded.setdefault(id(stage), []).append(why)

    @property
    def timings(self) -> dict[str, list[float]]:
        """Seconds each costly stage computed (its own time, without the stages it read), per run."""
        out: dict[str, list[float]] = {}
        for r in self.log:
            if not r.cached:
                out.setdefault(r.text, []).append(r.seconds)
        return out

    def collection(self, name: str):
        """The collection `name` under the root; `a/b` is the collection b inside the folder a (a task's
        index, e.g. `eventa/images`)."""
        if name not in self.opened:
            from engine.core.storage.searchable import SearchableCollection
            from engine.core.storage.store.stored import DEFAULT_ROOT
            root = Path(self.root if self.root is not None else DEFAULT_ROOT)
            parts = name.rstrip("/").split("/")
            if name.startswith(("/", "\\")) or any(p in ("", ".", "..") or "\\" in p or ":" in p for p in parts):
                # a pipeline file (perhaps one a service was handed) names collections under the root only
                raise EngineError(f"collection {name!r}: a name under the collections' root (name or "
                                  "folder/name), without '..', '.', drive or absolute parts")
            parent, _, leaf = name.rstrip("/").rpartition("/")
            from engine.core.storage.store.stored import collection_path
            for part in parts[:-1]:
                collection_path(part)   # a folder name too long is refused, not an OSError
            self.opened[name] = SearchableCollection.open(leaf, root / parent if parent else root)
        return self.opened[name]

    def stored_index(self, name: str, role: str, load: Callable[[Path], Any], who: str, build_flag: str) -> Any:
        """The index the collection `name` stores as `role` (a learned sparse index, a multi-vector store),
        loaded by `load` once per context and checked against the collection's rows; `who` (the stage) and
        `build_flag` (how to build one) name what is missing when it is not there."""
        key = (role, name)
        if key not in self.state.indexes:
            col = self.collection(name)
            if role not in (col.manifest.get("roles") or {}):
                raise EngineError(f"{who}: the collection stores no {role} index; build it with {build_flag}")
            index = load(col.file(role))
            index.check_rows(col.ids, who)
            self.state.indexes[key] = index
        return self.state.indexes[key]

    def positions(self, name: str) -> dict[str, int]:
        """Item id → row of the collection `name`, built once (every stage that maps ids to rows shares it)."""
        if name not in self.state.positions:
            self.state.positions[name] = {d: i for i, d in enumerate(self.collection(name).ids)}
        return self.state.positions[name]

    def generation(self, name: str) -> str:
        """What identifies the collection's current contents (a rebuilt collection has another)."""
        m = self.collection(name).manifest
        return f"{m.get('generation', '')}:{m.get('updated', m.get('created', ''))}"
