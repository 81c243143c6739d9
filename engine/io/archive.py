"""Reading one member of a zip a user gave us, bounded before a byte is inflated.

The central directory's sizes can lie, so the member is read in blocks and stopped at the limit too;
a damaged member (bad deflate stream, CRC mismatch) is an `EngineError`, never `zlib.error`.
"""
from __future__ import annotations

import struct
import zipfile
import zlib

from engine.errors import EngineError
from engine.io.limits import limit, over

_BLOCK = 1 << 20
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError, ValueError,
           KeyError, struct.error)


def open_zip(path: object) -> zipfile.ZipFile:
    """The zip at `path`; an unreadable one (not a zip, damaged directory, unsupported version) is an EngineError."""
    try:
        return zipfile.ZipFile(path)  # type: ignore[arg-type]
    except _DAMAGE as exc:
        raise EngineError(f"{path}: not a readable zip file ({exc})") from None


def read_member(zf: zipfile.ZipFile, name: str, origin: object) -> bytes:
    """The bytes of member `name` of `zf`; `origin` (the zip's path) names it in errors."""
    info = zf.getinfo(name)
    shown = f"{origin}/{name}"
    most = limit("max_zip_member_bytes")
    if info.file_size > most:
        raise over("max_zip_member_bytes", f"a member of {info.file_size:,} bytes uncompressed", shown)
    if info.file_size > _BLOCK and info.file_size > limit("max_zip_ratio") * max(info.compress_size, 1):
        raise over("max_zip_ratio", f"a compression ratio of {info.file_size / max(info.compress_size, 1):,.0f}",
                   shown)
    parts, total = [], 0
    try:
        with zf.open(info) as fh:
            while block := fh.read(_BLOCK):
                total += len(block)
                if total > most or total > max(info.file_size, 0) + _BLOCK:
                    raise over("max_zip_member_bytes", "a member that inflates beyond its recorded size", shown)
                parts.append(block)
    except _DAMAGE as exc:
        raise EngineError(f"{shown}: damaged zip member ({exc})") from None
    return b"".join(parts)
