"""The collections a server holds open, re-opened when their manifest changes.

A commit (`engine.core.storage.store.generations.commit`) writes a generation's files first and its manifest last, so a
manifest that changed names complete files; the new generation is opened and verified beside the old one,
which keeps answering until the swap, and any failure (a later commit already deleting those files) keeps
the old one and tries again on the next request. No request ever sees a half-written generation.

A generation stays readable until no request uses it: everything a request reads is loaded or memory-mapped
when the generation is opened (index, items, image files, BM25, the filter columns, and the embeddings
`id` queries and filtered searches read), so a commit that deletes the old generation's files while a request still holds it (Linux keeps an
unlinked file's mapping alive) changes nothing for that request.
"""
from __future__ import annotations

import logging
import os
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.core.collection import (
    IMAGE_FILES,
    MANIFEST,
    Collection,
    collection_path,
    list_collections,
)
from engine.errors import EngineError

log = logging.getLogger("engine.serve")


class UnknownCollection(EngineError):
    """A collection the server does not serve (the request's fault: 404)."""


@dataclass
class Served:
    """One opened generation of a collection, with what requests look up in it."""
    col: Collection
    stamp: tuple[int, int, int]
    rows: dict[str, int] = field(default_factory=dict)  # item id → row
    files: dict[str, str] = field(default_factory=dict)  # item id → the image file the build encoded
    embeddings: np.ndarray | None = None  # mapped at open: `id` queries read it after a commit deleted the file

    def vector(self, row: int) -> np.ndarray:
        """The stored vector of `row`, from this generation whatever has been committed since."""
        emb = self.embeddings if self.embeddings is not None else self.col.embeddings
        return np.asarray(emb[row], dtype=np.float32)

    @property
    def name(self) -> str:
        return self.col.path.name


def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path / MANIFEST)
    return st.st_ino, st.st_mtime_ns, st.st_size


def open_served(name: str, root: Path) -> Served:
    """Open, verify and load everything a request needs (index, items, encoder) so requests never wait on disk."""
    path = collection_path(name, root)
    stamp = _stamp(path)
    col = Collection.open(name, root, verify=True)
    col.index  # noqa: B018  (load now)
    live = col.live_mask()
    rows = {item["id"]: i for i, item in enumerate(col.items) if live is None or live[i]}  # deleted: unknown ids
    files = col.document(IMAGE_FILES) if IMAGE_FILES in col.stored else {}
    from engine.core.ranking.hybrid import pin
    pin(col)  # BM25 and the filter columns: a request never opens a file the next commit may delete
    if col.manifest.get("encoder"):
        # models are cached per process: one load, shared by every collection; text queries go through the
        # same text and image sides as `engine search` (ONNX where the encoder has them), so scores agree to the bit
        col.text_query_encoder  # noqa: B018  (first: once the whole encoder is loaded, texts would use it)
        col.image_query_encoder  # noqa: B018  (likewise: ONNX + PIL where the encoder has them)
        col.encoder  # noqa: B018
    return Served(col, stamp, rows, files, col.embeddings)


class Catalog:
    """Collections by name under one root (only `names` when given), opened on first use and kept warm."""

    def __init__(self, root: Path, names: Sequence[str] | None = None):
        self.root = Path(root)
        self.allowed = tuple(names) if names else None
        self._loaded: dict[str, Served] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._failed: dict[str, tuple[int, int, int]] = {}  # a manifest that could not be opened, until it changes
        self._guard = threading.Lock()

    def names(self) -> list[str]:
        found = list_collections(self.root)
        return [n for n in found if n in self.allowed] if self.allowed is not None else found

    def loaded(self) -> int:
        return len(self._loaded)

    def get(self, name: str) -> Served:
        """The current generation of `name`; re-opened when its manifest changed since it was loaded."""
        if any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
            raise UnknownCollection(f"no collection {name!r} on this server: a name holds no control characters")
        if self.allowed is not None and name not in self.allowed:
            raise UnknownCollection(f"no collection {name!r} on this server (serving: {', '.join(self.names())})")
        try:
            path = collection_path(name, self.root)
            stamp = _stamp(path)
        except (EngineError, OSError, ValueError):
            self._loaded.pop(name, None)
            known = ", ".join(self.names()) or "none"
            raise UnknownCollection(f"no collection {name!r} on this server (serving: {known})") from None
        served = self._loaded.get(name)
        if served is not None and (served.stamp == stamp or self._failed.get(name) == stamp):
            return served
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        if not lock.acquire(blocking=served is None):
            return served  # another request is opening the new generation; this one answers from the old
        try:
            current = self._loaded.get(name)
            if current is not None and current is not served:
                return current
            try:
                fresh = open_served(name, self.root)
            except Exception as exc:
                if served is None:
                    if isinstance(exc, EngineError):
                        raise
                    raise EngineError(f"collection {name!r} could not be opened: {type(exc).__name__}: {exc}") \
                        from None
                self._failed[name] = stamp
                log.warning("collection %s changed but could not be re-opened (%s); serving the previous "
                            "generation", name, exc)
                return served
            self._loaded[name] = fresh
            if served is not None:
                log.info("collection %s re-opened: generation %s, %d items", name,
                         fresh.col.manifest.get("generation"), len(fresh.col))
            return fresh
        finally:
            lock.release()
