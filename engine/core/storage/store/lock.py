"""One writer at a time per collection: an advisory lock on the collection's folder.

The folder itself is held with `flock` for the whole of a build, `--add`, `--force` or a task's commit, and
`NAME/.writer` names the holder (pid, host, start time) for the message a second writer gets; it goes when
the writer finishes, so a finished collection holds only what its commits wrote. The kernel drops an `flock`
when its holder dies, so a lock left by a `kill -9` is stale by construction: the next writer takes it at
once and says whose it was (from the `.writer` file the dead one left). Readers never take it: they read the
manifest, which a commit replaces atomically. A second writer fails at once with one line naming the holder,
or with `wait` (seconds) polls until the lock is free. A writer that already holds the lock may take it again
(a build that commits through `from_vectors` or `attach`); another thread is another writer.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from engine.errors import EngineError, opt

HOLDER_FILE = ".writer"
POLL_SECONDS = 0.2
_held: dict[tuple[Path, int], int] = {}  # (folder, thread) → how many times that thread took it


def lock_path(folder: Path) -> Path:
    """The file that names the writer of the collection in `folder` while it writes."""
    return folder / HOLDER_FILE


def holder(path: Path) -> dict:
    """What the lock file says about its holder (empty when unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _describe(info: dict) -> str:
    if not info:
        return "another process"
    return f"pid {info.get('pid')} on {info.get('host')} (since {info.get('since')})"


@contextlib.contextmanager
def writer_lock(folder: Path, wait: float = 0.0) -> Iterator[None]:
    """Hold the writer lock of the collection in `folder` for the block."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no advisory locks; writers are on their own, as before
        yield
        return
    from engine.io.atomic import check_writable
    check_writable(folder, folder=True)  # --root at a file, a device or a read-only folder: one line, not a traceback
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError(f"{folder}: cannot create the collection's folder ({exc.strerror})") from None
    folder = folder.resolve()
    key = (folder, threading.get_ident())
    if _held.get(key):
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    fd = os.open(folder, os.O_RDONLY)
    path = lock_path(folder)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise EngineError(f"collection {folder.name!r} in {folder.parent}/ is being written by "
                                      f"{_describe(holder(path))}; wait for it to finish, or pass {opt('wait')} "
                                      "SECONDS") from None
                time.sleep(POLL_SECONDS)
        stale = holder(path)
        if stale:
            from engine.progress import info
            info(f"{folder.name}: took over a lock left by {_describe(stale)}, which is gone")
        path.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                    "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}), encoding="utf-8")
        _held[key] = 1
        try:
            yield
        finally:
            _held.pop(key, None)
            path.unlink(missing_ok=True)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
