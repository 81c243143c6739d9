"""Resumable chunked encoding: embeddings are flushed per chunk into `NAME/.partial/`; a killed build run
again with the same input skips the chunks it finished. The chunk is the unit for local and Ray builds alike."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from engine.core.build.options import BuildOptions, BuildReport
from engine.core.sources import Item
from engine.core.store.stored import PARTIAL
from engine.io.atomic import atomic_open, write_json
from engine.progress import info, make_progress, warn


def _plan_signature(encoder_spec: str, kind: str, items: Sequence[Item], chunk_size: int) -> str:
    h = hashlib.sha256(json.dumps([encoder_spec, kind, chunk_size]).encode())
    for it in items:
        h.update(it.id.encode() + b"\0" + it.source.encode() + b"\1")
    return h.hexdigest()


def open_partial(path: Path, encoder_spec: str, kind: str, items: Sequence[Item], chunk_size: int) -> Path:
    """`NAME/.partial/` for this plan: kept when it holds chunks of the same input, else started over."""
    partial = path / PARTIAL
    signature = _plan_signature(encoder_spec, kind, items, chunk_size)
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
                               "encoder": encoder_spec})
    return partial


def length_order(items: Sequence[Item]) -> np.ndarray:
    """Texts longest first across the whole input (stable), as one `SentenceTransformer.encode` over all of them
    orders them: chunks of similar lengths pad less than chunks sorted only within themselves (2 % fewer padded
    tokens on 20,000 texts of 8–80 words, chunks of 1024). The order is a function of the input, so resume
    still finds the same chunks."""
    return np.argsort([-len(it.source) for it in items], kind="stable")


def in_input_order(order: np.ndarray, emb: np.ndarray, kept: Sequence[int], failed: Sequence[tuple[int, str]]
                   ) -> tuple[np.ndarray, list[int], list[tuple[int, str]]]:
    """`encode_chunked`'s result over items[order] with rows and positions back in the input's order."""
    original = np.asarray(order)[np.asarray(kept, dtype=np.int64)]
    back = np.argsort(original, kind="stable")
    return emb[back], [int(i) for i in original[back]], sorted((int(order[p]), r) for p, r in failed)


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


def encode_local(encoder, kind: str, items: Sequence[Item], todo: Sequence[int], o: BuildOptions
                  ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(chunk number, chunk data) for each chunk in `todo`, encoded in this process."""
    bounds = chunk_bounds(len(items), o.chunk_size)
    for c in todo:
        chunk = items[bounds[c][0]:bounds[c][1]]
        if kind == "text":
            yield c, chunk_data(encoder.encode_texts([it.source for it in chunk], batch_size=o.batch_size),
                                range(len(chunk)), [])
        else:
            res = encoder.encode_images([it.source for it in chunk], batch_size=o.batch_size, workers=o.workers)
            yield c, chunk_data(res.embeddings, res.ok, res.failed)


def encode_chunked(path: Path, encoder, kind: str, items: Sequence[Item], o: BuildOptions,
                    report: BuildReport, encode_chunks=encode_local
                    ) -> tuple[np.ndarray, list[int], list[tuple[int, str]]]:
    """Encode in chunks flushed to `.partial/`; chunks already there from an interrupted run are reused.
    `encode_chunks(encoder, kind, items, todo, o)` yields (chunk, data) for the missing ones in any order
    (`engine.core.build.ray_encode` runs them on Ray)."""
    partial = open_partial(path, encoder.spec, kind, items, o.chunk_size)
    bounds = chunk_bounds(len(items), o.chunk_size)
    done: dict[int, dict[str, np.ndarray]] = {}
    with make_progress() as bar:
        task = bar.add_task(f"encoding {kind}s", total=len(items))
        for c, (lo, hi) in enumerate(bounds):
            data = _read_chunk(partial / f"chunk-{c:06d}.npz")
            if data is not None:
                done[c] = data
                report.resumed += hi - lo
                bar.advance(task, hi - lo)
        todo = [c for c in range(len(bounds)) if c not in done]
        for c, data in encode_chunks(encoder, kind, items, todo, o):
            with atomic_open(partial / f"chunk-{c:06d}.npz", "wb") as fh:
                np.savez(fh, **data)
            done[c] = data
            report.encoded += bounds[c][1] - bounds[c][0]
            bar.advance(task, bounds[c][1] - bounds[c][0])
    if report.resumed:
        info(f"resumed: {report.resumed} items were already encoded by an interrupted build")
    embs, kept, failed = [], [], []
    for c, (lo, _) in enumerate(bounds):
        data = done[c]
        embs.append(data["emb"].reshape(-1, encoder.dim))
        kept.extend(int(i) + lo for i in data["ok"])
        failed.extend((int(p) + lo, str(r)) for p, r in zip(data["bad_pos"], data["bad_reason"]))
    emb = np.concatenate(embs) if embs else np.zeros((0, encoder.dim), np.float32)
    return emb, kept, failed
