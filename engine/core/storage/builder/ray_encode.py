"""Builds on Ray: the items read a chunk at a time and handed to Ray Data as one block per chunk, images
decoded in tasks (or, for a model whose own processor sizes them, in its actors), embeddings computed in an
actor pool (one model per actor, one GPU per actor where the cluster has GPUs); a text collection's learned
roles (`--sparse`, `--multivector`) are encoded in an actor pool of their own, in the same chunks.

Only the encoding moves: chunks come back to the driver and go through `engine.core.storage.builder.chunks` exactly as a
local build's do (same `.partial/` plan, same chunk files and signatures), so a killed distributed build
resumes, locally or on Ray, and a distributed build gives the collection a local build gives. Ray restarts
a killed actor and re-runs its block (`max_restarts`/`max_task_retries` on the pool, `max_retries` on the
decode tasks); an unreadable image is a failure row, skipped and listed in the manifest as locally.

Ray comes through `engine.core.cluster`, which imports it only when a build asks for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np

from engine.core.storage.builder.chunks import chunk_bounds, chunk_data
from engine.core.storage.builder.item_source import chunk_items
from engine.core.cluster import TASK_RETRIES, cluster_resources, import_ray

if TYPE_CHECKING:
    from engine.core.storage.builder.item_source import Items
    from engine.core.storage.builder.options import BuildOptions

PIL = "pil"
"""The actors' kind for image models whose own processor sizes the images: they read the paths themselves."""


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


@dataclass(frozen=True)
class ActorSettings:
    """What every encoding actor is told: torch threads, items per forward pass, and the build's precision
    (`--dtype`); an image model that sizes images itself also gets the decode threads and the pixel budget."""
    threads: int
    batch: int
    dtype: str = "auto"
    workers: int = 2
    pixels: int | None = None


class _Encode:
    """Ray Data actor: one model per actor, loaded once, fed batches of texts, decoded images, or (`pil`: a
    model whose own processor sizes images) image paths it reads itself, as a local build does."""

    def __init__(self, spec: str, kind: str, settings: ActorSettings, prompt: str | None = None):
        from engine.core.encoders.base import configure_threads
        from engine.core.encoders.device import set_dtype
        from engine.core.encoders.prompts import prompted
        from engine.core.encoders.registry import load_encoder
        configure_threads(settings.threads)
        set_dtype(settings.dtype)
        self.encoder, self.kind, self.settings = prompted(load_encoder(spec), prompt), kind, settings

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(batch["pos"])
        emb = np.zeros((n, self.encoder.dim), np.float32)
        if self.kind == "text":
            emb[:] = self.encoder.encode_texts([str(t) for t in batch["source"]], batch_size=self.settings.batch)
            errors = np.full(n, "", dtype=object)
        elif self.kind == PIL:  # the local build's own path: decode threads, the model's processor, pixel budget
            res = self.encoder.encode_images([str(p) for p in batch["source"]], batch_size=self.settings.batch,
                                             workers=self.settings.workers, max_pixels=self.settings.pixels)
            errors = np.full(n, "", dtype=object)
            for i, reason in res.failed:
                errors[i] = reason
            if res.ok:
                emb[res.ok] = res.embeddings
        else:
            import torch
            errors = batch["error"]
            ok = [i for i in range(n) if not errors[i]]
            if ok:
                stacked = torch.from_numpy(np.ascontiguousarray(batch["pixels"][ok], dtype=np.float32))
                emb[ok] = self.encoder.encode_image_batch(stacked)
        return {"chunk": batch["chunk"], "pos": batch["pos"], "emb": emb, "error": errors}


def _encode_actor(spec: str, kind: str, settings: ActorSettings, prompt: str | None = None) -> type:
    """`_Encode` with its settings bound: no constructor arguments (Ray would keep them in the object store,
    and warn that a restarted actor could lose them)."""
    class EncodeActor(_Encode):
        def __init__(self) -> None:
            super().__init__(spec, kind, settings, prompt)
    return EncodeActor


def _actor_settings(o: "BuildOptions", batch: int) -> ActorSettings:
    return ActorSettings(threads=o.threads, batch=batch, dtype=o.dtype, workers=o.workers, pixels=o.batch_pixels)


def encode_on_ray(encoder, kind: str, items: "Items", todo: Sequence[int], o: "BuildOptions"
                  ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """`engine.core.storage.builder.chunks`' chunk encoder on Ray: (chunk number, chunk data) as each chunk completes.
    The driver reads the items a chunk at a time (a source is streamed) and puts each chunk's table in the
    object store as it goes, one Ray Data block per chunk; it only regroups rows (in any order) into their
    chunks. Images are decoded in Ray tasks into the encoder's fixed-size tensors, except for a model whose
    own processor sizes them (`images_as_pil`: sentence-transformers' image–text models, VLM embedders): its
    actors read the paths themselves, as a local build's encoder does (same decoding, same failures)."""
    ray = import_ray()
    from ray import cloudpickle
    bounds = chunk_bounds(len(items), o.chunk_size)
    if not todo:
        return
    ds = _chunk_dataset(ray, (_chunk_table(c, [it.source for it in chunk])
                              for c, chunk in chunk_items(items, bounds, todo)))
    cpus, gpus = cluster_resources()
    from engine.core.encoders.device import batch_size_for
    batch = batch_size_for(o.batch_size, kind, "cuda" if gpus else "cpu")  # an int: the CLI gives "32" or "auto"
    decoded = kind == "image" and not encoder.info.get("images_as_pil")
    if decoded:
        ds = ds.map_batches(_decode, fn_kwargs={"transform": cloudpickle.dumps(encoder.preprocess)},
                            batch_size=batch, num_cpus=1, max_retries=TASK_RETRIES)
    actors = gpus if gpus else max(1, cpus // 2 if decoded else cpus)
    ds = ds.map_batches(_encode_actor(encoder.spec, kind if kind == "text" or decoded else PIL,
                                      _actor_settings(o, batch), encoder.info.get("prompt")),
                        batch_size=batch, compute=ray.data.ActorPoolStrategy(size=actors),
                        num_gpus=1 if gpus else 0,
                        num_cpus=1, batch_format="numpy")
    for c, parts in _chunks_back(ds, bounds, ("pos", "emb", "error")):
        yield c, _assemble(parts, encoder.dim)


def _chunk_dataset(ray, tables: Iterable):
    """A Ray dataset of one block per chunk table, each put in the object store as it is read (spilled to
    disk by Ray when full): the driver holds one chunk and the references."""
    refs = [ray.put(table) for table in tables]
    return ray.data.from_arrow_refs(refs)


def _chunks_back(ds, bounds: Sequence[tuple[int, int]], keys: Sequence[str]
                 ) -> Iterator[tuple[int, list[dict[str, np.ndarray]]]]:
    """(chunk, its rows' parts) as each chunk's last row comes back from `ds` (rows arrive in any order)."""
    pending: dict[int, list[dict[str, np.ndarray]]] = {}
    have: dict[int, int] = {}
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for c in np.unique(batch["chunk"]):
            c = int(c)
            mask = batch["chunk"] == c
            pending.setdefault(c, []).append({k: batch[k][mask] for k in keys})
            have[c] = have.get(c, 0) + int(mask.sum())
            if have[c] == bounds[c][1] - bounds[c][0]:
                yield c, pending.pop(c)


class _EncodeLearned:
    """Ray Data actor of a learned role (`--sparse`, `--multivector`): one model per actor, fed batches of
    texts through the role's own document encoding (`encode(name, texts, query=False, batch_size=…)`); each
    text's result (a sparse vector's terms and weights, or token vectors) comes back as bytes."""

    def __init__(self, encode: Callable, name: str, settings: ActorSettings):
        from engine.core.encoders.base import configure_threads
        from engine.core.encoders.device import set_dtype
        configure_threads(settings.threads)
        set_dtype(settings.dtype)
        self.encode, self.name, self.batch = encode, name, settings.batch
        self.encode(name, ["warm"], query=False, batch_size=1)  # the model loads once, before the first block

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import pickle
        out = self.encode(self.name, [str(t) for t in batch["source"]], query=False, batch_size=self.batch)
        blobs = np.empty(len(out), dtype=object)
        blobs[:] = [pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL) for x in out]
        return {"chunk": batch["chunk"], "pos": batch["pos"], "out": blobs}


def encode_learned_on_ray(encode: Callable, name: str, texts: Sequence[str], o: "BuildOptions") -> list:
    """A learned role's document side (`encode`: `engine.core.encoders.sparse.encode_sparse` or
    `engine.core.encoders.multivector.encode_tokens`, model `name`) over `texts` on Ray, in the dense build's
    chunks (`--chunk-size`), one model per actor: each text's result in the texts' order, as `encode` returns
    it locally."""
    import pickle
    ray = import_ray()
    bounds = chunk_bounds(len(texts), o.chunk_size)
    if not bounds:
        return []
    ds = _chunk_dataset(ray, (_chunk_table(c, texts[lo:hi]) for c, (lo, hi) in enumerate(bounds)))
    cpus, gpus = cluster_resources()
    from engine.core.encoders.device import batch_size_for
    settings = _actor_settings(o, batch_size_for(o.batch_size, "text", "cuda" if gpus else "cpu"))

    class LearnedActor(_EncodeLearned):
        def __init__(self) -> None:  # no constructor arguments: as `_encode_actor`
            super().__init__(encode, name, settings)
    ds = ds.map_batches(LearnedActor, batch_size=settings.batch, num_gpus=1 if gpus else 0, num_cpus=1,
                        compute=ray.data.ActorPoolStrategy(size=gpus or cpus), batch_format="numpy")
    out: list = [None] * len(texts)
    for c, parts in _chunks_back(ds, bounds, ("pos", "out")):
        for part in parts:
            for pos, blob in zip(part["pos"], part["out"]):
                out[bounds[c][0] + int(pos)] = pickle.loads(blob)
    return out


def _chunk_table(c: int, sources: Sequence[str]):
    """A chunk's rows as a columnar Arrow table (chunk, position, source: a text or an image path): a few bytes
    a row beyond the source, where a list of row dicts costs hundreds."""
    import pyarrow as pa
    return pa.table({"chunk": pa.array(np.full(len(sources), c, np.int64)),
                     "pos": pa.array(np.arange(len(sources))), "source": pa.array(list(sources), pa.string())})


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
