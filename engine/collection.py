"""A collection: one folder that holds everything needed to search it.

    indexes/NAME/manifest.json        encoder spec, dim, metric, count, factory, version, checksums
    indexes/NAME/embeddings-G.npy     (count, dim) float32, L2-normalized, row i = item i
    indexes/NAME/items-G.jsonl        {"id": ..., **metadata} per row, aligned with the embeddings
    indexes/NAME/index-G.faiss        the FAISS index over the same rows

G is a generation number. A build or `--add` writes the next generation's files first and
then replaces manifest.json (the commit point), so a crash leaves the previous collection
intact. Embeddings are flushed per chunk into `.partial/`; a killed build run again skips
the chunks it finished.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from engine import __version__
from engine.errors import EngineError
from engine.index import (build_index, default_search_params, index_memory_bytes, is_exact, load_index,
                          recall_at_k, save_index)
from engine.io.atomic import atomic_open, write_json
from engine.progress import info, make_progress, warn
from engine.sources import Item, check_unique, image_items, text_items

MANIFEST = "manifest.json"
PARTIAL = ".partial"
DEFAULT_ROOT = Path("indexes")
DEFAULT_CHUNK = 1024


@dataclass
class Hit:
    id: str
    score: float
    rank: int
    meta: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"rank": self.rank, "id": self.id, "score": self.score, **({"meta": self.meta} if self.meta else {})}


@dataclass
class BuildReport:
    encoded: int = 0
    resumed: int = 0
    skipped_existing: int = 0
    failed: list[dict] = field(default_factory=list)
    recall_at_10: float | None = None


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def collection_path(name: str, root: str | Path | None = None) -> Path:
    if not name or any(c in name for c in "/\\") or name.startswith("."):
        raise EngineError(f"collection name {name!r} must be a plain folder name (no slashes, not hidden)")
    return Path(root if root is not None else DEFAULT_ROOT) / name


def list_collections(root: str | Path | None = None) -> list[str]:
    root = Path(root if root is not None else DEFAULT_ROOT)
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file()) if root.is_dir() else []


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
        mpath = path / MANIFEST
        if not mpath.is_file():
            known = list_collections(root)
            hint = f"known: {', '.join(known)}" if known else "there are none yet"
            partial = " (an interrupted build is there: run the same build command again to resume)" \
                if (path / PARTIAL).is_dir() else ""
            raise EngineError(f"no collection {name!r} in {path.parent}/{partial}; build it with "
                              f"`engine build {name} --images DIR` or `--texts FILE` ({hint})")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise EngineError(f"{mpath}: not valid JSON ({exc}); rebuild with `engine build {name} ... --force`") from None
        col = cls(path, manifest)
        if verify:
            col.verify()
        return col

    def verify(self) -> None:
        """Every file the manifest lists exists with its recorded size and checksum."""
        for fname, meta in self.manifest.get("files", {}).items():
            fpath = self.path / fname
            fix = f"rebuild with `engine build {self.name} ... --force`"
            if not fpath.is_file():
                raise EngineError(f"{fpath} is missing but {self.path / MANIFEST} lists it; {fix}")
            if fpath.stat().st_size != meta["bytes"] or sha256(fpath) != meta["sha256"]:
                raise EngineError(f"{fpath} does not match its checksum in {self.path / MANIFEST} "
                                  f"(changed or damaged); {fix}")

    # ------------------------------------------------------------------ properties
    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    def __len__(self) -> int:
        return int(self.manifest["count"])

    def _file(self, role: str) -> Path:
        return self.path / self.manifest["roles"][role]

    @property
    def embeddings(self) -> np.ndarray:
        return np.load(self._file("embeddings"), mmap_mode="r")

    @property
    def items(self) -> list[dict]:
        if self._items is None:
            with open(self._file("items"), encoding="utf-8") as fh:
                self._items = [json.loads(line) for line in fh if line.strip()]
        return self._items

    @property
    def ids(self) -> list[str]:
        return [it["id"] for it in self.items]

    @property
    def encoder(self):
        if self._encoder is None:
            from engine.encoders import load_encoder
            self._encoder = load_encoder(self.manifest["encoder"])
        return self._encoder

    @property
    def index(self):
        if self._index is None:
            self._index = load_index(self._file("index"), self.manifest.get("search_params"))
        return self._index

    def info(self) -> dict[str, Any]:
        m = self.manifest
        out = {k: m[k] for k in ("name", "kind", "encoder", "dim", "metric", "count", "index_factory",
                                 "search_params", "engine_version", "created", "updated") if k in m}
        if m.get("recall_at_10") is not None:
            out["recall_at_10"] = m["recall_at_10"]
        out["skipped"] = len(m.get("skipped", []))
        out["files"] = {f: v["bytes"] for f, v in m.get("files", {}).items()}
        out["path"] = str(self.path)
        return out

    # ------------------------------------------------------------------ searching
    def encode_queries(self, texts: Sequence[str] | None = None, images: Sequence[str] | None = None,
                       batch_size: int = 64) -> np.ndarray:
        enc = self.encoder
        if texts is not None:
            if "text" not in enc.modalities:
                raise EngineError(f"collection {self.name!r} ({enc.spec}) takes image queries only; "
                                  f"use --image PATH, or build it with an image-text model (--model conse or clip:…)")
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
        from engine.runs import write_run
        results = self.search_many(texts=[t for _, t in queries], k=k, batch_size=batch_size)
        rankings = {qid: [(h.id, h.score) for h in hits] for (qid, _), hits in zip(queries, results)}
        return write_run(out, rankings, run_id or self.name)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, name: str, *, images: str | Path | None = None, texts: str | Path | None = None,
              root: str | Path | None = None, model: str | None = None, index: str = "Flat",
              batch_size: int = 32, workers: int = 2, threads: int | None = None,
              chunk_size: int = DEFAULT_CHUNK, add: bool = False, force: bool = False,
              fields: Sequence[str] | None = None, id_column: str | None = None, path_column: str | None = None,
              recall_queries: str | Path | None = None, report: BuildReport | None = None,
              items: Sequence[Item] | None = None, kind: str | None = None) -> "Collection":
        """Build (or with `add`, extend) a collection; see the module docstring for the on-disk contract.

        Sources are an image folder/table (`images`), a text table (`texts`), or, for adapters,
        ready `items` of a given `kind` ("image": source is a path; "text": source is the text).
        """
        from engine.encoders import DEFAULT_IMAGE_SPEC, DEFAULT_TEXT_SPEC, configure_threads, load_encoder
        if sum(x is not None for x in (images, texts, items)) != 1:
            raise EngineError("give exactly one source: --images PATH or --texts FILE")
        if chunk_size < 1 or batch_size < 1:
            raise EngineError("--chunk-size and --batch-size must be at least 1")
        report = report if report is not None else BuildReport()
        path = collection_path(name, root)
        fields_used: list[str] | None = None
        if items is not None:
            if kind not in ("image", "text"):
                raise EngineError("items need kind='image' or kind='text'")
            items = list(items)
            check_unique(items, name)
        elif images is not None:
            kind = "image"
            items = image_items(images, id_column=id_column, path_column=path_column)
        else:
            kind = "text"
            items, fields_used = text_items(texts, id_column=id_column, fields=fields)
        source_name = str(images or texts or f"{len(items)} items")

        old: Collection | None = None
        if add:
            old = cls.open(name, root)
            if old.kind != kind:
                raise EngineError(f"collection {name!r} holds {old.kind}s; --add {kind}s needs a collection of {kind}s")
            if model and load_encoder(model).spec != old.manifest["encoder"]:
                raise EngineError(f"collection {name!r} was built with {old.manifest['encoder']}; "
                                  f"--add must use the same model (drop --model)")
            model = old.manifest["encoder"]
            index = old.manifest["index_factory"]
            have = set(old.ids)
            report.skipped_existing = sum(1 for it in items if it.id in have)
            items = [it for it in items if it.id not in have]
            if report.skipped_existing:
                info(f"{report.skipped_existing} items already in {name!r} are kept as they are")
            if not items:
                info(f"nothing new to add to {name!r}")
                return old
        elif (path / MANIFEST).exists() and not force:
            raise EngineError(f"collection {name!r} already exists in {path.parent}/; "
                              f"use --add to append new items or --force to rebuild it")

        configure_threads(threads)
        encoder = load_encoder(model or (DEFAULT_IMAGE_SPEC if kind == "image" else DEFAULT_TEXT_SPEC))
        if kind == "text" and "text" not in encoder.modalities:
            raise EngineError(f"model {encoder.spec} cannot embed texts; pick a text or image-text model")
        if kind == "image" and "image" not in encoder.modalities:
            raise EngineError(f"model {encoder.spec} cannot embed images; pick an image or image-text model "
                              f"(conse, effnet, clip:ARCH:WEIGHTS)")
        if kind == "text":
            _warn_truncation(encoder, items)

        emb, kept, failed = _encode_chunked(path, encoder, kind, items, chunk_size, batch_size, workers, report)
        for n, reason in failed:
            report.failed.append({"id": items[n].id, "path": items[n].source, "reason": reason})

        kept_items = [{"id": items[i].id, **items[i].meta} for i in kept]
        if old is not None:
            emb = np.concatenate([np.asarray(old.embeddings), emb]) if len(emb) else np.asarray(old.embeddings)
            kept_items = old.items + kept_items
        if len(kept_items) == 0:
            raise EngineError(f"no item of {source_name} could be encoded; nothing to index")

        info(f"building FAISS index {index!r} over {len(kept_items)} × {encoder.dim}")
        faiss_index = build_index(emb, index)
        if not is_exact(index):
            report.recall_at_10 = _sampled_recall(faiss_index, emb, encoder, kind, recall_queries)
            info(f"recall@10 of {index!r} against exact search: {report.recall_at_10:.3f}")

        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        gen = int(old.manifest.get("generation", 0)) + 1 if old is not None else _next_generation(path)
        manifest = {
            "name": name, "kind": kind, "encoder": encoder.spec, "dim": int(encoder.dim), "metric": "inner_product",
            "normalized": True, "count": len(kept_items), "index_factory": index,
            "search_params": default_search_params(index), "engine_version": __version__,
            "created": old.manifest["created"] if old is not None else now, "updated": now, "generation": gen,
            "text_fields": fields_used if kind == "text" else None,
            "sources": (old.manifest.get("sources", []) if old is not None else []) + [source_name],
            "skipped": (old.manifest.get("skipped", []) if old is not None else []) + report.failed,
            "recall_at_10": report.recall_at_10,
        }
        _commit(path, manifest, gen, emb, kept_items, faiss_index)
        if report.failed:
            lines = "\n".join(f"  {f['path']}: {f['reason']}" for f in report.failed[:20])
            more = f"\n  … and {len(report.failed) - 20} more (listed in {path / MANIFEST})" if len(report.failed) > 20 else ""
            warn(f"{len(report.failed)} of {len(items)} images skipped:\n{lines}{more}")
        info(f"collection {name!r}: {len(kept_items)} items in {path}")
        return cls.open(name, root, verify=False)


def from_vectors(name: str, ids: Sequence[str], vectors: np.ndarray, encoder_spec: str, kind: str,
                 root: str | Path | None = None, index: str = "Flat", meta: Sequence[dict] | None = None,
                 force: bool = False) -> Collection:
    """A collection over embeddings computed elsewhere (normalized here), queried with `encoder_spec`."""
    from engine.encoders.base import l2_normalize
    from engine.index import build_index
    path = collection_path(name, root)
    if (path / MANIFEST).exists() and not force:
        raise EngineError(f"collection {name!r} already exists in {path.parent}/; use force=True to replace it")
    vectors = l2_normalize(np.asarray(vectors, dtype=np.float32))
    if len(ids) != len(vectors) or (meta is not None and len(meta) != len(ids)):
        raise EngineError(f"{len(ids)} ids, {len(vectors)} vectors and {len(meta or ids)} metadata rows must match")
    check_unique([Item(str(i), "") for i in ids], name)
    items = [{"id": str(i), **(meta[n] if meta is not None else {})} for n, i in enumerate(ids)]
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    gen = _next_generation(path)
    manifest = {"name": name, "kind": kind, "encoder": encoder_spec, "dim": int(vectors.shape[1]),
                "metric": "inner_product", "normalized": True, "count": len(items), "index_factory": index,
                "search_params": default_search_params(index), "engine_version": __version__, "created": now,
                "updated": now, "generation": gen, "text_fields": None, "sources": ["vectors"], "skipped": [],
                "recall_at_10": None}
    _commit(path, manifest, gen, vectors, items, build_index(vectors, index))
    return Collection.open(name, root, verify=False)


def _warn_truncation(encoder, items: Sequence[Item]) -> None:
    limit = int(encoder.info.get("max_seq_length") or 0)
    if not limit:
        return
    long = sum(1 for it in items if len(it.source.split()) * 1.3 > limit)
    if long:
        warn(f"about {long} of {len(items)} texts exceed the model's {limit}-token window; "
             f"only their beginning is embedded")


def _plan_signature(encoder_spec: str, kind: str, items: Sequence[Item], chunk_size: int) -> str:
    h = hashlib.sha256(json.dumps([encoder_spec, kind, chunk_size]).encode())
    for it in items:
        h.update(it.id.encode() + b"\0" + it.source.encode() + b"\1")
    return h.hexdigest()


def _encode_chunked(path: Path, encoder, kind: str, items: Sequence[Item], chunk_size: int, batch_size: int,
                    workers: int, report: BuildReport) -> tuple[np.ndarray, list[int], list[tuple[int, str]]]:
    """Encode in chunks flushed to `.partial/`; chunks already there from an interrupted run are reused."""
    partial = path / PARTIAL
    signature = _plan_signature(encoder.spec, kind, items, chunk_size)
    plan_file = partial / "plan.json"
    if partial.is_dir():
        try:
            same = json.loads(plan_file.read_text())["signature"] == signature
        except (OSError, ValueError, KeyError):
            same = False
        if not same:
            warn(f"{partial} holds an interrupted build of different input; starting over")
            shutil.rmtree(partial)
    if not partial.is_dir():
        partial.mkdir(parents=True)
        write_json(plan_file, {"signature": signature, "count": len(items), "chunk_size": chunk_size,
                               "encoder": encoder.spec})

    n_chunks = (len(items) + chunk_size - 1) // chunk_size
    embs, kept, failed = [], [], []
    with make_progress() as bar:
        task = bar.add_task(f"encoding {kind}s", total=len(items))
        for c in range(n_chunks):
            lo, hi = c * chunk_size, min(len(items), (c + 1) * chunk_size)
            cfile = partial / f"chunk-{c:06d}.npz"
            data = None
            if cfile.is_file():
                try:
                    with np.load(cfile) as z:
                        data = {k: z[k] for k in z.files}
                    report.resumed += hi - lo
                except (OSError, ValueError):
                    data = None  # unreadable chunk: encode it again
            if data is None:
                chunk = items[lo:hi]
                if kind == "text":
                    e = encoder.encode_texts([it.source for it in chunk], batch_size=batch_size)
                    ok, bad = np.arange(len(chunk)), []
                else:
                    res = encoder.encode_images([it.source for it in chunk], batch_size=batch_size, workers=workers)
                    e, ok, bad = res.embeddings, np.asarray(res.ok, dtype=np.int64), res.failed
                data = {"emb": e.astype(np.float32), "ok": np.asarray(ok, dtype=np.int64),
                        "bad_pos": np.asarray([p for p, _ in bad], dtype=np.int64),
                        "bad_reason": np.asarray([r for _, r in bad], dtype=str)}
                with atomic_open(cfile, "wb") as fh:
                    np.savez(fh, **data)
                report.encoded += hi - lo
            embs.append(data["emb"].reshape(-1, encoder.dim))
            kept.extend(int(i) + lo for i in data["ok"])
            failed.extend((int(p) + lo, str(r)) for p, r in zip(data["bad_pos"], data["bad_reason"]))
            bar.advance(task, hi - lo)
    if report.resumed:
        info(f"resumed: {report.resumed} items were already encoded by an interrupted build")
    emb = np.concatenate(embs) if embs else np.zeros((0, encoder.dim), np.float32)
    return emb, kept, failed


def _sampled_recall(index, emb: np.ndarray, encoder, kind: str, recall_queries: str | Path | None,
                    n: int = 200) -> float:
    """Recall@10 vs exact on queries of the modality users will really send (text for image-text collections)."""
    rng = np.random.default_rng(0)
    if recall_queries is not None:
        from engine.io.tables import read_queries
        texts = [t for _, t in read_queries(recall_queries)]
        q = encoder.encode_texts(texts[:n] if len(texts) <= n else [texts[i] for i in rng.choice(len(texts), n, replace=False)])
    elif "text" in encoder.modalities and kind == "image":
        from engine.encoders.conse import imagenet_synonyms
        names = [s[0] for s in imagenet_synonyms()]
        q = encoder.encode_texts([f"a photo of a {names[i]}" for i in rng.choice(len(names), n, replace=False)])
    else:  # the collection's own modality: its own vectors, the queries it will get
        q = emb[rng.choice(len(emb), min(n, len(emb)), replace=False)]
    return float(recall_at_k(index, emb, q, k=10))


def _next_generation(path: Path) -> int:
    mpath = path / MANIFEST
    if mpath.is_file():
        try:
            return int(json.loads(mpath.read_text()).get("generation", 0)) + 1
        except (ValueError, OSError):
            pass
    return 1


def _commit(path: Path, manifest: dict, gen: int, emb: np.ndarray, items: list[dict], faiss_index) -> None:
    """Write the new generation's files, then the manifest (the commit point), then drop older files."""
    from engine.io.atomic import atomic_path
    path.mkdir(parents=True, exist_ok=True)
    roles = {"embeddings": f"embeddings-{gen:06d}.npy", "items": f"items-{gen:06d}.jsonl",
             "index": f"index-{gen:06d}.faiss"}
    with atomic_open(path / roles["embeddings"], "wb") as fh:
        np.save(fh, np.ascontiguousarray(emb, dtype=np.float32))
    with atomic_open(path / roles["items"]) as fh:
        for it in items:
            fh.write(json.dumps(it, ensure_ascii=False, default=str) + "\n")
    with atomic_path(path / roles["index"]) as tmp:
        save_index(faiss_index, tmp)
    manifest["roles"] = roles
    manifest["files"] = {f: {"bytes": (path / f).stat().st_size, "sha256": sha256(path / f)} for f in roles.values()}
    manifest["index_bytes"] = index_memory_bytes(faiss_index)
    write_json(path / MANIFEST, manifest)
    keep = set(roles.values()) | {MANIFEST}
    for f in path.iterdir():
        if f.is_file() and f.name not in keep and f.name.split("-")[0] in ("embeddings", "items", "index"):
            f.unlink()
    shutil.rmtree(path / PARTIAL, ignore_errors=True)
