"""Resumable chunked encoding: embeddings are flushed per chunk into `NAME/.partial/`; a killed build run
again with the same input skips the chunks it finished. The chunk is the unit for local and Ray builds alike."""
from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from engine.core.storage.builder.item_source import Items, chunk_items
from engine.core.storage.builder.options import BuildOptions, BuildReport
from engine.core.encoders.device import batch_size_for
from engine.core.sources import Item
from engine.core.storage.store.npy_rows import NpyFile, NpyRows
from engine.core.storage.store.stored import PARTIAL
from engine.io.atomic import atomic_open, write_json
from engine.progress import info, make_progress, warn


PROGRESS_STEP = 256
"""Items encoded between two moves of the progress bar (at least four batches)."""
MIN_SLICE = 16
"""Texts a slice holds at least when a small chunk is dealt to parallel slices (fewer: one slice)."""


def _plan_signature(encoder_spec: str, kind: str, items: Items, chunk_size: int) -> str:
    h = hashlib.sha256(json.dumps([encoder_spec, kind, chunk_size]).encode())
    for it in items:
        h.update(it.id.encode() + b"\0" + it.source.encode() + b"\1")
    return h.hexdigest()


def open_partial(path: Path, encoder_spec: str, kind: str, items: Items, chunk_size: int) -> Path:
    """`NAME/.partial/` for this plan: kept when it holds chunks of the same input, else started over."""
    return open_plan(path, _plan_signature(encoder_spec, kind, items, chunk_size),
                     {"count": len(items), "chunk_size": chunk_size, "encoder": encoder_spec})


def open_plan(path: Path, signature: str | None, fields: dict) -> Path:
    """`NAME/.partial/` for the input `signature` names (with `fields`, which also must match): kept when an
    interrupted build of the same input left it, else started over. None: an input that cannot be named
    (an array in memory): always started over."""
    partial = path / PARTIAL
    plan_file = partial / "plan.json"
    plan = {"signature": signature, **fields}
    if partial.is_dir():
        try:
            same = signature is not None and json.loads(plan_file.read_text()) == plan
        except (OSError, ValueError):
            same = False
        if not same:
            if signature is not None:
                warn(f"{partial} holds an interrupted build of different input; starting over")
            shutil.rmtree(partial)
    if not partial.is_dir():
        partial.mkdir(parents=True)
        write_json(plan_file, plan)
    return partial


def chunk_bounds(n_items: int, chunk_size: int) -> list[tuple[int, int]]:
    """(lo, hi) item positions of each chunk: the resume unit, the same for local and distributed builds."""
    return [(lo, min(n_items, lo + chunk_size)) for lo in range(0, n_items, chunk_size)]


def chunk_data(emb: np.ndarray, ok: Sequence[int], bad: Sequence[tuple[int, str]]) -> dict[str, np.ndarray]:
    """One chunk as stored: rows of the items read (`ok`, positions in the chunk) and the failures."""
    return {"emb": np.asarray(emb, dtype=np.float32), "ok": np.asarray(ok, dtype=np.int64),
            "bad_pos": np.asarray([p for p, _ in bad], dtype=np.int64),
            "bad_reason": np.asarray([r for _, r in bad], dtype=str)}


def _read_chunk(cfile: Path) -> dict[str, np.ndarray] | None:
    if not cfile.is_file():
        return None
    try:
        with np.load(cfile) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError):
        return None  # unreadable chunk: encode it again


def encode_local(encoder, kind: str, items: Items, todo: Sequence[int], o: BuildOptions,
                 tick: Callable[[int, int], None] | None = None) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(chunk number, chunk data) for each chunk in `todo`, encoded in this process; `tick(chunk, n)` after
    each slice of a chunk, so a progress bar moves within a chunk (a small build is one chunk)."""
    for c, chunk in chunk_items(items, chunk_bounds(len(items), o.chunk_size), todo):
        step = max(PROGRESS_STEP, batch_size_for(o.batch_size, kind, o.device) * 4)
        ticked = (lambda n, c=c: tick(c, n)) if tick is not None else None
        if kind == "text":
            yield c, _texts_longest_first(encoder, chunk, step, o, ticked)
            continue
        parts = []
        for lo in range(0, len(chunk), step):
            part = [it.source for it in chunk[lo:lo + step]]
            res = encoder.encode_images(part, batch_size=o.batch_size, workers=o.workers, max_pixels=o.batch_pixels)
            parts.append((res.embeddings, res.ok, res.failed))
            if ticked is not None:
                ticked(len(part))
        yield c, _joined(parts, step)


def _texts_longest_first(encoder, chunk: Sequence[Item], step: int, o: BuildOptions,
                         tick: Callable[[int], None] | None) -> dict[str, np.ndarray]:
    """A chunk's texts encoded by `texts_longest_first`, as the chunk's data."""
    return chunk_data(texts_longest_first(encoder, [it.source for it in chunk], step, o.batch_size, tick),
                      range(len(chunk)), [])


def texts_longest_first(encoder, texts: Sequence[str], step: int, batch_size: int | str,
                        tick: Callable[[int], None] | None = None) -> np.ndarray:
    """Texts encoded longest first, in slices of `step` (the progress bar's unit), rows put back in the input's
    order: slices cut in input order pad every batch to a random neighbour's length, slices cut from the length
    order pad as little as one `encode` over them does. An encoder whose info says `parallel` N (the CPU build's
    ONNX sessions: `from_source.build_encoder`) takes N slices at once."""
    from concurrent.futures import ThreadPoolExecutor
    order = np.argsort(-np.fromiter(map(len, texts), np.int64, len(texts)), kind="stable")
    parallel = int(getattr(encoder, "info", {}).get("parallel", 1))
    if len(order) <= step * parallel:  # too few for a full slice each: dealt in turn (alike in length), to as
        dealt = max(1, min(parallel, len(order) // MIN_SLICE))  # many slices as hold MIN_SLICE texts each
        groups = [order[i::dealt] for i in range(dealt)]
    else:
        groups = [order[lo:lo + step] for lo in range(0, len(order), step)]
    parts = [[texts[i] for i in g] for g in groups]

    def encode(part: list[str]) -> np.ndarray:
        return np.asarray(encoder.encode_texts(part, batch_size=batch_size), dtype=np.float32)
    parallel = min(parallel, len(parts))
    rows = []
    with ThreadPoolExecutor(parallel) if parallel > 1 else contextlib.nullcontext() as pool:
        for part, emb in zip(parts, pool.map(encode, parts) if pool is not None else map(encode, parts)):
            rows.append(emb)
            if tick is not None:
                tick(len(part))
    emb = np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)
    out = np.empty_like(emb)
    out[np.concatenate(groups) if groups else order] = emb
    return out


def encode_texts(encoder, texts: Sequence[str], o: BuildOptions, what: str = "texts") -> np.ndarray:
    """Texts held in memory (a task's questions) encoded as a build encodes a chunk's (`texts_longest_first`,
    in slices of the build's size), with a progress bar: float32 rows in the texts' order."""
    if len(texts) == 0:
        return np.zeros((0, encoder.dim), np.float32)
    step = max(PROGRESS_STEP, batch_size_for(o.batch_size, "text", o.device) * 4)
    with make_progress() as bar:
        task = bar.add_task(f"encoding {what}", total=len(texts))
        return texts_longest_first(encoder, list(texts), step, o.batch_size, lambda n: bar.advance(task, n))


def _joined(parts: list, step: int) -> dict[str, np.ndarray]:
    """One chunk's data from its slices' (embeddings, ok positions, failures), positions made chunk-wide."""
    emb = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, 0), np.float32)
    ok = [n * step + i for n, p in enumerate(parts) for i in p[1]]
    bad = [(n * step + i, r) for n, p in enumerate(parts) for i, r in p[2]]
    return chunk_data(emb, ok, bad)


def encode_chunked(path: Path, encoder, kind: str, items: Items, o: BuildOptions,
                    report: BuildReport, encode_chunks=encode_local, prefix: NpyRows | None = None
                    ) -> tuple[NpyRows, np.ndarray, list[tuple[int, str]]]:
    """Encode in chunks flushed to `.partial/`; chunks already there from an interrupted run are reused.
    `encode_chunks(encoder, kind, items, todo, o)` yields (chunk, data) for the missing ones in any order
    (`engine.core.storage.builder.ray_encode` runs them on Ray). Returns the embeddings assembled on disk (`assemble`:
    `prefix`'s rows first), the positions of the items kept and the failures."""
    partial = open_partial(path, encoder.spec, kind, items, o.chunk_size)
    bounds = chunk_bounds(len(items), o.chunk_size)
    with make_progress() as bar:
        task = bar.add_task(f"encoding {kind}s", total=len(items))
        ticked: dict[int, int] = {}

        def tick(c: int, n: int) -> None:
            ticked[c] = ticked.get(c, 0) + n
            bar.advance(task, n)
        done = set()
        for c, (lo, hi) in enumerate(bounds):
            if _read_chunk(partial / f"chunk-{c:06d}.npz") is not None:
                done.add(c)
                report.resumed += hi - lo
                bar.advance(task, hi - lo)
        todo = [c for c in range(len(bounds)) if c not in done]
        extra = {"tick": tick} if encode_chunks is encode_local else {}
        for c, data in encode_chunks(encoder, kind, items, todo, o, **extra):
            with atomic_open(partial / f"chunk-{c:06d}.npz", "wb") as fh:
                np.savez(fh, **data)
            report.encoded += bounds[c][1] - bounds[c][0]
            bar.advance(task, bounds[c][1] - bounds[c][0] - ticked.pop(c, 0))
            del data
    if report.resumed:
        info(f"resumed: {report.resumed} items were already encoded by an interrupted build")
    return assemble(partial, bounds, encoder.dim, prefix)


def assemble(partial: Path, bounds: Sequence[tuple[int, int]], dim: int, prefix: NpyRows | None = None
             ) -> tuple[NpyRows, np.ndarray, list[tuple[int, str]]]:
    """`partial/embeddings.npy` from the chunk files, one chunk in memory at a time (after `prefix`'s rows,
    copied block by block: the old rows of `--add`); the kept item positions (ascending, 8 bytes each) and the
    failures."""
    kept_parts: list[np.ndarray] = []
    failed: list[tuple[int, str]] = []
    for c, (lo, _) in enumerate(bounds):
        with np.load(partial / f"chunk-{c:06d}.npz") as z:  # an npz reads only the arrays asked for
            kept_parts.append(z["ok"].astype(np.int64) + lo)
            failed.extend((int(p) + lo, str(r)) for p, r in zip(z["bad_pos"], z["bad_reason"]))
    kept = np.concatenate(kept_parts) if kept_parts else np.zeros(0, np.int64)
    del kept_parts
    start = len(prefix) if prefix is not None else 0
    out = NpyFile(partial / "embeddings.npy", start + len(kept), dim)
    for lo, rows in (prefix.blocks() if prefix is not None else ()):
        out.write(lo, rows)
    at = start
    for c in range(len(bounds)):
        with np.load(partial / f"chunk-{c:06d}.npz") as z:
            emb = z["emb"].reshape(-1, dim)
        out.write(at, emb)
        at += len(emb)
    return out.rows(), kept, failed
