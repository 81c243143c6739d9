"""Builds on Ray: the items read a chunk at a time and handed to Ray Data as one block per chunk, images
decoded in tasks, embeddings computed in an actor pool (one model per actor, one
GPU per actor where the cluster has GPUs).

Only the encoding moves: chunks come back to the driver and go through `engine.core.storage.builder.chunks` exactly as a
local build's do (same `.partial/` plan, same chunk files and signatures), so a killed distributed build
resumes, locally or on Ray, and a distributed build gives the collection a local build gives. Ray restarts
a killed actor and re-runs its block (`max_restarts`/`max_task_retries` on the pool, `max_retries` on the
decode tasks); an unreadable image is a failure row, skipped and listed in the manifest as locally.

Ray comes through `engine.core.cluster`, which imports it only when a build asks for it.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from engine.core.storage.builder.chunks import chunk_bounds, chunk_data
from engine.core.storage.builder.item_source import chunk_items
from engine.core.cluster import TASK_RETRIES, cluster_resources, import_ray

if TYPE_CHECKING:
    from engine.core.storage.builder.item_source import Items
    from engine.core.storage.builder.options import BuildOptions
    from engine.core.sources import Item


@lru_cache(maxsize=4)
def _preprocess(blob: bytes):
    """The encoder's image transform, unpickled once per worker after torchvision is made importable."""
    from ray import cloudpickle

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before torchvision is unpickled)
    return cloudpickle.loads(blob)


def _decode(batch: dict[str, np.ndarray], transform: bytes) -> dict[str, np.ndarray]:
    """Ray Data task: image files → model-ready arrays; an unreadable file becomes a failure row."""
    from engine.core.images import ImageReadError, load_image
    from PIL import Image
    preprocess = _preprocess(transform)
    blank = np.zeros_like(np.asarray(preprocess(Image.new("RGB", (8, 8))), dtype=np.float32))  # a failure's row
    pixels, errors = [], []
    for path in batch["source"]:
        try:
            pixels.append(np.asarray(preprocess(load_image(str(path))), dtype=np.float32))
            errors.append("")
        except ImageReadError as exc:
            pixels.append(blank)
            errors.append(str(exc))
        except Exception as exc:  # as in a local build: one odd file must not end a long build
            pixels.append(blank)
            errors.append(f"unreadable ({type(exc).__name__}: {exc})")
    return {"chunk": batch["chunk"], "pos": batch["pos"], "pixels": np.stack(pixels),
            "error": np.asarray(errors, dtype=object)}


class _Encode:
    """Ray Data actor: one model per actor, loaded once, fed batches of texts or decoded images."""

    def __init__(self, spec: str, kind: str, threads: int, batch_size: int, prompt: str | None = None):
        from engine.core.encoders.base import configure_threads
        from engine.core.encoders.prompts import prompted
        from engine.core.encoders.registry import load_encoder
        configure_threads(threads)
        self.encoder, self.kind, self.batch_size = prompted(load_encoder(spec), prompt), kind, batch_size

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(batch["pos"])
        emb = np.zeros((n, self.encoder.dim), np.float32)
        if self.kind == "text":
            emb[:] = self.encoder.encode_texts([str(t) for t in batch["source"]], batch_size=self.batch_size)
            errors = np.full(n, "", dtype=object)
        else:
            import torch
            errors = batch["error"]
            ok = [i for i in range(n) if not errors[i]]
            if ok:
                stacked = torch.from_numpy(np.ascontiguousarray(batch["pixels"][ok], dtype=np.float32))
                emb[ok] = self.encoder.encode_image_batch(stacked)
        return {"chunk": batch["chunk"], "pos": batch["pos"], "emb": emb, "error": errors}


def _encode_actor(spec: str, kind: str, threads: int, batch_size: int, prompt: str | None = None) -> type:
    """`_Encode` with its settings bound: no constructor arguments (Ray would keep them in the object store,
    and warn that a restarted actor could lose them)."""
    class EncodeActor(_Encode):
        def __init__(self) -> None:
            super().__init__(spec, kind, threads, batch_size, prompt)
    return EncodeActor


def encode_on_ray(encoder, kind: str, items: "Items", todo: Sequence[int], o: "BuildOptions"
                  ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """`engine.core.storage.builder.chunks`' chunk encoder on Ray: (chunk number, chunk data) as each chunk completes.
    The driver reads the items a chunk at a time (a source is streamed) and puts each chunk's table in the
    object store as it goes, one Ray Data block per chunk; it only regroups rows (in any order) into their
    chunks."""
    ray = import_ray()
    from ray import cloudpickle
    bounds = chunk_bounds(len(items), o.chunk_size)
    if not todo:
        return
    # each chunk's table goes to the object store as it is read (spilled to disk by Ray when full): the
    # driver holds one chunk and the references
    refs = [ray.put(_chunk_table(c, chunk)) for c, chunk in chunk_items(items, bounds, todo)]
    ds = ray.data.from_arrow_refs(refs)  # one block per chunk
    del refs
    cpus, gpus = cluster_resources()
    from engine.core.encoders.device import batch_size_for
    batch = batch_size_for(o.batch_size, kind, "cuda" if gpus else "cpu")  # an int: the CLI gives "32" or "auto"
    if kind == "image":
        ds = ds.map_batches(_decode, fn_kwargs={"transform": cloudpickle.dumps(encoder.preprocess)},
                            batch_size=batch, num_cpus=1, max_retries=TASK_RETRIES)
    actors = gpus if gpus else max(1, cpus // 2 if kind == "image" else cpus)
    ds = ds.map_batches(_encode_actor(encoder.spec, kind, o.threads, batch, encoder.info.get("prompt")),
                        batch_size=batch, compute=ray.data.ActorPoolStrategy(size=actors),
                        num_gpus=1 if gpus else 0,
                        num_cpus=1, batch_format="numpy")
    pending: dict[int, list[dict[str, np.ndarray]]] = {}
    have: dict[int, int] = {}
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for c in np.unique(batch["chunk"]):
            c = int(c)
            mask = batch["chunk"] == c
            pending.setdefault(c, []).append({k: batch[k][mask] for k in ("pos", "emb", "error")})
            have[c] = have.get(c, 0) + int(mask.sum())
            if have[c] == bounds[c][1] - bounds[c][0]:
                yield c, _assemble(pending.pop(c), encoder.dim)


def _chunk_table(c: int, chunk: Sequence["Item"]):
    """A chunk's rows as a columnar Arrow table (chunk, position, source): a few bytes a row beyond the
    source text, where a list of row dicts costs hundreds."""
    import pyarrow as pa
    return pa.table({"chunk": pa.array(np.full(len(chunk), c, np.int64)), "pos": pa.array(np.arange(len(chunk))),
                     "source": pa.array([it.source for it in chunk], pa.string())})


def _assemble(parts: list[dict[str, np.ndarray]], dim: int) -> dict[str, np.ndarray]:
    """A chunk's rows, back in item order, in the local build's chunk format."""
    pos = np.concatenate([p["pos"] for p in parts]).astype(np.int64)
    emb = np.concatenate([p["emb"].reshape(-1, dim) for p in parts])
    errors = np.concatenate([p["error"] for p in parts])
    order = np.argsort(pos, kind="stable")
    pos, emb, errors = pos[order], emb[order], errors[order]
    ok = [i for i in range(len(pos)) if not errors[i]]
    bad = [(int(pos[i]), str(errors[i])) for i in range(len(pos)) if errors[i]]
    return chunk_data(emb[ok], pos[ok], bad)
