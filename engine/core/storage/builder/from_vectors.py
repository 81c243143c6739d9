"""A collection over vectors computed elsewhere: `Collection.from_vectors` (an array in memory) and
`engine build NAME --vectors PATH` (`.npy` files read block by block) take this one path.

1. The vectors are L2-normalized block by block into `NAME/.partial/embeddings.npy`, a float32 file written
   at row offsets; `blocks.bin` marks each block done, so a killed build of the same input resumes there.
2. The index is built from that file, a block at a time: Flat streamed into FAISS's layout; IVF trained on
   a capped sample (kept in `.partial/` for a resume) and filled in blocks, on disk (lists written in place)
   when it would not fit `memory_budget`; `--index auto` measured on a sample; `shards`/Ray as any build.
3. A non-exact index's recall@10 against exact search is measured (exact truth computed block by block).
4. The commit links the file into the new generation (no copy) and hashes it block by block.

Memory: one block, the training sample and whatever index is built in memory; never all the vectors."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from engine.core.storage.builder.chunks import open_plan
from engine.core.storage.builder.commit import commit_collection, new_manifest
from engine.core.storage.builder.options import BuildReport
from engine.core.encoders.base import l2_normalize
from engine.core.storage.index.auto import choose, memory_bytes, parse_bytes
from engine.core.storage.index.faiss_index import FlatFile, build_index, is_exact, recall_at_k
from engine.core.storage.store.lock import writer_lock
from engine.core.storage.store.npy_rows import BLOCK, NpyFile, NpyRows
from engine.core.storage.store.stored import EXTRAS, MANIFEST, Extras, collection_path
from engine.errors import EngineError, opt
from engine.io.ids import check_unique
from engine.progress import info, make_progress, warn

RECALL_QUERIES = 200
"""Own vectors sampled as queries to measure a non-exact index's recall@10."""


@dataclass(frozen=True)
class VectorPlan:
    """How `commit_vectors` stores vectors: the FAISS `index` ("auto": measured on `queries` for `recall` within
    `memory_budget` bytes), per-row `meta`, `force` to replace a collection, `extras` stored beside them; and
    what `engine build --vectors` adds: the `sources` named in the manifest, the input's `signature` (a killed
    build of the same input resumes), rows per `block`, `shards` (built `on_ray`), seconds to `wait` for the
    writer lock, the `report` to fill."""
    index: str = "Flat"
    meta: Sequence[dict] | Iterable[dict] | None = None
    force: bool = False
    extras: Extras = Extras()
    queries: np.ndarray | None = None
    recall: float = 0.95
    memory_budget: str | int | None = None
    sources: Sequence[str] = ("vectors",)
    signature: str | None = None
    block: int = BLOCK
    shards: int = 1
    on_ray: bool = False
    wait: float = 0.0
    report: BuildReport | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> "VectorPlan":
        """The plan of `Collection.from_vectors(**options)`: index, meta, force, queries, recall, memory_budget
        and the `Extras` (arrays, files, documents, extra); another keyword is a TypeError naming it."""
        unknown = sorted(set(options) - set(EXTRAS) - set(PUBLIC_OPTIONS))
        if unknown:
            raise TypeError(f"unexpected option {unknown[0]!r} of from_vectors "
                            f"(known: {', '.join(PUBLIC_OPTIONS + EXTRAS)})")
        return cls(extras=Extras(**{k: v for k, v in options.items() if k in EXTRAS}),
                   **{k: v for k, v in options.items() if k not in EXTRAS})


PUBLIC_OPTIONS = ("index", "meta", "force", "queries", "recall", "memory_budget")


def commit_vectors(name: str, ids: Sequence[str] | None, vectors: np.ndarray | NpyRows, encoder_spec: str | None,
                   kind: str, root: str | Path | None = None, plan: VectorPlan = VectorPlan()) -> Path:
    """See `Collection.from_vectors`; returns the collection's folder. `ids` None: the row numbers."""
    p = plan
    index, meta, queries, block, shards = p.index, p.meta, p.queries, p.block, p.shards
    path = collection_path(name, root)
    report = p.report if p.report is not None else BuildReport()
    n, dim = _check_shapes(vectors, ids, meta)
    if ids is not None:
        check_unique([str(i) for i in ids], "id", name)
    budget = parse_bytes(None if p.memory_budget is None else str(p.memory_budget))
    with writer_lock(path, wait=p.wait):
        if (path / MANIFEST).exists() and not p.force:
            raise EngineError(f"collection {name!r} already exists in {path.parent}/; rebuild it with "
                              f"{opt('force')}")
        partial = open_plan(path, p.signature, {"count": n, "dim": dim, "block": block, "index": index,
                                              "shards": shards})
        rows = normalized_copy(vectors, partial, block, report)
        fields: dict[str, Any] = {}
        if index == "auto":
            label = "the vectors users send"
            if queries is None:
                queries, label = _own_queries(rows, 500), f"{min(500, n)} of the collection's own vectors"
            faiss_index, choice = choose(rows, l2_normalize(np.atleast_2d(queries)), p.recall, budget, label)
            factory = choice.factory
            fields = {"recall_at_10": choice.recall, "index_choice": choice.manifest(),
                      "search_params": choice.params}
        else:
            factory = index
            faiss_index = vector_index(rows, index, partial, budget, shards, p.on_ray)
            if not is_exact(index):
                report.recall_at_10 = float(recall_at_k(faiss_index, rows, _own_queries(rows, RECALL_QUERIES)))
                fields["recall_at_10"] = report.recall_at_10
                info(f"recall@10 of {index!r} against exact search on {min(n, RECALL_QUERIES)} own vectors: "
                     f"{report.recall_at_10:.3f}")
        manifest = new_manifest(name, kind, encoder_spec, dim, factory, list(p.sources),
                                **({"shards": shards} if shards > 1 else {}))
        manifest.update(fields)
        commit_collection(path, manifest, rows, _items(ids, meta, n), faiss_index, p.extras, count=n)
    return path


def _check_shapes(vectors, ids, meta) -> tuple[int, int]:
    shape = getattr(vectors, "shape", None)
    if shape is None or len(shape) != 2:
        raise EngineError(f"vectors must be a 2-D (rows, dim) array, not shape {shape}")
    n, dim = int(shape[0]), int(shape[1])
    counts = [c for c in (None if ids is None else len(ids),
                          len(meta) if isinstance(meta, Sequence) else None) if c is not None]
    if any(c != n for c in counts):
        raise EngineError(f"{len(ids) if ids is not None else n} ids, {n} vectors and "
                          f"{len(meta) if isinstance(meta, Sequence) else n} metadata rows must match")
    if n == 0 or dim == 0:
        raise EngineError(f"no vectors to index (shape {shape})")
    return n, dim


def _items(ids: Sequence[str] | None, meta, n: int) -> Iterator[dict]:
    rows = iter(meta) if meta is not None else None
    for i in range(n):
        row = next(rows) if rows is not None else {}
        yield {"id": str(ids[i]) if ids is not None else str(i), **row}


def normalized_copy(vectors, partial: Path, block: int, report: BuildReport) -> NpyRows:
    """`partial/embeddings.npy`: the vectors L2-normalized, block by block; blocks a killed run finished
    (marked in `blocks.bin`) are kept."""
    n, dim = int(vectors.shape[0]), int(vectors.shape[1])
    out = NpyFile(partial / "embeddings.npy", n, dim)
    marks = _Marks(partial / "blocks.bin", -(-n // block), reset=out.fresh)
    zero = 0
    with make_progress() as bar:
        task = bar.add_task("normalizing vectors", total=n)
        for b, lo in enumerate(range(0, n, block)):
            hi = min(n, lo + block)
            if marks.done(b):
                report.resumed += hi - lo
            else:
                part = np.asarray(vectors[lo:hi], dtype=np.float32)
                check_block(part, lo, vectors)
                zero += int(np.count_nonzero(~part.any(axis=1)))
                out.write(lo, l2_normalize(part))
                marks.mark(b)
                report.encoded += hi - lo
            bar.advance(task, hi - lo)
    if report.resumed:
        info(f"resumed: {report.resumed} vectors were already written by an interrupted build")
    if zero:
        warn(f"{zero:,} of {n:,} vectors are all zeros: they are stored as they are and score 0 against every "
             "query (give them a direction, or leave them out)")
    return out.rows()


def row_source(vectors, row: int) -> str:
    """Where row `row` of `vectors` comes from: a file and its row for `.npy` input, else the row."""
    if isinstance(vectors, NpyRows):
        r = vectors.lo + row
        for p, start in zip(vectors.parts, vectors.starts[:-1]):
            if start <= r < start + p.rows:
                return f"{p.path}: row {r - int(start) + 1}"
    return f"vector row {row + 1}"


def check_block(part: np.ndarray, lo: int, vectors) -> None:
    """Rows `lo`.. of the input, refused in one line when one holds NaN or an infinity: such a row would be
    stored as NaN (every search and `engine verify` would then fail)."""
    bad = ~np.isfinite(part).all(axis=1)
    if bad.any():
        r = lo + int(np.argmax(bad))
        raise EngineError(f"{row_source(vectors, r)}: holds NaN or an infinity (float32 holds up to ~3.4e38); "
                          "every value of a vector must be a finite number")


class _Marks:
    """One byte per block, set once the block's rows are written (a killed build's progress)."""

    def __init__(self, path: Path, blocks: int, reset: bool = False):
        self.path = path
        if reset or not path.is_file() or path.stat().st_size != blocks:
            path.write_bytes(bytes(blocks))
        self.state = bytearray(path.read_bytes())

    def done(self, b: int) -> bool:
        return bool(self.state[b])

    def mark(self, b: int) -> None:
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, b"\1", b)
        finally:
            os.close(fd)
        self.state[b] = 1


def vector_index(rows: NpyRows, factory: str, partial: Path, budget: int | None, shards: int, on_ray: bool):
    """The index over normalized rows on disk: Flat streamed, sharded / Ray as any build, IVF on disk when it
    would not fit `budget`, else built in memory block by block."""
    from engine.core.storage.index.ondisk import build_ivf_blocks, is_ivf
    n, dim = rows.shape
    info(f"building FAISS index {factory!r} over {n:,} × {dim}")
    if shards > 1 or (on_ray and is_ivf(factory)):
        from engine.core.storage.index.shards import build_scaled_index
        return build_scaled_index(rows, factory, shards, on_ray=on_ray, workdir=partial)
    if factory == "Flat":
        return FlatFile(rows)
    if budget is not None and is_ivf(factory) and memory_bytes(factory, n, dim) > budget:
        info(f"{factory} over {n:,} × {dim} needs ≈ {memory_bytes(factory, n, dim) / 2**20:,.0f} MiB, more than "
             f"{opt('memory_budget')}: its lists are written on disk")
        return build_ivf_blocks(rows, factory, partial / "ivf", trained_file=partial / "trained.faiss")
    return build_index(rows, factory)


def _own_queries(rows, n: int) -> np.ndarray:
    pick = np.sort(np.random.default_rng(0).choice(len(rows), min(n, len(rows)), replace=False))
    return np.asarray(rows[pick], dtype=np.float32)


@dataclass(frozen=True)
class VectorFiles:
    """`engine build --vectors PATH [--ids FILE] [--meta FILE] [--encoder SPEC]`: the files of vectors computed
    elsewhere, their ids and metadata, and the encoder that made them (None: searched by vector only)."""
    vectors: str | Path
    ids: str | Path | None = None
    meta: str | Path | None = None
    encoder_spec: str | None = None


def build_from_vector_files(name: str, source: VectorFiles, root: str | Path | None = None, options=None,
                            report: BuildReport | None = None, **settings: Any) -> Path:
    """`engine build NAME --vectors PATH [--ids FILE] [--meta FILE] [--encoder SPEC]`: every input checked
    (headers, widths, counts, the spec's spelling) before a vector is read, then `commit_vectors`."""
    from engine.core.storage.builder.options import build_options
    from engine.core.storage.builder.vector_files import open_meta, open_vectors, read_ids, source_signature
    from engine.io.ids import trec_safe_ids
    vectors, ids, meta, encoder_spec = source.vectors, source.ids, source.meta, source.encoder_spec
    o = build_options(options, **settings)
    if o.add:
        raise EngineError(f"{opt('vectors')} builds a whole collection; {opt('add')} is for encoded sources "
                          f"(rebuild with {opt('force')} and all the vectors)")
    kind = "vectors"
    if encoder_spec:
        from engine.core.encoders.registry import modalities_of
        kind = "image" if "image" in modalities_of(encoder_spec) else "text"
    rows = open_vectors(vectors)
    if encoder_spec:
        check_encoder_dim(encoder_spec, rows.dim, vectors)
    id_list = read_ids(ids, len(rows)) if ids is not None else None
    if id_list is not None:
        id_list = trec_safe_ids(id_list, o.id_policy, ids)
    rows_meta = open_meta(meta, len(rows)) if meta is not None else None
    signature = source_signature(rows)
    info(f"{len(rows):,} vectors of {rows.dim} dimensions in {len(rows.parts)} file(s) from {vectors}")

    def run(on_ray: bool) -> Path:
        return commit_vectors(name, id_list, rows, encoder_spec, kind, root, VectorPlan(
            o.factory(), rows_meta, o.force, recall=o.recall, memory_budget=o.memory_budget, sources=[str(vectors)],
            signature=signature, block=o.chunk_size, shards=o.shards, on_ray=on_ray, wait=o.wait, report=report))
    from engine.core.cluster import ray_or_here
    with ray_or_here(o.ray):
        path = run(o.ray is not None)
    info(f"collection {name!r}: {len(rows):,} vectors in {path}")
    return path


def check_encoder_dim(spec: str, dim: int, vectors) -> None:
    """Vectors given with `--encoder` must be that encoder's width: else every later query of the collection
    fails. The encoder's query side is loaded to read its width (the collection's queries need it anyway)."""
    from engine.core.encoders.registry import load_image_query_encoder, modalities_of, load_text_query_encoder
    side = load_text_query_encoder if "text" in modalities_of(spec) else load_image_query_encoder
    want = int(side(spec).dim)
    if want != dim:
        raise EngineError(f"{vectors}: {dim}-d vectors, but {opt('encoder')} {spec} embeds queries in {want} "
                          f"dimensions; give the vectors that encoder made (or leave out {opt('encoder')} for a "
                          "collection searched by vector only)")
