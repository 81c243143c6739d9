"""Write to a temporary name beside the target, then rename: a crash never leaves a half-written file."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from engine.errors import EngineError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _full(folder: Path, slack: int = 1 << 20) -> bool:
    """Whether the file system of `folder` is (nearly) full: NumPy reports a short write without an errno."""
    try:
        return shutil.disk_usage(folder).free < slack
    except OSError:
        return False


_KINDS = ((stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "named pipe"),
          (stat.S_ISSOCK, "socket"))


def _special(mode: int) -> str:
    """What a file that is neither a regular file nor a folder is, in words."""
    return next((word for test, word in _KINDS if test(mode)), "special file")


def check_writable(path: str | os.PathLike, folder: bool = False) -> Path:
    """`path` if a file (or, with `folder`, a folder) can be written there, else one line saying why: called
    before a command's work, so a bad output path costs nothing (and never a traceback after the work).

    A write replaces its target by a rename, so only a regular file (or nothing) may be there: a device such as
    /dev/null or /dev/full, a pipe or a socket would be replaced by a plain file, and is refused. Whether the
    folder takes a new file is tried (a temporary file made and removed), not read from permission bits:
    root passes every `access` check, yet cannot write a read-only or virtual file system such as /proc."""
    path = Path(path)
    try:
        st = path.stat()  # follows a link: a link to /dev/null is refused like /dev/null
    except (FileNotFoundError, NotADirectoryError):
        st = None  # a missing file, or a file where a folder of its path should be (said below)
    except OSError as exc:
        raise EngineError(f"{path}: cannot be written: {exc.strerror}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            if not folder:
                raise EngineError(f"{path}: is a folder; give a file name to write")
        elif not stat.S_ISREG(st.st_mode):
            raise EngineError(f"{path}: is a {_special(st.st_mode)}, not a regular file; engine writes its output "
                              f"to a new file and renames it into place, which would replace the "
                              f"{_special(st.st_mode)}: give " + ("a folder" if folder else "the name of a regular file"))
        elif folder:
            raise EngineError(f"{path}: is a file; give a folder to write into")
    parent = path.parent if not folder or st is None else path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise EngineError(f"{path}: cannot be written: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise EngineError(f"{path}: cannot be written: {parent} is not writable (permission denied)")
    try:
        with tempfile.TemporaryFile(dir=parent, prefix=".engine-probe."):
            pass
    except OSError as exc:
        raise EngineError(f"{path}: cannot be written: {parent} does not take new files "
                          f"({exc.strerror or exc})") from None
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success it replaces `path` atomically."""
    path = check_writable(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError(f"{path}: cannot create its folder: {exc.strerror}") from None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would surprise users who share collections
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or (exc.errno is None and _full(path.parent)):
            raise EngineError(f"{path}: no space left on the device while writing it; free some and run the "
                              "command again (the previous version is unchanged)") from None
        raise
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def publish(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Move a finished file that a library wrote under a temporary name (in the target's folder) to `path`,
    with the mode every file engine writes has (0666 less the umask): libraries write some files 0600 (onnx's
    external weights), which another user of a shared cache could then not read."""
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """`open()` that only publishes the file once the block finishes without error."""
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
        kwargs.setdefault("newline", "")
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh, indent=2, ensure_ascii=False, sort_keys=False)
        fh.write("\n")


def write_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    with atomic_open(path, "wb") as fh:
        np.save(fh, array)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside `path`; on success it replaces `path` (a folder written by a library in
    many files, e.g. a saved model), so a crash leaves the previous folder or none, never half of one."""
    path = check_writable(path, folder=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError(f"{path}: cannot create its folder: {exc.strerror}") from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old = path.parent / f".{path.name}.old"
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
