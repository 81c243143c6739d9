"""A Ray session for a build or a search, and what the running cluster offers. Ray is imported here only,
when a build or a search asks for it (`missing_extra` otherwise); the index (shards, on-disk IVF) and the
build both use it, so it sits below both."""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Iterator

from engine.errors import EngineError, missing_extra, opt

LOCAL = "local"
"""`ray` address that starts a Ray on this machine for the run (what a bare `--ray` means)."""
_RAY_ADDRESS = re.compile(r"^(local|auto|ray://\S+|[\w.-]+:\d+)$")


def bare_ray_flag(argv: list[str]) -> list[str]:
    """`--ray` not followed by an address (`local`, `auto`, `ray://…`, `host:port`) means `--ray local`."""
    out = []
    for n, word in enumerate(argv):
        out.append(word)
        if word == "--ray" and (n + 1 == len(argv) or not _RAY_ADDRESS.match(argv[n + 1])):
            out.append(LOCAL)
    return out


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
    import logging  # Ray runs only: a query's start-up imports this module for its names
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


@contextmanager
def ray_or_here(address: str | None) -> Iterator[Any]:
    """`ray_session(address)` when a command was given `--ray`, else nothing: a task command that runs several
    builds holds one Ray session across them (each build finds it running and uses it)."""
    if address is None:
        yield None
        return
    with ray_session(address) as ray:
        yield ray


def _quiet_ray_data() -> None:
    """Ray Data's own bars and execution logs off: the build shows one bar for the whole job."""
    import logging
    from ray.data import DataContext
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False


def ray_map(fn, args: list[tuple], num_cpus: float = 1) -> Iterator[tuple[int, Any]]:
    """(position, fn(*args[position])) as each Ray task finishes (Ray must be running): a task pool for work that
    is not rows of a Ray dataset (a task's own feature extractor). A failed task is run again `TASK_RETRIES`
    times."""
    ray = import_ray()
    task = ray.remote(num_cpus=num_cpus, max_retries=TASK_RETRIES)(fn)
    refs = {task.remote(*a): n for n, a in enumerate(args)}
    while refs:
        ready, _ = ray.wait(list(refs), num_returns=1)
        yield refs.pop(ready[0]), ray.get(ready[0])


def cluster_resources() -> tuple[int, int]:
    """(CPUs, GPUs) of the running cluster."""
    import ray
    res = ray.cluster_resources()
    return int(res.get("CPU", 1)), int(res.get("GPU", 0))
