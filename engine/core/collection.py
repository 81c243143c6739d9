"""A collection: one folder that holds everything needed to search it (see `engine.core.store`).

    indexes/NAME/manifest.json        format, encoder spec, dim, metric, count, factory, version, checksums
    indexes/NAME/embeddings-G.npy     (count, dim) float32, L2-normalized, row i = item i
    indexes/NAME/items-G.jsonl        {"id": ..., **metadata} per row, aligned with the embeddings
    indexes/NAME/item_offsets-G.npy   int64 start byte of each items row + the file's end: a hit's row is read
                                      alone (collections written before it scan the file for newlines once)
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
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from engine import __version__
from engine.core import store
from engine.core.encoders.base import l2_normalize
from engine.core.index import (FlatFile, SearchKnobs, build_index, check_knobs, default_search_params, load_index,
                               save_index, search_index)
from engine.core.lock import writer_lock
from engine.core.structure import check_structure
from engine.errors import EngineError, opt
from engine.progress import make_progress

if TYPE_CHECKING:
    from engine.core.build import BuildOptions, BuildReport
    from engine.core.sources import Item

MANIFEST = store.MANIFEST
PARTIAL = ".partial"
DEFAULT_ROOT = Path("indexes")
CORE_ROLES = ("embeddings", "items", "item_offsets", "index")
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


def check_k(k: int) -> None:
    """`k` results per query: at least one (FAISS would quietly return one for 0 or -1)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise EngineError(f"{opt('k')} must be a whole number of at least 1, not {k!r}")


def check_query(text: str | None, k: int) -> None:
    """What a search needs before any model loads: a positive `k` and, for a text query, some text."""
    check_k(k)
    if text is not None and not text.strip():
        raise EngineError("the text query is empty; give some words to search for")


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
        self._text_encoder = None
        self._index = None
        self._items: list[dict] | None = None
        self._offsets: np.ndarray | None = None

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, name: str, root: str | Path | None = None, verify: bool | None = None) -> "Collection":
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
            manifest = store.read_manifest(path, rebuild_hint(name))
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
            return store.read_manifest(self.path, "").get("generation") != self.manifest.get("generation")
        except EngineError:
            return False

    def check(self) -> None:
        """Structural checks that read no data (run by every open): the manifest's files exist at their sizes."""
        store.check(self.path, self.manifest, rebuild_hint(self.name))

    def verify(self) -> None:
        """`check`, then every byte of every file against its sha256 (`engine verify NAME`)."""
        files = self.manifest.get("files") or {}
        total = sum(int((m or {}).get("bytes") or 0) for m in files.values()) if isinstance(files, dict) else 0
        with make_progress() as bar:
            task = bar.add_task(f"verifying {self.name}", total=total)
            store.verify(self.path, self.manifest, rebuild_hint(self.name), lambda n: bar.advance(task, n))

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
            try:
                with open(self.file("items"), encoding="utf-8") as fh:
                    self._items = [json.loads(line) for line in fh if line.strip()]
            except FileNotFoundError:
                raise self._gone() if self._rebuilt() else EngineError(
                    f"{self.file('items')} is missing; {rebuild_hint(self.name)}") from None
            except (ValueError, UnicodeDecodeError) as exc:
                raise EngineError(f"{self.file('items')}: damaged ({exc}); {rebuild_hint(self.name)}") from None
        return self._items

    @property
    def ids(self) -> list[str]:
        return [it["id"] for it in self.items]

    def items_at(self, rows: Sequence[int]) -> list[dict]:
        """The items rows at these positions, reading only their lines (all rows parsed once already: from memory)."""
        if self._items is not None:
            return [self._items[int(r)] for r in rows]
        if self._offsets is None:
            roles = self.manifest.get("roles", {})
            offsets = np.load(self.file("item_offsets"), mmap_mode="r") if "item_offsets" in roles \
                else store.line_offsets(self.file("items"))
            if len(offsets) != len(self) + 1:
                raise EngineError(f"{self.file('items')} holds {len(offsets) - 1} rows, the manifest says "
                                  f"{len(self)}; {rebuild_hint(self.name)}")
            self._offsets = offsets
        return store.read_lines(self.file("items"), self._offsets, rows)

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
    def text_query_encoder(self):
        """What embeds text queries: the encoder's light text side (ONNX, no torch) unless the whole encoder
        was loaded before any text query (then it is used: no second model)."""
        if self._text_encoder is None and self._encoder is not None:
            return self._encoder
        if self._text_encoder is None:
            spec = self.manifest.get("encoder")
            if not spec:
                return self.encoder  # raises the vectors-only error
            from engine.core.encoders.registry import load_text_query_encoder
            self._text_encoder = load_text_query_encoder(spec)
        return self._text_encoder

    @property
    def index(self):
        if self._index is None:
            try:
                self._index = load_index(self.file("index"), self.manifest.get("search_params"))
            except RuntimeError as exc:
                if self._rebuilt():
                    raise self._gone() from None
                raise EngineError(f"{self.file('index')}: FAISS cannot read it ({str(exc).strip()[-120:]}); "
                                  f"{rebuild_hint(self.name)}") from None
        return self._index

    @property
    def search_params(self) -> dict[str, float]:
        """The stored query-time knobs (nprobe, efSearch, k_factor_rf) the index searches with by default."""
        return dict(self.manifest.get("search_params") or {})

    def info(self) -> dict[str, Any]:
        m = self.manifest
        out = {k: m[k] for k in ("name", "kind", "encoder", "dim", "metric", "count", "index_factory",
                                 "search_params", "engine_version", "created", "updated") if k in m}
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
        out["files"] = {f: v["bytes"] for f, v in m.get("files", {}).items()}
        out["path"] = str(self.path)
        return out

    # ------------------------------------------------------------------ searching
    def encode_queries(self, texts: Sequence[str] | None = None, images: Sequence[str] | None = None,
                       batch_size: int = 64) -> np.ndarray:
        from engine.core.encoders.registry import specs_for
        enc = self.text_query_encoder if texts is not None else self.encoder
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

    def check_search(self, k: int, knobs: "SearchKnobs | None" = None) -> dict:
        """The search arguments checked against this collection before any model loads; the knobs' params."""
        check_k(k)
        params = (knobs or SearchKnobs()).params()
        check_knobs(self.manifest.get("index_factory", "Flat"), params)
        return params

    def search_vectors(self, queries: np.ndarray, k: int = 10, knobs: "SearchKnobs | None" = None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Raw FAISS results: (scores, row indices), -1 where fewer than k. `knobs` override the stored
        nprobe / efSearch / k_factor for this call only."""
        params = self.check_search(k, knobs)
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if queries.shape[1] != self.dim:
            raise EngineError(f"query vectors are {queries.shape[1]}-d, collection {self.name!r} is {self.dim}-d")
        return search_index(self.index, queries, max(1, min(k, len(self))), self.search_params, params)

    def hits(self, scores: np.ndarray, rows: np.ndarray) -> list[list[Hit]]:
        """Hits with their items rows; only the rows hit are read from the items file."""
        wanted = sorted({int(i) for i in np.asarray(rows).ravel() if i >= 0})
        items = dict(zip(wanted, self.items_at(wanted)))
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

    def search(self, text: str | None = None, image: str | None = None, k: int = 10,
               knobs: "SearchKnobs | None" = None) -> list[Hit]:
        """Top-k for one text or one image query, encoded with the collection's own encoder."""
        if (text is None) == (image is None):
            raise EngineError("give either a text query or an image query")
        check_query(text, k)
        self.check_search(k, knobs)
        q = self.encode_queries(texts=[text]) if text is not None else self.encode_queries(images=[image])
        return self.hits(*self.search_vectors(q, k, knobs))[0]

    def search_many(self, texts: Sequence[str] | None = None, images: Sequence[str] | None = None, k: int = 10,
                    batch_size: int = 64, knobs: "SearchKnobs | None" = None) -> list[list[Hit]]:
        """Batched search with a progress bar; one ranked list per query, in order."""
        queries = list(texts if texts is not None else images or [])
        for text in texts or [k]:
            check_query(text if texts is not None else None, k)
        self.check_search(k, knobs)
        out: list[list[Hit]] = []
        with make_progress() as bar:
            task = bar.add_task("searching", total=len(queries))
            for start in range(0, len(queries), batch_size):
                chunk = queries[start:start + batch_size]
                q = self.encode_queries(texts=chunk, batch_size=batch_size) if texts is not None \
                    else self.encode_queries(images=chunk, batch_size=batch_size)
                out.extend(self.hits(*self.search_vectors(q, k, knobs)))
                bar.advance(task, len(chunk))
        return out

    def search_to_run(self, queries: Sequence[tuple[str, str]], out: str | Path, k: int = 100,
                      run_id: str | None = None, batch_size: int = 64, knobs: "SearchKnobs | None" = None) -> int:
        """Search a file's worth of (qid, text) queries and write a TREC run; returns lines written."""
        from engine.eval.runs import write_run
        results = self.search_many(texts=[t for _, t in queries], k=k, batch_size=batch_size, knobs=knobs)
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
                     documents: Mapping[str, Any] | None = None, queries: np.ndarray | None = None,
                     recall: float = 0.95, memory_budget: str | int | None = None) -> "Collection":
        """A collection over vectors computed elsewhere (L2-normalized here), queried with `encoder_spec`
        (None: vectors only). `arrays`, JSON `documents` and `files` are stored beside them; `extra` in the
        manifest. `index="auto"` measures candidates on `queries` (the vectors users will search with;
        default: a sample of these vectors) for `recall` within `memory_budget` bytes (see `autoindex`)."""
        from engine.io.ids import check_unique
        path = collection_path(name, root)
        if (path / MANIFEST).exists() and not force:
            raise EngineError(f"collection {name!r} already exists in {path.parent}/; rebuild it with "
                              f"{opt('force')}")
        vectors = np.asarray(vectors)  # normalized block by block below: no full-size copy (build memory)
        if vectors.ndim != 2 or len(ids) != len(vectors) or (meta is not None and len(meta) != len(ids)):
            raise EngineError(f"{len(ids)} ids, {len(vectors)} vectors and {len(meta or ids)} metadata rows must match")
        check_unique([str(i) for i in ids], "id", name)
        items = ({"id": str(i), **(meta[n] if meta is not None else {})} for n, i in enumerate(ids))
        if index == "auto":
            from engine.core.autoindex import choose, parse_bytes
            label = "the vectors users send"
            if queries is None:
                rows = np.sort(np.random.default_rng(0).choice(len(vectors), min(500, len(vectors)), replace=False))
                queries, label = vectors[rows], f"{len(rows)} of the collection's own vectors"
            faiss_index, choice = choose(vectors, l2_normalize(np.atleast_2d(queries)), recall,
                                         parse_bytes(None if memory_budget is None else str(memory_budget)), label,
                                         normalize=True)
            manifest = new_manifest(name, kind, encoder_spec, int(vectors.shape[1]), choice.factory, ["vectors"],
                                    recall_at_10=choice.recall, index_choice=choice.manifest())
            manifest["search_params"] = choice.params
        else:
            manifest = new_manifest(name, kind, encoder_spec, int(vectors.shape[1]), index, ["vectors"])
            faiss_index = FlatFile(vectors, normalize=True) if index == "Flat" else \
                build_index(vectors, index, normalize=True)
        with writer_lock(path):
            return commit_collection(path, manifest, vectors, items, faiss_index, arrays, files, extra, documents,
                                     count=len(ids), normalize=True)

    def attach(self, arrays: Mapping[str, np.ndarray] | None = None,
               files: Mapping[str, store.FileWriter] | None = None, extra: Mapping[str, Any] | None = None,
               documents: Mapping[str, Any] | None = None) -> "Collection":
        """Store more named arrays, JSON documents or folders (and merge `extra`) as a new generation that
        keeps every existing file; returns the collection reopened."""
        writers = _writers(arrays, files, documents)
        keep = {r: f for r, f in self.manifest.get("roles", {}).items() if r not in writers}
        manifest = {**self.manifest, "updated": _now(),
                    "extra": {**(self.manifest.get("extra") or {}), **(extra or {})}}
        with writer_lock(self.path):
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


def commit_collection(path: Path, manifest: dict, embeddings: np.ndarray, items: Iterable[dict], faiss_index,
                      arrays: Mapping[str, np.ndarray] | None = None,
                      files: Mapping[str, store.FileWriter] | None = None,
                      extra: Mapping[str, Any] | None = None,
                      documents: Mapping[str, Any] | None = None, count: int | None = None,
                      normalize: bool = False) -> Collection:
    """Write a whole generation (core files + stored extras) and publish its manifest; drops `.partial/`.
    `items` may be a generator (then give `count`); `normalize` L2-normalizes the embeddings block by block
    as they are written, so no full-size copy is made."""
    import shutil
    offsets: list = []
    manifest = {**manifest, "count": len(items) if count is None else count,  # type: ignore[arg-type]
                **({"extra": dict(extra)} if extra else {})}

    def write_index(p: Path) -> None:
        save_index(faiss_index, p)
        manifest["index_bytes"] = p.stat().st_size  # serialized size: a close proxy for resident memory

    if hasattr(faiss_index, "writer"):  # a folder of shards or an on-disk IVF (engine.core.shards / ondisk)
        index_writer = faiss_index.writer()
        manifest["index_bytes"] = int(faiss_index.memory_bytes())
    else:
        index_writer = store.FileWriter(".faiss", write_index)
    writers = {"embeddings": store.npy_blocks(embeddings, l2_normalize if normalize else None),
               "items": store.jsonl(items, offsets), "item_offsets": store.offsets_npy(offsets),
               "index": index_writer, **_writers(arrays, files, documents)}
    store.commit(path, manifest, writers)
    shutil.rmtree(path / PARTIAL, ignore_errors=True)
    return Collection.open(path.name, path.parent, verify=False)
