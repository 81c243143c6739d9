"""A collection: one folder that holds everything needed to search it (see `engine.core.store`).

    indexes/NAME/manifest.json        format, encoder spec, dim, metric, count, factory, version, checksums
    indexes/NAME/embeddings-G.npy     (count, dim) float32, L2-normalized, row i = item i
    indexes/NAME/items-G.jsonl        {"id": ..., **metadata} per row, aligned with the embeddings
    indexes/NAME/index-G.faiss        the FAISS index over the same rows
    indexes/NAME/<role>-G.*           named arrays, JSON documents or folders a task keeps beside them

Tasks store every vector and matrix they need this way (`from_vectors(..., arrays=...)`, `attach`), so each
stored thing is atomic, checksummed and versioned alike; `extra` holds a task's small settings.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from engine import __version__
from engine.core import store
from engine.core.index import build_index, default_search_params, index_memory_bytes, load_index, save_index
from engine.errors import EngineError, opt
from engine.progress import make_progress

if TYPE_CHECKING:
    from engine.core.build import BuildOptions, BuildReport
    from engine.core.sources import Item

MANIFEST = store.MANIFEST
PARTIAL = ".partial"
DEFAULT_ROOT = Path("indexes")
CORE_ROLES = ("embeddings", "items", "index")
IMAGE_FILES = "image_files"
"""JSON document of an image collection: item id → the file that was encoded (what thumbnails are read from)."""
_ROLE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass
class Hit:
    id: str
    score: float
    rank: int
    meta: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"rank": self.rank, "id": self.id, "score": self.score, **({"meta": self.meta} if self.meta else {})}


def collection_path(name: str, root: str | Path | None = None) -> Path:
    if not name or any(c in name for c in "/\\") or name.startswith("."):
        raise EngineError(f"collection name {name!r} must be a plain folder name (no slashes, not hidden)")
    return Path(root if root is not None else DEFAULT_ROOT) / name


def list_collections(root: str | Path | None = None) -> list[str]:
    root = Path(root if root is not None else DEFAULT_ROOT)
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file()) if root.is_dir() else []


def rebuild_hint(name: str) -> str:
    return f"rebuild collection {name!r} ({opt('force')})"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _check_role_names(names: Sequence[str]) -> None:
    for name in names:
        if not _ROLE_NAME.match(name) or name in CORE_ROLES:
            raise EngineError(f"stored array or file name {name!r} must be lower-case letters, digits and '_' "
                              f"and not one of {', '.join(CORE_ROLES)}")


class Collection:
    """An opened collection. Encoder and index load lazily: `info` needs neither."""

    def __init__(self, path: Path, manifest: dict):
        self.path = path
        self.manifest = manifest
        self._encoder = None
        self._index = None
        self._items: list[dict] | None = None

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, name: str, root: str | Path | None = None, verify: bool = True) -> "Collection":
        path = collection_path(name, root)
        if not (path / MANIFEST).is_file():
            known = list_collections(root)
            hint = f"known: {', '.join(known)}" if known else "there are none yet"
            partial = " (an interrupted build is there: run the same build again to resume)" \
                if (path / PARTIAL).is_dir() else ""
            raise EngineError(f"no collection {name!r} in {path.parent}/{partial}; build it first (with "
                              f"{opt('images')} DIR or {opt('texts')} FILE) ({hint})")
        manifest = store.read_manifest(path, rebuild_hint(name))
        col = cls(path, manifest)
        if verify:
            col.verify()
        return col

    def verify(self) -> None:
        """Every file the manifest lists exists with its recorded size and checksum."""
        store.verify(self.path, self.manifest, rebuild_hint(self.name))

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
        return int(self.manifest["count"])

    def file(self, role: str) -> Path:
        """Where a role's file (or folder) lies; an unknown role is an error naming the ones there are."""
        roles = self.manifest.get("roles", {})
        if role not in roles:
            raise EngineError(f"collection {self.name!r} in {self.path} stores no {role!r} "
                              f"(it has {', '.join(roles) or 'nothing'}); {rebuild_hint(self.name)}")
        return self.path / roles[role]

    @property
    def extra(self) -> dict:
        """The settings a task stored with the collection (empty for plain collections)."""
        return dict(self.manifest.get("extra") or {})

    @property
    def stored(self) -> list[str]:
        """Names of the arrays, JSON documents and folders stored beside the core files."""
        return [r for r in self.manifest.get("roles", {}) if r not in CORE_ROLES]

    def array(self, name: str) -> np.ndarray:
        """A named array, memory-mapped (read-only)."""
        return np.load(self.file(name), mmap_mode="r")

    def document(self, name: str) -> Any:
        """A named JSON document."""
        return json.loads(self.file(name).read_text(encoding="utf-8"))

    @property
    def embeddings(self) -> np.ndarray:
        return np.load(self.file("embeddings"), mmap_mode="r")

    @property
    def items(self) -> list[dict]:
        if self._items is None:
            with open(self.file("items"), encoding="utf-8") as fh:
                self._items = [json.loads(line) for line in fh if line.strip()]
        return self._items

    @property
    def ids(self) -> list[str]:
        return [it["id"] for it in self.items]

    @property
    def encoder(self):
        if self._encoder is None:
            spec = self.manifest.get("encoder")
            if not spec:
                raise EngineError(f"collection {self.name!r} stores vectors made outside an encoder; search it "
                                  "with vectors (`search_vectors`)")
            from engine.core.encoders import load_encoder
            self._encoder = load_encoder(spec)
        return self._encoder

    @property
    def index(self):
        if self._index is None:
            self._index = load_index(self.file("index"), self.manifest.get("search_params"))
        return self._index

    def info(self) -> dict[str, Any]:
        m = self.manifest
        out = {k: m[k] for k in ("name", "kind", "encoder", "dim", "metric", "count", "index_factory",
                                 "search_params", "engine_version", "created", "updated") if k in m}
        out["format"] = m.get("format", 1)
        if m.get("recall_at_10") is not None:
            out["recall_at_10"] = m["recall_at_10"]
        out["skipped"] = len(m.get("skipped", []))
        if self.stored:
            out["stored"] = self.stored
        out["files"] = {f: v["bytes"] for f, v in m.get("files", {}).items()}
        out["path"] = str(self.path)
        return out

    # ------------------------------------------------------------------ searching
    def encode_queries(self, texts: Sequence[str] | None = None, images: Sequence[str] | None = None,
                       batch_size: int = 64) -> np.ndarray:
        from engine.core.encoders.registry import specs_for
        enc = self.encoder
        if texts is not None:
            if "text" not in enc.modalities:
                raise EngineError(f"collection {self.name!r} ({enc.spec}) takes image queries only; query with "
                                  f"{opt('image')}, or build it with an image–text model "
                                  f"({', '.join(s for s in specs_for('text') if s in specs_for('image'))})")
            return enc.encode_texts(list(texts), batch_size=batch_size)
        if "image" not in enc.modalities:
            raise EngineError(f"collection {self.name!r} ({enc.spec}) takes text queries only; "
                              f"search it with text, or build an image collection for image queries")
        res = enc.encode_images(list(images or []), batch_size=batch_size)
        if res.failed:
            pos, reason = res.failed[0]
            raise EngineError(f"query image {list(images)[pos]}: {reason}")
        return res.embeddings

    def search_vectors(self, queries: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Raw FAISS results: (scores, row indices), -1 where fewer than k."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if queries.shape[1] != self.dim:
            raise EngineError(f"query vectors are {queries.shape[1]}-d, collection {self.name!r} is {self.dim}-d")
        return self.index.search(queries, max(1, min(k, len(self))))

    def hits(self, scores: np.ndarray, rows: np.ndarray) -> list[list[Hit]]:
        items = self.items
        out = []
        for srow, irow in zip(scores, rows):
            hits, rank = [], 0
            for s, i in zip(srow, irow):
                if i < 0:
                    continue
                rank += 1
                item = items[int(i)]
                hits.append(Hit(item["id"], float(s), rank, {k: v for k, v in item.items() if k != "id"}))
            out.append(hits)
        return out

    def search(self, text: str | None = None, image: str | None = None, k: int = 10) -> list[Hit]:
        """Top-k for one text or one image query, encoded with the collection's own encoder."""
        if (text is None) == (image is None):
            raise EngineError("give either a text query or an image query")
        q = self.encode_queries(texts=[text]) if text is not None else self.encode_queries(images=[image])
        return self.hits(*self.search_vectors(q, k))[0]

    def search_many(self, texts: Sequence[str] | None = None, images: Sequence[str] | None = None, k: int = 10,
                    batch_size: int = 64) -> list[list[Hit]]:
        """Batched search with a progress bar; one ranked list per query, in order."""
        queries = list(texts if texts is not None else images or [])
        out: list[list[Hit]] = []
        with make_progress() as bar:
            task = bar.add_task("searching", total=len(queries))
            for start in range(0, len(queries), batch_size):
                chunk = queries[start:start + batch_size]
                q = self.encode_queries(texts=chunk, batch_size=batch_size) if texts is not None \
                    else self.encode_queries(images=chunk, batch_size=batch_size)
                out.extend(self.hits(*self.search_vectors(q, k)))
                bar.advance(task, len(chunk))
        return out

    def search_to_run(self, queries: Sequence[tuple[str, str]], out: str | Path, k: int = 100,
                      run_id: str | None = None, batch_size: int = 64) -> int:
        """Search a file's worth of (qid, text) queries and write a TREC run; returns lines written."""
        from engine.eval.runs import write_run
        results = self.search_many(texts=[t for _, t in queries], k=k, batch_size=batch_size)
        rankings = {qid: [(h.id, h.score) for h in hits] for (qid, _), hits in zip(queries, results)}
        return write_run(out, rankings, run_id or self.name)

    # ------------------------------------------------------------------ writing
    @classmethod
    def build(cls, name: str, *, images: str | Path | None = None, texts: str | Path | None = None,
              items: "Sequence[Item] | None" = None, kind: str | None = None, root: str | Path | None = None,
              options: "BuildOptions | None" = None, report: "BuildReport | None" = None,
              extra: Mapping[str, Any] | None = None, **settings: Any) -> "Collection":
        """Build (or with `add`, extend) a collection by encoding a source: an image folder/table (`images`),
        a text table (`texts`), or ready `items` of a `kind` ("image": source is a path; "text": the text).
        `settings` are `BuildOptions` fields (model, index, batch_size, …); see `engine.core.build`."""
        from engine.core.build import build_collection
        return build_collection(name, images=images, texts=texts, items=items, kind=kind, root=root,
                                options=options, report=report, extra=extra, **settings)

    @classmethod
    def from_vectors(cls, name: str, ids: Sequence[str], vectors: np.ndarray, encoder_spec: str | None,
                     kind: str, root: str | Path | None = None, index: str = "Flat",
                     meta: Sequence[dict] | None = None, force: bool = False,
                     arrays: Mapping[str, np.ndarray] | None = None,
                     files: Mapping[str, store.FileWriter] | None = None,
                     extra: Mapping[str, Any] | None = None,
                     documents: Mapping[str, Any] | None = None) -> "Collection":
        """A collection over vectors computed elsewhere (L2-normalized here), queried with `encoder_spec`
        (None: vectors only). `arrays`, JSON `documents` and `files` are stored beside them; `extra` in the
        manifest."""
        from engine.core.encoders.base import l2_normalize
        from engine.io.ids import check_unique
        path = collection_path(name, root)
        if (path / MANIFEST).exists() and not force:
            raise EngineError(f"collection {name!r} already exists in {path.parent}/; rebuild it with "
                              f"{opt('force')}")
        vectors = l2_normalize(np.asarray(vectors, dtype=np.float32))
        if len(ids) != len(vectors) or (meta is not None and len(meta) != len(ids)):
            raise EngineError(f"{len(ids)} ids, {len(vectors)} vectors and {len(meta or ids)} metadata rows must match")
        check_unique([str(i) for i in ids], "id", name)
        items = [{"id": str(i), **(meta[n] if meta is not None else {})} for n, i in enumerate(ids)]
        manifest = new_manifest(name, kind, encoder_spec, int(vectors.shape[1]), index, ["vectors"])
        return commit_collection(path, manifest, vectors, items, build_index(vectors, index), arrays, files, extra,
                                 documents)

    def attach(self, arrays: Mapping[str, np.ndarray] | None = None,
               files: Mapping[str, store.FileWriter] | None = None, extra: Mapping[str, Any] | None = None,
               documents: Mapping[str, Any] | None = None) -> "Collection":
        """Store more named arrays, JSON documents or folders (and merge `extra`) as a new generation that
        keeps every existing file; returns the collection reopened."""
        writers = _writers(arrays, files, documents)
        keep = {r: f for r, f in self.manifest.get("roles", {}).items() if r not in writers}
        manifest = {**self.manifest, "updated": _now(),
                    "extra": {**(self.manifest.get("extra") or {}), **(extra or {})}}
        store.commit(self.path, manifest, writers, keep=keep)
        return Collection.open(self.path.name, self.path.parent, verify=False)


def new_manifest(name: str, kind: str, encoder_spec: str | None, dim: int, index: str, sources: list[str],
                 **fields: Any) -> dict:
    now = _now()
    return {"name": name, "kind": kind, "encoder": encoder_spec, "dim": dim, "metric": "inner_product",
            "normalized": True, "count": 0, "index_factory": index, "search_params": default_search_params(index),
            "engine_version": __version__, "created": now, "updated": now, "text_fields": None,
            "sources": sources, "skipped": [], "recall_at_10": None, **fields}


def _writers(arrays: Mapping[str, np.ndarray] | None, files: Mapping[str, store.FileWriter] | None,
             documents: Mapping[str, Any] | None = None) -> dict[str, store.FileWriter]:
    writers = {**{n: store.npy(a) for n, a in (arrays or {}).items()},
               **{n: store.json_document(d) for n, d in (documents or {}).items()}, **(files or {})}
    _check_role_names(list(writers))
    return writers


def commit_collection(path: Path, manifest: dict, embeddings: np.ndarray, items: list[dict], faiss_index,
                      arrays: Mapping[str, np.ndarray] | None = None,
                      files: Mapping[str, store.FileWriter] | None = None,
                      extra: Mapping[str, Any] | None = None,
                      documents: Mapping[str, Any] | None = None) -> Collection:
    """Write a whole generation (core files + stored extras) and publish its manifest; drops `.partial/`."""
    import shutil
    writers = {"embeddings": store.npy(np.asarray(embeddings, dtype=np.float32)), "items": store.jsonl(items),
               "index": faiss_index.writer() if hasattr(faiss_index, "writer")  # sharded, on-disk
               else store.FileWriter(".faiss", lambda p: save_index(faiss_index, p)),
               **_writers(arrays, files, documents)}
    manifest = {**manifest, "count": len(items), "index_bytes": index_memory_bytes(faiss_index),
                **({"extra": dict(extra)} if extra else {})}
    store.commit(path, manifest, writers)
    shutil.rmtree(path / PARTIAL, ignore_errors=True)
    return Collection.open(path.name, path.parent, verify=False)
