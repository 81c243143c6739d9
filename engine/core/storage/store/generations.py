"""The collection store: one folder, one manifest, every file written by generation and checksummed.

    NAME/manifest.json        {"format": 2, "generation": G, "roles": {role: file}, "files": {file: {bytes, sha256}}, …}
    NAME/<role>-<G>.<ext>     one file (or folder) per role: embeddings, items, index, and any named arrays,
                              JSON documents or folders a task stores beside them

Opening a collection only checks the manifest and that every listed file exists with its recorded size
(`check`: cheap, O(files)); `verify` reads every byte against the sha256 (`engine verify NAME`). A commit
records the sha256 of every file it writes: the embeddings (`npy_blocks`, `kept_rows_npy`) and a
compaction's items rows hashed as their bytes are written (`HashedFile`: one pass, no read back), the
others read back from disk once written.

A commit writes the new generation's files under temporary names and renames them, then replaces
manifest.json (the commit point), then deletes files no manifest refers to any more; a crash anywhere
leaves the previous generation whole. A file may outlive its generation: a commit that only adds roles
keeps referring to the files it did not rewrite.
"""
from __future__ import annotations

import json
import mmap
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from engine.errors import EngineError
from engine.io.atomic import atomic_dir, atomic_path, write_json
from engine.io.jsonio import check_finite
from engine.io.jsonio import parse_json

FORMAT = 2
"""Manifest format this engine writes. 1: engine 0.1 collections (read as they are: no named arrays)."""
MANIFEST = "manifest.json"
_GENERATION_FILE = re.compile(r"^(?P<role>[a-z0-9_.]+)-(?P<gen>\d{6})(?:\.[a-z0-9.]+)?$")


@dataclass(frozen=True)
class FileWriter:
    """How to write one role: the file name's suffix ("" for a folder) and a function that writes it at a path
    and returns the sha256 (hex) of the bytes it wrote where it hashed them while writing (`HashedFile`), or
    None: then the commit reads the file back to hash it."""
    suffix: str
    write: Callable[[Path], str | None]


class HashedFile:
    """A file opened for writing that hashes every byte written through it (sha256): the writer hands the
    digest to the commit, which then need not read the file back. Every byte must go through `write`."""

    def __init__(self, path: Path):
        import hashlib  # checksums are written and verified, never computed by a query
        self._fh = open(path, "wb")
        self._hash = hashlib.sha256()

    def write(self, data) -> int:
        self._hash.update(data)
        return self._fh.write(data)

    def write_views(self, views: list) -> None:
        """Write (and hash) several buffers in order with as few system calls as the OS allows (`os.writev`):
        runs of rows written straight from where they lie, without joining them first."""
        self._fh.flush()
        fd = self._fh.fileno()
        for lo in range(0, len(views), 1024):  # IOV_MAX on Linux
            group = views[lo:lo + 1024]
            for v in group:
                self._hash.update(v)
            done = os.writev(fd, group)
            for v in group:  # a short write (rare on regular files): the rest one buffer at a time
                if done >= len(v):
                    done -= len(v)
                    continue
                rest = v[done:]
                while len(rest):
                    rest = rest[os.write(fd, rest):]
                done = 0
        # the buffered file's position follows the descriptor's: later `write`s append

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def __enter__(self) -> "HashedFile":
        return self

    def __exit__(self, *exc) -> None:
        self._fh.close()


def npy(array: np.ndarray) -> FileWriter:
    def write(path: Path) -> None:
        with open(path, "wb") as fh:
            np.save(fh, np.ascontiguousarray(array))
    return FileWriter(".npy", write)


def npy_blocks(array: np.ndarray, transform: Callable[[np.ndarray], np.ndarray] | None = None,
               block: int = 65536) -> FileWriter:
    """A float32 .npy written block by block (`transform` applied to each block): no full-size copy."""
    def write(path: Path) -> str:
        n = len(array)
        shape = (n, *array.shape[1:])
        with HashedFile(path) as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                                                      "fortran_order": False, "shape": shape})
            for lo in range(0, n, block):
                part = np.asarray(array[lo:lo + block], dtype=np.float32)
                fh.write(np.ascontiguousarray(transform(part) if transform else part).data)  # no bytes copy
        return fh.hexdigest()
    return FileWriter(".npy", write)


def kept_rows_npy(source: Path, keep: np.ndarray, window: int = 1 << 25) -> FileWriter | None:
    """The rows `keep` (sorted) of a float32 `.npy` file as a new `.npy`, streamed in order: the source mapped a
    window (`window` bytes, about) at a time and each run of consecutive kept rows written straight from the
    map (no copy in this process) and hashed on the way; a window is unmapped before the next, so memory stays
    one window whatever the file's size. None for an array this does not stream (another dtype, Fortran
    order)."""
    with open(source, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in readers:
            return None
        shape, fortran, dtype = readers[version](fh)
        start = fh.tell()
    if fortran or dtype != np.dtype("<f4") or len(shape) != 2:
        return None
    n, dim = shape
    keep = np.asarray(keep, dtype=np.int64)

    def write(path: Path) -> str:
        row = 4 * dim
        breaks = np.flatnonzero(np.diff(keep) != 1) + 1
        firsts = keep[np.concatenate([[0], breaks])] if len(keep) else keep
        ends = keep[np.concatenate([breaks - 1, [len(keep) - 1]])] + 1 if len(keep) else keep
        step = max(1, window // max(1, row))  # rows per window
        with open(source, "rb") as src, HashedFile(path) as dst:
            np.lib.format.write_array_header_1_0(dst, {"descr": "<f4", "fortran_order": False,
                                                       "shape": (len(keep), dim)})
            if os.fstat(src.fileno()).st_size < start + n * row:
                raise EngineError(f"{source} ends before its {n} rows")
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                a, b = np.searchsorted(ends, lo, side="right"), np.searchsorted(firsts, hi)
                if a >= b or not row:
                    continue
                base = (start + lo * row) // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
                los = (start + np.maximum(firsts[a:b], lo) * row - base).tolist()
                his = (start + np.minimum(ends[a:b], hi) * row - base).tolist()
                with mmap.mmap(src.fileno(), his[-1], access=mmap.ACCESS_READ, offset=base) as mapped:
                    view = memoryview(mapped)
                    dst.write_views([view[x:y] for x, y in zip(los, his)])
                    view.release()
        return dst.hexdigest()
    return FileWriter(".npy", write)


def jsonl(rows: Iterable[Mapping[str, Any]], offsets: list | None = None) -> FileWriter:
    """One JSON object per line; with `offsets` (a list, filled while writing) each line's start byte and the
    file's end, so one row can be read without parsing the others (`line_offsets`)."""
    def write(path: Path) -> None:
        pos = 0
        with open(path, "wb") as fh:
            for row in rows:
                line = (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode("utf-8")
                if offsets is not None:
                    offsets.append(pos)
                fh.write(line)
                pos += len(line)
        if offsets is not None:
            offsets.append(pos)
    return FileWriter(".jsonl", write)


def offsets_npy(offsets: list) -> FileWriter:
    """The offsets a `jsonl` writer collected (it must be written first: writers run in order)."""
    def write(path: Path) -> None:
        with open(path, "wb") as fh:
            np.save(fh, np.asarray(offsets, dtype=np.int64))
    return FileWriter(".npy", write)


def line_offsets(path: Path) -> np.ndarray:
    """Start byte of every non-empty line and the file's end, found by scanning for newlines (no JSON parsing):
    the offset index of a collection written before offsets were stored."""
    size = path.stat().st_size
    if size == 0:
        return np.zeros(1, dtype=np.int64)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    ends = np.flatnonzero(data == 10) + 1
    if not len(ends) or ends[-1] != size:
        ends = np.append(ends, size)
    starts = np.concatenate([[0], ends[:-1]])
    keep = ends - starts > 1 if len(starts) else np.zeros(0, bool)  # drop blank lines
    del data
    return np.append(starts[keep], size).astype(np.int64)


def raw_lines(path: Path, offsets: np.ndarray, rows: Iterable[int]) -> list[bytes]:
    """The bytes of some lines of a file by position (`offsets`: each line's start and the file's end)."""
    rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, dtype=np.int64)
    if not len(rows):
        return []
    starts, ends = np.asarray(offsets[rows]).tolist(), np.asarray(offsets[rows + 1]).tolist()
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return [data[lo:hi] for lo, hi in zip(starts, ends)]


def line_heads(path: Path, offsets: np.ndarray, rows: np.ndarray, width: int) -> np.ndarray:
    """The first `width` bytes of some lines of a file (rows × width, uint8; past a line's end: the bytes that
    follow it, past the file's end: its last byte), gathered from the mapped file in one indexing."""
    rows = np.asarray(rows, dtype=np.int64)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        mapped = np.frombuffer(data, dtype=np.uint8)
        at = np.minimum(np.asarray(offsets[rows])[:, None] + np.arange(width), len(mapped) - 1)
        heads = mapped[at]  # a copy: the map can close
        del mapped
    return heads


def json_document(obj: Any) -> FileWriter:
    check_finite(obj, "a collection's JSON document")

    def write(path: Path) -> None:
        path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return FileWriter(".json", write)


def sha256(path: Path) -> str:
    import hashlib  # checksums are written and verified, never computed by a query
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _records(folder: Path, name: str, digest: str | None = None) -> dict[str, dict]:
    """Size and checksum of a role's file (`digest`: its sha256 as its writer hashed it), or of every file
    inside a role's folder."""
    path = folder / name
    if digest is not None:
        return {name: {"bytes": path.stat().st_size, "sha256": digest}}
    paths = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in paths}


def read_manifest(folder: Path, rebuild: str) -> dict:
    """A folder's manifest; `rebuild` (the command that rebuilds it) goes into every error about it."""
    path = folder / MANIFEST
    try:
        manifest = parse_json(path.read_text(encoding="utf-8"), path)  # bounded depth and numbers
    except FileNotFoundError:
        raise EngineError(f"{path}: no such file; {rebuild}") from None
    except (EngineError, UnicodeDecodeError) as exc:
        raise EngineError(f"{path}: not valid JSON ({str(exc).split(': ', 1)[-1]}); {rebuild}") from None
    if not isinstance(manifest, dict):
        raise EngineError(f"{path}: not a manifest (expected a JSON object); {rebuild}")
    fmt = manifest.get("format", 1)
    if not isinstance(fmt, int) or fmt > FORMAT:
        raise EngineError(f"{path}: format {fmt} was written by a newer engine (this one reads up to {FORMAT}); "
                          "upgrade engine")
    return manifest


def check(folder: Path, manifest: dict, rebuild: str) -> None:
    """Structural check on open: the manifest lists files, each exists with its recorded size. Reads no data,
    so opening a 2 GB collection costs a few stat calls; `verify` is the byte-level check."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise EngineError(f"{folder / MANIFEST} lists no files to verify; {rebuild}")
    for name, meta in files.items():
        path = folder / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = None
        if size is None or not path.is_file():
            raise EngineError(f"{path} is missing but {folder / MANIFEST} lists it; {rebuild}")
        if size != (meta or {}).get("bytes"):
            raise EngineError(f"{path} is {size} bytes, {folder / MANIFEST} says {(meta or {}).get('bytes')} "
                              f"(changed or damaged); {rebuild}")


def verify(folder: Path, manifest: dict, rebuild: str, progress: Callable[[int], None] | None = None) -> None:
    """`check`, then every byte of every listed file against its recorded sha256 (`progress(bytes)` per file)."""
    check(folder, manifest, rebuild)
    for name, meta in manifest["files"].items():
        path = folder / name
        if sha256(path) != meta.get("sha256"):
            raise EngineError(f"{path} does not match its checksum in {folder / MANIFEST} (changed or damaged); "
                              f"{rebuild}")
        if progress is not None:
            progress(int(meta.get("bytes") or 0))


def next_generation(folder: Path) -> int:
    try:
        return int(json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("generation", 0)) + 1
    except (OSError, ValueError, AttributeError):
        return 1


def _write_role(folder: Path, name: str, writer: FileWriter) -> str | None:
    """Write a role's file (or folder) under a temporary name and rename it; the sha256 its writer returned."""
    target = folder / name
    if writer.suffix:
        with atomic_path(target) as tmp:
            digest = writer.write(tmp)
        return digest if isinstance(digest, str) else None  # a writer returning anything else hashed nothing
    with atomic_dir(target) as tmp:
        writer.write(tmp)
    return None


def commit(folder: Path, manifest: dict, writers: Mapping[str, FileWriter],
           keep: Mapping[str, str] | None = None) -> dict:
    """Write `writers` as the next generation's roles, keep the `keep` roles' existing files, then publish
    `manifest` (given the roles, checksums, format and generation) and drop unreferenced generation files.
    A manifest holding NaN or an infinity is refused before anything is written (it could not be read back)."""
    check_finite(manifest, f"{folder / MANIFEST}")
    folder.mkdir(parents=True, exist_ok=True)
    gen = next_generation(folder)
    roles = dict(keep or {})
    old_files = {}
    if keep:
        try:
            old_files = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("files", {})
        except (OSError, ValueError):
            old_files = {}
    files: dict[str, dict] = {}
    for role, name in roles.items():
        kept = {f: r for f, r in old_files.items() if f == name or f.startswith(name + "/")}
        files.update(kept or _records(folder, name))
    for role, writer in writers.items():
        name = f"{role}-{gen:06d}{writer.suffix}"
        digest = _write_role(folder, name, writer)
        roles[role] = name
        files.update(_records(folder, name, digest))
    manifest = {"format": FORMAT, **{k: v for k, v in manifest.items() if k not in ("roles", "files")},
                "generation": gen, "roles": roles, "files": files}
    write_json(folder / MANIFEST, manifest)
    live = set(roles.values())
    for path in folder.iterdir():
        if _GENERATION_FILE.match(path.name) and path.name not in live:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return manifest

