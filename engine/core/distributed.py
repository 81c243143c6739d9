"""Builds on Ray: the item list read in blocks by Ray Data, images decoded in tasks, embeddings computed
in an actor pool (one model per actor, one GPU per actor where the cluster has GPUs).

Only the encoding moves: chunks come back to the driver and go through `engine.core.build` exactly as a
local build's do (same `.partial/` plan, same chunk files and signatures), so a killed distributed build
resumes, locally or on Ray, and a distributed build gives the collection a local build gives. Ray restarts
a killed actor and re-runs its block (`max_restarts`/`max_task_retries` on the pool, `max_retries` on the
decode tasks); an unreadable image is a failure row, skipped and listed in the manifest as locally.

Ray is imported here only, when a build or a search asks for it (`missing_extra` otherwise).
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from engine.errors import EngineError, missing_extra, opt

if TYPE_CHECKING:
    from engine.core.build import BuildOptions
    from engine.core.sources import Item

LOCAL = "local"
"""`ray` address that starts a Ray on this machine for the run (what a bare `--ray` means)."""
TASK_RETRIES = 3
"""How often a failed decode task (a block) is run again before the build stops."""


def import_ray():
    try:
        import ray
        import ray.data  # the build needs Ray Data, not just the core
    except ImportError:
        raise missing_extra("ray", "ray") from None
    return ray


@contextmanager
def ray_session(address: str | None) -> Iterator[Any]:
    """Ray for the length of a build or a search: a running one is used as it is (and left running); else
    `local` starts one on this machine and `auto`/`ray://host:port`/`host:port` joins a cluster, and it is
    shut down afterwards."""
    ray = import_ray()
    if ray.is_initialized():
        _quiet_ray_data()
        yield ray
        return
    settings: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    try:
        if address in (None, "", LOCAL):
            ray.init(include_dashboard=False, **settings)
        else:
            ray.init(address=address, **settings)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise EngineError(f"cannot reach a Ray cluster at {address!r} ({str(exc).strip().splitlines()[0]}); "
                          f"start one with `ray start --head`, or give {opt('ray')} local") from None
    _quiet_ray_data()
    try:
        yield ray
    finally:
        ray.shutdown()


def _quiet_ray_data() -> None:
    """Ray Data's own bars and execution logs off: the build shows one bar for the whole job."""
    from ray.data import DataContext
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False


def cluster_resources() -> tuple[int, int]:
    """(CPUs, GPUs) of the running cluster."""
    import ray
    res = ray.cluster_resources()
    return int(res.get("CPU", 1)), int(res.get("GPU", 0))


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

    def __init__(self, spec: str, kind: str, threads: int, batch_size: int):
        from engine.core.encoders import configure_threads, load_encoder
        configure_threads(threads)
        self.encoder, self.kind, self.batch_size = load_encoder(spec), kind, batch_size

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


def _encode_actor(spec: str, kind: str, threads: int, batch_size: int) -> type:
    """`_Encode` with its settings bound: no constructor arguments (Ray would keep them in the object store,
    and warn that a restarted actor could lose them)."""
    class EncodeActor(_Encode):
        def __init__(self) -> None:
            super().__init__(spec, kind, threads, batch_size)
    return EncodeActor


def encode_on_ray(encoder, kind: str, items: Sequence["Item"], todo: Sequence[int], o: "BuildOptions"
                  ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """`engine.core.build`'s chunk encoder on Ray: (chunk number, chunk data) as each chunk completes.
    One Ray Data block per chunk; the driver only regroups rows (in any order) into their chunks."""
    from engine.core.build import chunk_bounds, chunk_data
    ray = import_ray()
    from ray import cloudpickle
    bounds = chunk_bounds(len(items), o.chunk_size)
    rows = [{"chunk": c, "pos": i - bounds[c][0], "source": items[i].source}
            for c in todo for i in range(*bounds[c])]
    if not rows:
        return
    cpus, gpus = cluster_resources()
    ds = ray.data.from_items(rows, override_num_blocks=len(todo))
    if kind == "image":
        ds = ds.map_batches(_decode, fn_kwargs={"transform": cloudpickle.dumps(encoder.preprocess)}, batch_size=o.batch_size,
                            num_cpus=1, max_retries=TASK_RETRIES)
    actors = gpus if gpus else max(1, cpus // 2 if kind == "image" else cpus)
    ds = ds.map_batches(_encode_actor(encoder.spec, kind, o.threads, o.batch_size), batch_size=o.batch_size, compute=ray.data.ActorPoolStrategy(size=actors),
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
                yield c, _assemble(pending.pop(c), encoder.dim, chunk_data)


def _assemble(parts: list[dict[str, np.ndarray]], dim: int, chunk_data) -> dict[str, np.ndarray]:
    """A chunk's rows, back in item order, in the local build's chunk format."""
    pos = np.concatenate([p["pos"] for p in parts]).astype(np.int64)
    emb = np.concatenate([p["emb"].reshape(-1, dim) for p in parts])
    errors = np.concatenate([p["error"] for p in parts])
    order = np.argsort(pos, kind="stable")
    pos, emb, errors = pos[order], emb[order], errors[order]
    ok = [i for i in range(len(pos)) if not errors[i]]
    bad = [(int(pos[i]), str(errors[i])) for i in range(len(pos)) if errors[i]]
    return chunk_data(emb[ok], pos[ok], bad)
