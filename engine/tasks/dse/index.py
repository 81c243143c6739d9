"""The stored DSEBench index: build it from datasets.json into one collection, open it, and score one
case's features against the whole catalogue.

A DSEBench index is the collection NAME (so `engine search NAME` and `engine info NAME` work on it):
its vectors are the whole-record (`all`) embeddings, its items the records, and beside them the
per-field embeddings as float16 arrays `emb_<field>` (`emb_all` too), the BM25 index as the folder
`bm25`, and the source file and fields in `extra`. Scoring reads the float16 arrays cast to float32,
`all` included, so rankings do not depend on the float32 search vectors.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.storage.index.bm25 import BM25Index
from engine.core.collection import DEFAULT_ROOT, MANIFEST, Collection, collection_path
from engine.core.encoders import registry
from engine.core.encoders.registry import DEFAULT_TEXT_SPEC
from engine.core.encoders.base import Encoder
from engine.errors import EngineError, opt
from engine.io.options import BATCH_SIZE
from engine.io.tables import read_json
from engine.progress import info
from engine.tasks.dse.data import FIELDS, read_datasets, record_text

TASK = "dsebench"                     # extra["task"] of a DSEBench collection
DEFAULT_NAME = "dsebench"
EMBEDDED = FIELDS + ("all",)
FEATURES = ("q_dense", "q_bm25", "ex_bm25") + tuple(f"ex_{agg}_{f}" for f in EMBEDDED for agg in ("mean", "max"))
ENCODE_CHUNK = 2048                   # texts per progress step
OLD_MANIFEST = "dse.json"             # format 1: dse.json, records.json, emb_<field>.npy, bm25/ in NAME/
OLD_FILES = ("dse.json", "records.json", *(f"emb_{f}.npy" for f in EMBEDDED), "bm25")


@dataclass(frozen=True)
class BuildOptions:
    """How `engine dse build` embeds a catalogue; the CLI's option defaults are these."""
    model: str = DEFAULT_TEXT_SPEC    # sentence model spec (queries are encoded with the same model)
    batch_size: int = 64              # texts per encoder batch
    device: str = "auto"              # where the encoder runs (engine.core.encoders.device)
    ray: str | None = None            # encode on Ray: "local", "auto", "ray://…"

    def check(self) -> "BuildOptions":
        from engine.core.encoders.device import check_device
        check_device(self.device)
        BATCH_SIZE.check("batch_size", self.batch_size, text=False)
        return self


def field_array(field: str) -> str:
    """The stored array that holds one field's embeddings (float16)."""
    return f"emb_{field}"


# ---------------------------------------------------------------- build

def _embed_fields(folder: Path, encoder: Encoder, texts: dict[str, list[str]], options: "BuildOptions"
                  ) -> dict[str, np.ndarray]:
    """Every non-empty field text in one stream, through the core's chunked encoder (on Ray with `--ray`);
    an empty field keeps a zero vector (similar to nothing)."""
    from engine.core.storage.builder.encode import encode_texts_chunked
    from engine.core.storage.builder.options import BuildOptions as CoreOptions
    n = len(texts["all"])
    emb = {f: np.zeros((n, encoder.dim), dtype=np.float32) for f in EMBEDDED}
    todo = [(f, i) for f in EMBEDDED for i, t in enumerate(texts[f]) if t]
    info(f"embedding {len(todo)} field texts")
    core = CoreOptions(batch_size=options.batch_size, chunk_size=ENCODE_CHUNK, device=options.device,
                       ray=options.ray)
    vecs = encode_texts_chunked(folder, encoder, [texts[f][i] for f, i in todo], core)
    for (f, i), v in zip(todo, vecs):
        emb[f][i] = v
    return emb


def _stored_extra(folder: Path) -> dict | None:
    """The settings of the collection in `folder` ({} when it cannot be read); None: there is none."""
    if not (folder / MANIFEST).is_file():
        return None
    try:
        return Collection.open(folder.name, folder.parent, verify=False).extra
    except EngineError:
        return {}


def _is_other_collection(extra: dict | None) -> bool:
    """A collection is there and `engine dse build` did not make it: never overwritten."""
    return extra is not None and extra.get("task") != TASK


def build_dse(datasets: str | os.PathLike, name: str = DEFAULT_NAME, root: str | os.PathLike = DEFAULT_ROOT,
              options: BuildOptions = BuildOptions()) -> Collection:
    """Embed every field and the whole record, and index all fields with BM25, into the collection `root/name`.

    A DSEBench index of the same name (either format) is replaced; any other collection is left alone.
    """
    options.check()
    folder = collection_path(name, root)
    if _is_other_collection(_stored_extra(folder)):
        raise EngineError(f"{folder} holds a collection that is not a DSEBench index; give another "
                          f"{opt('name')} or remove that folder")
    records = read_datasets(datasets)
    from engine.core.cluster import ray_or_here
    from engine.core.encoders.device import set_device
    set_device(options.device)
    with ray_or_here(options.ray):
        return _build(folder, name, root, datasets, records, options)


def _build(folder: Path, name: str, root, datasets, records: list[dict], options: BuildOptions) -> Collection:
    encoder = registry.load_encoder(options.model)
    info(f"dse build: {len(records)} records → {folder} ({encoder.spec})")
    texts = {f: [r[f] for r in records] for f in FIELDS}
    texts["all"] = [record_text(r) for r in records]
    emb = _embed_fields(folder, encoder, texts, options)
    ids = [r["id"] for r in records]
    source = Path(datasets)
    col = Collection.from_vectors(
        name, ids, emb["all"], encoder.spec, "text", root=root, force=True,
        meta=[{f: r[f] for f in FIELDS} for r in records],
        arrays={field_array(f): emb[f].astype(np.float16) for f in EMBEDDED},  # what scoring reads
        files={"bm25": BM25Index.build(ids, texts["all"]).writer()},
        extra={"task": TASK, "fields": list(EMBEDDED), "source": str(source.resolve()),
               "source_bytes": source.stat().st_size})
    _remove_old_layout(folder)
    info(f"dse build: done ({len(records)} records)")
    return col


def _remove_old_layout(folder: Path) -> None:
    """A format-1 index's files, once the collection that replaces them is committed."""
    for name in OLD_FILES:
        path = folder / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def ensure_index(datasets: str | os.PathLike, name: str = DEFAULT_NAME,
                 root: str | os.PathLike = DEFAULT_ROOT) -> None:
    """Build `root/name` from `datasets` unless it already indexes that file (same path, same size)."""
    folder, src = collection_path(name, root), Path(datasets)
    extra = _stored_extra(folder) or {}
    if extra.get("task") == TASK and src.exists() and extra.get("source") == str(src.resolve()) \
            and extra.get("source_bytes") == src.stat().st_size:
        info(f"dse: using the existing index {folder}")
        return
    build_dse(datasets, name, root)


# ---------------------------------------------------------------- open and score

def _old_layout_error(folder: Path, name: str, root: str | os.PathLike) -> EngineError:
    """Format 1 kept its settings in dse.json; the message gives the command that rebuilds it as a collection."""
    try:
        source = read_json(folder / OLD_MANIFEST).get("source") or "datasets.json"
    except (EngineError, AttributeError):
        source = "datasets.json"
    return EngineError(f"{folder}: a DSEBench index of format 1 ({OLD_MANIFEST}, no {MANIFEST}); rebuild it: "
                       f"`engine dse build {opt('datasets')} {source} {opt('name')} {name} {opt('root')} {root}`")


class DseIndex:
    """A built DSEBench index opened for scoring cases: records, field embeddings as float32, BM25."""

    def __init__(self, collection: Collection) -> None:
        self.collection = collection
        self.records: list[dict[str, str]] = collection.items
        self.ids = [r["id"] for r in self.records]
        self.pos = {rid: i for i, rid in enumerate(self.ids)}
        self.emb = {f: collection.array(field_array(f)).astype(np.float32) for f in EMBEDDED}
        self.bm25 = BM25Index.load(collection.file("bm25"))

    @classmethod
    def open(cls, name: str = DEFAULT_NAME, root: str | os.PathLike = DEFAULT_ROOT) -> "DseIndex":
        folder = collection_path(name, root)
        if (folder / OLD_MANIFEST).is_file() and not (folder / MANIFEST).is_file():
            raise _old_layout_error(folder, name, root)
        extra = _stored_extra(folder)
        if extra is None:
            raise EngineError(f"no DSEBench index {name!r} in {folder.parent}/; build it first: "
                              f"`engine dse build {opt('datasets')} datasets.json {opt('name')} {name} {opt('root')} {root}`")
        if _is_other_collection(extra):
            raise EngineError(f"{folder} holds a collection that is not a DSEBench index; give the "
                              f"{opt('name')} of one `engine dse build` made")
        return cls(Collection.open(name, root))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.collection.encoder.encode_texts(list(texts))

    def features(self, query_vec: np.ndarray | None, query_text: str | None, examples: Sequence[int]) -> np.ndarray:
        """docs × FEATURES scores for one case; a part without input (no query, no examples) scores 0."""
        n = len(self.ids)
        cols: dict[str, np.ndarray] = {}
        zero = np.zeros(n, dtype=np.float32)
        cols["q_dense"] = self.emb["all"] @ query_vec if query_vec is not None else zero
        cols["q_bm25"] = self.bm25.scores(query_text) if query_text else zero
        ex = list(examples)
        cols["ex_bm25"] = (np.mean([self.bm25.scores(record_text(self.records[i])) for i in ex], axis=0)
                           if ex else zero)
        for f in EMBEDDED:
            if ex:
                sims = self.emb[f] @ self.emb[f][ex].T
                cols[f"ex_mean_{f}"], cols[f"ex_max_{f}"] = sims.mean(axis=1), sims.max(axis=1)
            else:
                cols[f"ex_mean_{f}"] = cols[f"ex_max_{f}"] = zero
        return np.column_stack([cols[name] for name in FEATURES]).astype(np.float32)
