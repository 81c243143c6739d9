"""Rows of `.npy` files read and written in place, block by block: what lets a build over more vectors than
memory run in O(block). `NpyRows` reads one file or a sequence of shards as one (n, dim) array through
`seek` + `readinto` (no memory map: mapped pages would count as the process's memory until unmapped);
`NpyFile` is a preallocated float32 `.npy` written at row offsets (`pwrite`), so chunks may land in any
order and a killed build keeps what it wrote."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from engine.errors import EngineError

BLOCK = 65536
"""Rows per block read or written (≈ 100 MB at 384-d float32)."""
DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


@dataclass(frozen=True)
class NpyPart:
    """One `.npy` file: where its rows start, how many, of which dtype and width."""
    path: str
    offset: int
    rows: int
    dim: int
    dtype: str


def npy_part(path: str | os.PathLike, dtypes: Sequence[np.dtype] = DTYPES) -> NpyPart:
    """A `.npy` file's header, checked: 2-D, C order, one of `dtypes`; errors name the file."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(fh)
            offset = fh.tell()
    except FileNotFoundError:
        raise EngineError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise EngineError(f"{path}: not a .npy array file ({str(exc).strip().splitlines()[0][:120]})") from None
    if dtype not in dtypes:
        raise EngineError(f"{path}: vectors must be {' or '.join(str(d) for d in dtypes)}, not {dtype}")
    if len(shape) != 2 or fortran:
        raise EngineError(f"{path}: vectors must be a 2-D (rows, dim) C-order array, not shape {shape}"
                          f"{' in Fortran order' if fortran else ''}")
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise EngineError(f"{path}: its header gives the shape {shape}; rows and dimensions must be whole numbers "
                          "of at least 0")
    want = offset + shape[0] * shape[1] * dtype.itemsize
    size = path.stat().st_size
    if size < want:
        raise EngineError(f"{path}: truncated ({size} bytes, its header says {want})")
    if size > want:  # the header claims fewer rows or dimensions than the data holds: believing it misreads every row
        raise EngineError(f"{path}: {size} bytes, but its header's shape {tuple(shape)} accounts for {want}; the "
                          "header does not describe the data (rewrite it with numpy.save)")
    return NpyPart(str(path), offset, int(shape[0]), int(shape[1]), dtype.str)


class NpyRows:
    """Rows [lo, hi) of one or more `.npy` files of one width, read on demand as float32. Supports what the
    index and store code ask of an array: `len`, `shape`, slices, sorted-or-not integer row lists, `__array__`.
    Small to pickle (paths and offsets), so a Ray task can be handed one and read its rows itself."""

    def __init__(self, parts: Sequence[NpyPart], lo: int = 0, hi: int | None = None):
        self.parts = list(parts)
        dims = {p.dim for p in self.parts}
        if len(dims) > 1:
            first = self.parts[0]
            bad = next(p for p in self.parts if p.dim != first.dim)
            raise EngineError(f"{bad.path}: {bad.dim}-d vectors, but {first.path} holds {first.dim}-d ones; "
                              "every shard must have the same width")
        self.dim = dims.pop() if dims else 0
        self.starts = np.concatenate([[0], np.cumsum([p.rows for p in self.parts])]).astype(np.int64)
        total = int(self.starts[-1])
        self.lo, self.hi = lo, total if hi is None else hi

    @classmethod
    def open(cls, paths: Sequence[str | os.PathLike]) -> "NpyRows":
        return cls([npy_part(p) for p in paths])

    @property
    def shape(self) -> tuple[int, int]:
        return (self.hi - self.lo, self.dim)

    @property
    def ndim(self) -> int:
        return 2

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    def __len__(self) -> int:
        return self.hi - self.lo

    def view(self, lo: int, hi: int) -> "NpyRows":
        """Rows [lo, hi) of these, still unread."""
        lo, hi = max(0, lo), min(len(self), hi)
        return NpyRows(self.parts, self.lo + lo, self.lo + max(lo, hi))

    def _read(self, lo: int, hi: int) -> np.ndarray:
        """Absolute rows [lo, hi) as float32, file by file."""
        out = np.empty((max(0, hi - lo), self.dim), np.float32)
        at = 0
        for p, start in zip(self.parts, self.starts[:-1]):
            a, b = max(lo, int(start)), min(hi, int(start) + p.rows)
            if a >= b:
                continue
            dtype = np.dtype(p.dtype)
            in_place = dtype == out.dtype  # float32 is read straight into the result: one buffer, not two
            raw = out[at:at + b - a] if in_place else np.empty((b - a, p.dim), dtype)
            with open(p.path, "rb", buffering=0) as fh:
                fh.seek(p.offset + (a - int(start)) * p.dim * dtype.itemsize)
                got = fh.readinto(memoryview(raw).cast("B"))
            if got != raw.nbytes:
                raise EngineError(f"{p.path}: ended early (changed while it was read?)")
            if not in_place:
                out[at:at + b - a] = raw
            at += b - a
        return out

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            lo, hi, step = key.indices(len(self))
            if step != 1:
                raise TypeError("NpyRows slices take no step")
            return self._read(self.lo + lo, self.lo + max(lo, hi))
        rows = np.asarray(key)
        if rows.ndim == 0:
            return self._read(self.lo + int(rows), self.lo + int(rows) + 1)[0]
        return self.take(rows)

    def take(self, rows: np.ndarray, block: int = BLOCK) -> np.ndarray:
        """The given rows (any order), gathered block by block: a sample never reads more than a block at once."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), np.float32)
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        for lo in range(0, len(self), block):
            a, b = np.searchsorted(sorted_rows, [lo, lo + block])
            if a == b:
                continue
            want = sorted_rows[a:b]
            if b - a < (want[-1] - want[0] + 1) // 64:  # sparse: read only the rows wanted
                out[order[a:b]] = np.stack([self._read(self.lo + int(r), self.lo + int(r) + 1)[0] for r in want])
            else:
                part = self._read(self.lo + int(want[0]), self.lo + int(want[-1]) + 1)
                out[order[a:b]] = part[want - want[0]]
        return out

    def blocks(self, block: int = BLOCK) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, float32 rows) block by block."""
        for lo in range(0, len(self), block):
            yield lo, self[lo:lo + block]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[0:len(self)]
        return out if dtype is None else out.astype(dtype, copy=False)


class NpyFile:
    """A float32 (n, dim) `.npy` preallocated at `path` (sparse: no bytes written yet) and filled at row
    offsets; opening an existing one of the same shape keeps its rows (a resumed build)."""

    def __init__(self, path: str | os.PathLike, n: int, dim: int):
        self.path, self.n, self.dim = Path(path), n, dim
        header = _header(n, dim)
        self.offset = len(header)
        size = self.offset + n * dim * 4
        if self.path.is_file() and self.path.stat().st_nlink > 1:
            self.path.unlink()  # also a committed generation's file (a build killed after its commit): never write it
        self.fresh = not (self.path.is_file() and self.path.stat().st_size == size and _same_header(self.path, header))
        if self.fresh:  # started now: whatever a caller recorded as written before is not there
            with open(self.path, "wb") as fh:
                fh.write(header)
                fh.truncate(size)

    def write(self, lo: int, rows: np.ndarray) -> None:
        data = np.ascontiguousarray(rows, dtype=np.float32)
        if data.shape[1:] != (self.dim,) or lo + len(data) > self.n:
            raise ValueError(f"rows {lo}..{lo + len(data)} of width {data.shape[1:]} do not fit {self.path}")
        fd = os.open(self.path, os.O_WRONLY)
        try:
            pwrite_all(fd, data, self.offset + lo * self.dim * 4)
        finally:
            os.close(fd)

    def rows(self) -> NpyRows:
        return NpyRows.open([self.path])


def pwrite_all(fd: int, array: np.ndarray, pos: int) -> None:
    """An array's bytes written at `pos` of an open file (through the page cache: no mapping of the file)."""
    if not array.size:  # a chunk whose items all failed: nothing to write (and memoryview cannot cast it)
        return
    view = memoryview(np.ascontiguousarray(array)).cast("B")
    while view:
        done = os.pwrite(fd, view, pos)
        view, pos = view[done:], pos + done


def _header(n: int, dim: int) -> bytes:
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (n, dim)})
    return buf.getvalue()


def _same_header(path: Path, header: bytes) -> bool:
    with open(path, "rb") as fh:
        return fh.read(len(header)) == header
