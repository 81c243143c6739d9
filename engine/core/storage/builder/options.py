"""How a collection is built: the options every build path reads (the CLI's defaults are these), and what
a build reports."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from engine.core.encoders.device import check_batch_size, check_device, check_dtype_on
from engine.core.storage.index.faiss_index import check_factory, store_factory
from engine.errors import EngineError, opt
from engine.io.options import Int


BATCH_PIXELS = Int(1, 10**12)
"""`--batch-pixels`: the pixels of one forward pass's images (`engine.core.images.iter_image_batches`)."""


@dataclass(frozen=True)
class BuildOptions:
    """How a collection is built; the CLI's option defaults are these."""
    model: str | None = None           # encoder spec; None: the registry's default for the kind of item
    index: str = "Flat"                # FAISS factory string, or "auto" (measured: engine.core.storage.index.auto)
    store: str = "float32"             # exact search's vectors: float32 (Flat), float16 (SQfp16), sq8 (SQ8)
    memory_budget: str | None = None   # `auto` only: most bytes the index may take (4G, 512M, …)
    recall: float = 0.95               # `auto` only: recall@10 the chosen operating point must reach
    device: str = "auto"               # auto|cpu|cuda|cuda:N|mps (engine.core.encoders.device)
    dtype: str = "auto"                # auto|float32|float16|bfloat16: autocast (auto: fp16 on CUDA, else float32)
    batch_size: int | str = 32         # items per forward pass; "auto": by device and kind of item
    batch_pixels: int | None = None    # images: a forward pass also cut at this many pixels (None: by count alone)
    workers: int = 2                   # image-decoding threads running ahead of the model
    threads: int = 0                   # torch threads (0: torch's default)
    chunk_size: int = 1024             # items per flushed chunk: the resume unit
    add: bool = False                  # append new items to an existing collection
    update: bool = False               # with add: re-encode and replace items whose id is already there
    sync: bool = False                 # an image folder re-synced: new files added, vanished dropped, changed re-encoded
    bm25: bool = False                 # store a BM25 index of the texts (role `bm25`: --mode bm25|hybrid)
    bm25_analyzer: str | None = None   # english|none (engine.core.storage.index.bm25); None: the collection's own, else english
    force: bool = False                # rebuild a collection that exists
    fields: tuple[str, ...] | None = None   # text columns to embed (None: the usual text columns found)
    id_column: str | None = None
    path_column: str | None = None
    recall_queries: str | Path | None = None  # text queries for a non-exact index's recall@10
    wait: float = 0.0                  # seconds to wait for another writer of the collection (0: fail at once)
    id_policy: str = "strict"          # ids TREC files cannot hold (white space, empty): strict refuses, replace fixes
    ray: str | None = None             # encode on Ray: "local" (started for the build), "auto", "ray://…"
    shards: int = 1                    # index shards searched side by side (engine.core.storage.index.shards)
    dim: int | None = None             # a Matryoshka model's embeddings truncated to dim (renormalized)
    sparse: str | None = None          # sparse:NAME_OR_DIR: also an inverted index of learned sparse vectors
    multivector: str | None = None     # multivector:NAME_OR_DIR: also token vectors for late interaction
    multivector_store: str = "float16"  # how those token vectors are kept: float16, or int8 with a scale each
    multivector_centroids: int = 0     # centroids of the token vectors' inverted file (0: by their number)

    def check(self) -> "BuildOptions":
        from engine.core.storage.index.auto import parse_bytes  # a build's modules: not on a query's start-up
        from engine.io.ids import ID_POLICIES
        for name in ("chunk_size", "shards"):
            if getattr(self, name) < 1:
                raise EngineError(f"{opt(name)} must be at least 1, not {getattr(self, name)}")
        check_batch_size(self.batch_size)
        BATCH_PIXELS.check("batch_pixels", self.batch_pixels, text=False)
        check_device(self.device)
        check_dtype_on(self.dtype, self.device)
        parse_bytes(self.memory_budget)
        if not 0 < self.recall <= 1:
            raise EngineError(f"{opt('recall')} must be in (0, 1], not {self.recall}")
        if self.update and not self.add:
            raise EngineError(f"{opt('update')} replaces items of an existing collection; give it with {opt('add')}")
        if self.add and self.force:
            raise EngineError(f"{opt('force')} rebuilds the collection from this source alone and {opt('add')} "
                              "extends it: give one of them")
        if (self.add or self.sync) and (self.index != "Flat" or self.store != "float32" or self.shards != 1):
            raise EngineError(f"{opt('add' if self.add else 'sync')} keeps the collection's index; leave out "
                              f"{opt('index')}, {opt('store')} and {opt('shards')} (rebuild with {opt('force')} "
                              "to change it)")
        if self.sync and (self.add or self.force):
            raise EngineError(f"{opt('sync')} adds, drops and re-encodes by itself; leave out {opt('add')} and "
                              f"{opt('force')}")
        if self.id_policy not in ID_POLICIES:
            raise EngineError(f"{opt('id_policy')} must be one of {', '.join(ID_POLICIES)}, not {self.id_policy!r}")
        factory = self.factory()
        if factory == "auto" and self.shards > 1:
            raise EngineError(f"{opt('index')} auto measures one index; leave out {opt('shards')} or name the index")
        if not self.add and factory != "auto":
            check_factory(factory)  # before a model loads or an item is encoded
        from engine.core.storage.builder.learned_roles import check_learned
        check_learned(self.sparse, self.multivector, self.multivector_store, None)
        from engine.core.storage.index.multivector import CENTROIDS
        CENTROIDS.check("multivector_centroids", self.multivector_centroids, text=False)
        if self.dim is not None and self.model is not None:
            from engine.core.encoders.registry import with_dim
            with_dim(self.model, self.dim)  # refused in one line unless the model was trained for it
        return self

    def factory(self) -> str:
        """The FAISS factory string `index` and `store` name ("auto" stays "auto")."""
        factory = store_factory(self.store)
        if self.store == "float32":
            return self.index
        if self.index != "Flat":
            raise EngineError(f"{opt('store')} {self.store} is for exact search ({opt('index')} Flat); "
                              f"{self.index} keeps its own codes")
        return factory


def build_options(options: BuildOptions | None = None, **settings: Any) -> BuildOptions:
    """`options` with `settings` (BuildOptions field names) applied; an unknown name is an error."""
    known = {f.name for f in fields(BuildOptions)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise EngineError(f"unknown build setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if settings.get("fields") is not None:
        settings["fields"] = tuple(settings["fields"])
    return replace(options or BuildOptions(), **settings).check()


@dataclass
class BuildReport:
    encoded: int = 0
    resumed: int = 0
    skipped_existing: int = 0
    failed: list[dict] = field(default_factory=list)
    recall_at_10: float | None = None
