"""An opened collection folder at the store's level: its manifest checked on open (sizes and structure, no
data read), its files by role, its arrays, JSON documents and item rows. No encoder, no index: the collection
facade (`engine.core.collection`) adds those; a build reads an existing collection through this class."""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from engine.core.storage.store import generations
from engine.core.storage.store.id_index import ROLE as ID_INDEX, check_index, stored_ids  # ids → rows
from engine.core.storage.store.npy_rows import NpyRows
from engine.core.storage.store.structure import check_finite, check_structure
from engine.errors import EngineError, opt
from engine.progress import make_progress

MANIFEST = generations.MANIFEST
PARTIAL = ".partial"
DEFAULT_ROOT = Path("indexes")
TOMBSTONES = "tombstones"
"""Role of a generation: the sorted int64 rows a delete marked (every search skips them; `engine compact` or the
delete threshold rewrites the collection without them). Absent: no row is deleted."""
CORE_ROLES = ("embeddings", "items", "item_offsets", "index", "columns", TOMBSTONES, ID_INDEX)
# columns: engine.core.storage.store.columns
IMAGE_FILES = "image_files"
"""JSON document of an image collection: item id → the file that was encoded (what thumbnails are read from)."""
_ROLE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


MAX_NAME_BYTES = 255
"""The longest folder name file systems take (NAME_MAX); a longer collection name is refused, not an OSError."""


def collection_path(name: str, root: str | Path | None = None) -> Path:
    if not name or any(c in name for c in "/\\") or name.startswith("."):
        raise EngineError(f"collection name {name!r} must be a plain folder name (no slashes, not hidden)")
    if len(os.fsencode(name)) > MAX_NAME_BYTES:
        raise EngineError(f"collection name {name[:40]!r}… is {len(os.fsencode(name)):,} bytes long; a folder "
                          f"name holds at most {MAX_NAME_BYTES}")
    return Path(root if root is not None else DEFAULT_ROOT) / name


def list_collections(root: str | Path | None = None) -> list[str]:
    root = Path(root if root is not None else DEFAULT_ROOT)
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file()) if root.is_dir() else []


def rebuild_hint(name: str) -> str:
    return f"rebuild collection {name!r} ({opt('force')})"


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def check_role_names(names: Sequence[str]) -> None:
    for name in names:
        if not _ROLE_NAME.match(name) or name in CORE_ROLES:
            raise EngineError(f"stored array or file name {name!r} must be lower-case letters, digits and '_' "
                              f"and not one of {', '.join(CORE_ROLES)}")


class StoredCollection:
    """A collection's folder and manifest; every read goes through `file(role)`, which tells a generation
    replaced under an open reader from a damaged folder."""

    def __init__(self, path: Path, manifest: dict):
        self.path = path
        self.manifest = manifest
        self._items: list[dict] | None = None
        self._offsets: np.ndarray | None = None
        self._arrays: dict[str, np.ndarray] = {}
        self._live: np.ndarray | None = None

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, name: str, root: str | Path | None = None, verify: bool | None = None) -> "StoredCollection":
        """Read the manifest and `check` the files' presence and sizes (cheap at any size); `verify=True`
        also reads every byte against its checksum (`verify`); `verify=False` checks nothing (a caller that
        has just written the files, or that names an older layout itself before checking)."""
        path = collection_path(name, root)
        if not (path / MANIFEST).is_file():
            known = list_collections(root)
            hint = f"known: {', '.join(known)}" if known else "there are none yet"
            partial = " (an interrupted build is there: run the same build again to resume)" \
                if (path / PARTIAL).is_dir() else ""
            raise EngineError(f"no collection {name!r} in {path.parent}/{partial}; build it first (with "
                              f"{opt('images')} DIR or {opt('texts')} FILE) ({hint})")
        for attempt in range(3):  # a writer may publish a new generation between our reads: read it again
            manifest = generations.read_manifest(path, rebuild_hint(name))
            col = cls(path, manifest)
            try:
                if verify:
                    col.verify()
                elif verify is None:
                    col.check()
                if verify is not False:
                    check_structure(path, manifest, rebuild_hint(name))
                return col
            except (EngineError, FileNotFoundError) as exc:
                if attempt == 2 or not col._rebuilt():
                    if isinstance(exc, FileNotFoundError):
                        raise EngineError(f"{exc.filename} is missing; {rebuild_hint(name)}") from None
                    raise
        raise AssertionError("unreachable")

    def _rebuilt(self) -> bool:
        """Whether a writer has published another generation since this manifest was read."""
        try:
            return generations.read_manifest(self.path, "").get("generation") != self.manifest.get("generation")
        except EngineError:
            return False

    def check(self) -> None:
        """Structural checks that read no data (run by every open): the manifest's files exist at their sizes."""
        generations.check(self.path, self.manifest, rebuild_hint(self.name))

    def verify(self) -> None:
        """`check`, then every byte of every file against its sha256 (`engine verify NAME`), and every stored
        vector finite."""
        files = self.manifest.get("files") or {}
        total = sum(int((m or {}).get("bytes") or 0) for m in files.values()) if isinstance(files, dict) else 0
        with make_progress() as bar:
            task = bar.add_task(f"verifying {self.name}", total=total)
            generations.verify(self.path, self.manifest, rebuild_hint(self.name), lambda n: bar.advance(task, n))
        if "embeddings" in (self.manifest.get("roles") or {}):
            check_finite(self.file("embeddings"), rebuild_hint(self.name))
        self.deleted_rows  # noqa: B018  (the tombstones' shape, order and range)
        if ID_INDEX in (self.manifest.get("roles") or {}):
            check_index(self, stored_ids(self))

    # ------------------------------------------------------------------ properties
    @property
    def name(self) -> str:
        return self.manifest.get("name", self.path.name)

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    def __len__(self) -> int:
        """Rows stored (deleted rows included until a compaction: see `live_count`)."""
        return int(self.manifest["count"])

    @property
    def deleted_rows(self) -> np.ndarray:
        """The rows a delete marked (sorted int64; empty where none is), checked against the row count."""
        if TOMBSTONES not in (self.manifest.get("roles") or {}):
            return np.zeros(0, dtype=np.int64)
        rows = self.array(TOMBSTONES)
        n = len(self)
        if rows.ndim != 1 or rows.dtype.kind not in "iu" or len(rows) != int(self.manifest.get("deleted", -1)) \
                or (len(rows) and (rows[0] < 0 or rows[-1] >= n or (np.diff(rows) <= 0).any())):
            raise EngineError(f"{self.file(TOMBSTONES)}: damaged (not the manifest's {self.manifest.get('deleted')} "
                              f"sorted rows below {n}); {rebuild_hint(self.name)}")
        return np.asarray(rows, dtype=np.int64)

    @property
    def live_count(self) -> int:
        """Rows a search can return: the stored rows less the deleted ones."""
        return len(self) - int(self.manifest.get("deleted", 0) or 0)

    def live_mask(self) -> np.ndarray | None:
        """True for every row not deleted; None when no row is (searches then skip the masking)."""
        if TOMBSTONES not in (self.manifest.get("roles") or {}):
            return None
        if self._live is None:
            live = np.ones(len(self), dtype=bool)
            live[self.deleted_rows] = False
            self._live = live
        return self._live

    def live_rows(self) -> np.ndarray:
        """The rows not deleted, in order."""
        live = self.live_mask()
        return np.arange(len(self), dtype=np.int64) if live is None else np.flatnonzero(live)

    def file(self, role: str) -> Path:
        """Where a role's file (or folder) lies; an unknown role is an error naming the ones there are."""
        roles = self.manifest.get("roles", {})
        if role not in roles:
            raise EngineError(f"collection {self.name!r} in {self.path} stores no {role!r} "
                              f"(it has {', '.join(roles) or 'nothing'}); {rebuild_hint(self.name)}")
        path = self.path / roles[role]
        if not path.exists() and self._rebuilt():
            raise self._gone()
        return path

    def _gone(self) -> EngineError:
        return EngineError(f"collection {self.name!r} was rebuilt while it was open; open it again")

    @property
    def extra(self) -> dict:
        """The settings a task stored with the collection (empty for plain collections)."""
        return dict(self.manifest.get("extra") or {})

    @property
    def stored(self) -> list[str]:
        """Names of the arrays, JSON documents and folders stored beside the core files."""
        return [r for r in self.manifest.get("roles", {}) if r not in CORE_ROLES]

    def array(self, name: str) -> np.ndarray:
        """A named array, memory-mapped (read-only) once per opened generation: a generation's files never
        change (a writer publishes new names), so every later access reuses the mapping and its warm pages."""
        if name not in self._arrays:
            self._arrays[name] = np.load(self.file(name), mmap_mode="r")
        return self._arrays[name]

    def document(self, name: str) -> Any:
        """A named JSON document."""
        return json.loads(self.file(name).read_text(encoding="utf-8"))

    @property
    def embeddings(self) -> np.ndarray:
        """The stored vectors, mapped once per opened generation (`array`): the mapping outlives a commit that
        deletes the file, so a reader that has touched them keeps reading its own generation."""
        return self.array("embeddings")

    def embedding_rows(self) -> NpyRows:
        """The embeddings read block by block (no mapping kept resident): what a build copies before new rows."""
        return NpyRows.open([self.file("embeddings")])

    @property
    def items(self) -> list[dict]:
        if self._items is None:
            try:
                with open(self.file("items"), encoding="utf-8") as fh:
                    self._items = self._checked_rows([json.loads(line) for line in fh if line.strip()])
            except FileNotFoundError:
                raise self._missing("items") from None
            except (ValueError, UnicodeDecodeError) as exc:
                raise EngineError(f"{self.file('items')}: damaged ({exc}); {rebuild_hint(self.name)}") from None
        return self._items

    def _missing(self, role: str) -> EngineError:
        """A role's file gone between finding it and opening it: a commit of a rebuild (open again), or damage."""
        if self._rebuilt():
            return self._gone()
        return EngineError(f"{self.path / self.manifest.get('roles', {}).get(role, role)} is missing; "
                           f"{rebuild_hint(self.name)}")

    @property
    def ids(self) -> list[str]:
        return [it["id"] for it in self.items]

    def items_at(self, rows: Sequence[int]) -> list[dict]:
        """The items rows at these positions, reading only their lines (all rows parsed once already: from memory)."""
        if self._items is not None:
            return [self._items[int(r)] for r in rows]
        try:
            return self._checked_rows([json.loads(line) for line in self.item_lines(rows)])
        except (ValueError, UnicodeDecodeError) as exc:
            raise EngineError(f"{self.file('items')}: damaged ({exc}); {rebuild_hint(self.name)}") from None

    def item_lines(self, rows: Sequence[int]) -> list[bytes]:
        """The items rows at these positions as stored (bytes, unparsed), reading only their lines."""
        offsets = self.item_offsets()
        try:
            return generations.raw_lines(self.file("items"), offsets, rows)
        except FileNotFoundError:   # a rebuild's commit between finding the file and opening it
            raise self._missing("items") from None

    def item_offsets(self) -> np.ndarray:
        """Each items row's first byte and the file's end (mapped from the role, or found by a scan once)."""
        if self._offsets is None:
            roles = self.manifest.get("roles", {})
            role = "item_offsets" if "item_offsets" in roles else "items"
            try:
                offsets = np.load(self.file(role), mmap_mode="r") if role == "item_offsets" \
                    else generations.line_offsets(self.file("items"))
            except FileNotFoundError:   # a rebuild's commit between finding the file and opening it
                raise self._missing(role) from None
            if len(offsets) != len(self) + 1:
                raise EngineError(f"{self.file('items')} holds {len(offsets) - 1} rows, the manifest says "
                                  f"{len(self)}; {rebuild_hint(self.name)}")
            self._offsets = offsets
        return self._offsets

    def _checked_rows(self, rows: list) -> list[dict]:
        """Item rows as the store wrote them (objects with a string id); a changed byte is named, not a KeyError."""
        for row in rows:
            if not isinstance(row, dict) or not isinstance(row.get("id"), str):
                raise EngineError(f"{self.file('items')}: damaged (a row without an id: {str(row)[:60]!r}); "
                                  f"`engine verify {self.name}` checks every byte; {rebuild_hint(self.name)}")
        return rows

    def info(self, files: bool = True) -> dict[str, Any]:
        """The manifest's summary; with `files`, every file and its size (else their count and total size)."""
        m = self.manifest
        out = {k: m[k] for k in ("name", "kind", "encoder", "dim", "metric", "count", "index_factory",
                                 "search_params", "engine_version", "created", "updated") if k in m}
        if m.get("encoder"):  # the model family beside its spec (the registry's, read from the model's files)
            from engine.core.encoders.registry import family_of
            at = list(out).index("encoder") + 1
            out = dict([*list(out.items())[:at], ("family", family_of(m["encoder"])), *list(out.items())[at:]])
        out.update(self._learned_families())
        if m.get("deleted"):
            out["count"], out["deleted"] = self.live_count, int(m["deleted"])  # rows a compaction would drop
        if m.get("index_choice"):
            c = m["index_choice"]
            out["index_choice"] = {k: c.get(k) for k in ("recall@10", "speedup", "target_recall", "memory_budget",
                                                         "queries")}
        out["format"] = m.get("format", 1)
        if m.get("recall_at_10") is not None:
            out["recall_at_10"] = m["recall_at_10"]
        out["skipped"] = len(m.get("skipped", []))
        if self.stored:
            out["stored"] = self.stored
        sizes = {f: int((v or {}).get("bytes") or 0) for f, v in (m.get("files") or {}).items()}
        out["size"] = human_bytes(sum(sizes.values()))
        out["files"] = sizes if files else f"{len(sizes)} (--files lists them)"
        out["path"] = str(self.path)
        return out

    def _learned_families(self) -> dict[str, str]:
        """{role: "SPEC (family)"} of the learned indexes kept beside the vectors (their JSON's spec)."""
        from engine.core.encoders.registry import role_family
        out = {}
        for role in ("sparse", "multivector"):
            if role not in self.stored:
                continue
            try:
                spec = str(json.loads((self.file(role) / f"{role}.json").read_text(encoding="utf-8"))["spec"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a damaged role is named by the search that opens it
            out[role] = f"{spec} ({role_family(role, spec)})"
        return out


def human_bytes(n: int) -> str:
    """A size as people read it: 1.4 MB, 812 kB, 96 B (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def summaries(root: str | Path | None, names: Sequence[str]) -> list[list[str]]:
    """One row per collection for `engine list`: name, kind, items, size on disk, encoder (from the manifests:
    nothing else is read; a manifest that cannot be read says so in its row)."""
    rows = []
    for name in names:
        try:
            m = generations.read_manifest(collection_path(name, root), "")
        except EngineError as exc:
            rows.append([name, "?", "?", "?", f"unreadable: {str(exc)[:60]}"])
            continue
        size = sum(int((v or {}).get("bytes") or 0) for v in (m.get("files") or {}).values())
        rows.append([name, str(m.get("kind", "?")), f"{int(m.get('count', 0)):,}", human_bytes(size),
                     str(m.get("encoder") or "none (vectors)")])
    return rows


@dataclass(frozen=True)
class Extras:
    """What a collection stores beside its vectors: named `arrays`, JSON `documents`, folders `files` writes,
    and a task's small settings (`extra`, kept in the manifest)."""
    arrays: Mapping[str, np.ndarray] | None = None
    files: Mapping[str, generations.FileWriter] | None = None
    documents: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] | None = None

    def writers(self) -> dict[str, generations.FileWriter]:
        return role_writers(self.arrays, self.files, self.documents)


EXTRAS = ("arrays", "files", "documents", "extra")
"""The keyword options of `Collection.from_vectors` that make its `Extras`."""


def role_writers(arrays: Mapping[str, np.ndarray] | None, files: Mapping[str, generations.FileWriter] | None,
                 documents: Mapping[str, Any] | None = None) -> dict[str, generations.FileWriter]:
    """Writers for named arrays, JSON documents and folders, their role names checked."""
    writers = {**{n: generations.npy(a) for n, a in (arrays or {}).items()},
               **{n: generations.json_document(d) for n, d in (documents or {}).items()}, **(files or {})}
    check_role_names(list(writers))
    return writers


def attach_roles(stored: StoredCollection, writers: Mapping[str, generations.FileWriter],
                 extra: Mapping[str, Any] | None = None) -> None:
    """Commit more roles (and merge `extra`) as a new generation that keeps every existing file."""
    keep = {r: f for r, f in stored.manifest.get("roles", {}).items() if r not in writers}
    manifest = {**stored.manifest, "updated": now(),
                "extra": {**(stored.manifest.get("extra") or {}), **(extra or {})}}
    generations.commit(stored.path, manifest, dict(writers), keep=keep)
