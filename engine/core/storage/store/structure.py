"""Structural checks on opening a collection, beyond checksums.

Checksums say a file is the one the manifest recorded; they say nothing when someone edits a manifest
and recomputes them, or when a bug wrote a wrong `count`. So opening also checks that the manifest has
the keys and types a collection needs and that its files agree with it and with each other:
`count` = rows of the embeddings = lines of the items file = vectors in the FAISS index, and `dim` =
the embeddings' width = the index's `d`. Each check reads headers only (and the item offsets, or counts
the items file's lines when a collection has none), so a damaged collection fails in one line at open, not with a FAISS or NumPy traceback later.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import EngineError

REQUIRED: dict[str, tuple[type, ...]] = {
    "kind": (str,), "dim": (int,), "count": (int,), "roles": (dict,), "files": (dict,),
    "encoder": (str, type(None)), "index_factory": (str,),
}
CORE = ("embeddings", "items", "index")
VECTORS_IN = "index_vectors"
"""Manifest key: "embeddings" where the exact index file is a header and its rows are the embeddings role's."""
FLAT_HEADER_BYTES = 45
"""Bytes of an `IndexFlatIP`'s header in FAISS's layout: all an index over the embeddings role holds."""
_FAISS_HEADER = struct.Struct("<4siq")  # fourcc, d, ntotal: the start of every FAISS index file
_FLAT_IP_HEADER = struct.Struct("<4siqqq?iQ")
"""FAISS's `IndexFlatIP` header: fourcc, d, ntotal, two unused int64 (2**20 each), is_trained, metric type
(0: inner product), then the length of the codes that follow (ntotal × d floats)."""


def flat_ip_header(n: int, dim: int) -> bytes:
    """The header FAISS writes before an `IndexFlatIP`'s n × dim rows (`faiss.serialize_index`, byte for byte:
    tested), made without importing FAISS (a compaction or a `--vectors` build writes only this header)."""
    return _FLAT_IP_HEADER.pack(b"IxFI", dim, n, 1 << 20, 1 << 20, True, 0, n * dim)


def check_manifest(path: Path, manifest: dict, rebuild: str) -> None:
    """Required keys with the right types; `roles` naming the core files; `files` not empty."""
    for key, types in REQUIRED.items():
        if key not in manifest:
            raise EngineError(f"{path}: the manifest has no {key!r}; {rebuild}")
        value = manifest[key]
        if not isinstance(value, types) or isinstance(value, bool):
            want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise EngineError(f"{path}: {key!r} is {value!r:.40}, expected {want}; {rebuild}")
    if manifest["dim"] < 1 or manifest["count"] < 0:
        raise EngineError(f"{path}: dim {manifest['dim']} and count {manifest['count']} must be positive; {rebuild}")
    roles = manifest["roles"]
    for role in CORE:
        if not isinstance(roles.get(role), str) or not roles[role] or "/" in roles[role] or ".." in roles[role]:
            raise EngineError(f"{path}: roles[{role!r}] is {roles.get(role)!r:.40}, expected a file name; {rebuild}")
    if not manifest["files"]:
        raise EngineError(f"{path} lists no files to verify; {rebuild}")


def _count_lines(path: Path) -> int:
    n, last = 0, b"\n"
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def faiss_header(path: Path) -> tuple[bytes, int, int]:
    """(fourcc, d, ntotal) from the first bytes of a FAISS index file."""
    with open(path, "rb") as fh:
        head = fh.read(_FAISS_HEADER.size)
    if len(head) < _FAISS_HEADER.size:
        raise ValueError(f"{len(head)} bytes, shorter than any FAISS index")
    return _FAISS_HEADER.unpack(head)


def check_item_offsets(offsets_file: Path, items: Path, count: int, path: Path, rebuild: str) -> None:
    """count + 1 offsets, the last one the items file's size: what reading a hit's row relies on."""
    try:
        offsets: Any = np.load(offsets_file, mmap_mode="r")
    except Exception as exc:  # noqa: BLE001 (as for the embeddings' header)
        raise EngineError(f"{offsets_file}: not a readable array ({exc}); {rebuild}") from None
    if offsets.ndim != 1 or len(offsets) != count + 1:
        raise EngineError(f"{offsets_file} holds {offsets.shape} offsets, but {path} says count {count}; {rebuild}")
    if int(offsets[-1]) != items.stat().st_size:
        raise EngineError(f"{items} is {items.stat().st_size} bytes, but its offsets end at {int(offsets[-1])}; "
                          f"{rebuild}")


def check_finite(file: Path, rebuild: str, block: int = 65536) -> None:
    """Every stored vector finite (`verify` reads them all anyway): FAISS silently drops a NaN row from every
    hit list and a query against an infinite one scores NaN."""
    try:
        emb: Any = np.load(file, mmap_mode="r")
    except Exception:  # noqa: BLE001 (check_structure names a damaged header)
        return
    for lo in range(0, len(emb), block):
        bad = ~np.isfinite(np.asarray(emb[lo:lo + block])).reshape(min(block, len(emb) - lo), -1).all(axis=1)
        if bad.any():
            more = f" (and {int(bad.sum()) - 1} more rows)" if bad.sum() > 1 else ""
            raise EngineError(f"{file}: row {lo + int(np.flatnonzero(bad)[0])} holds a NaN or infinite value{more}; "
                              f"{rebuild}")


def check_structure(folder: Path, manifest: dict, rebuild: str) -> None:
    """The manifest's schema, then its files against it and each other (see the module's docstring)."""
    path = folder / "manifest.json"
    check_manifest(path, manifest, rebuild)
    roles, count, dim = manifest["roles"], manifest["count"], manifest["dim"]
    files = {role: folder / roles[role] for role in CORE}
    for role, file in files.items():
        if not (file.is_file() or (role == "index" and file.is_dir())):
            raise EngineError(f"{file} is missing but {path} lists it as {role!r}; {rebuild}")
    try:
        emb: Any = np.load(files["embeddings"], mmap_mode="r")
    except Exception as exc:  # noqa: BLE001 (a damaged .npy header fails as ValueError, SyntaxError, TokenError…)
        raise EngineError(f"{files['embeddings']}: not a readable array ({exc}); {rebuild}") from None
    if emb.ndim != 2 or emb.shape != (count, dim):
        raise EngineError(f"{files['embeddings']} holds an array of shape {emb.shape}, but {path} says "
                          f"count {count} × dim {dim}; {rebuild}")
    if isinstance(roles.get("item_offsets"), str):  # rows located by offsets: check them, read no rows
        check_item_offsets(folder / roles["item_offsets"], files["items"], count, path, rebuild)
    else:
        rows = _count_lines(files["items"])
        if rows != count:
            raise EngineError(f"{files['items']} has {rows} lines, but {path} says count {count}; {rebuild}")
    ntotal = 0
    for part in index_parts(files["index"], path, rebuild):
        try:
            fourcc, d, n = faiss_header(part)
        except (ValueError, OSError) as exc:
            raise EngineError(f"{part}: not a FAISS index ({exc}); {rebuild}") from None
        if d != dim:
            raise EngineError(f"{part} holds vectors of {d} dimensions, but {path} says dim {dim}; {rebuild}")
        over_embeddings = manifest.get(VECTORS_IN) == "embeddings"  # a header: its rows are the embeddings
        if over_embeddings and (fourcc != b"IxFI" or part.stat().st_size != FLAT_HEADER_BYTES):
            raise EngineError(f"{part} is not the {FLAT_HEADER_BYTES}-byte header of a Flat index over the "
                              f"embeddings that {path} says it is (truncated?); {rebuild}")
        if fourcc == b"IxFI" and not over_embeddings and part.stat().st_size < _FAISS_HEADER.size + 4 * n * dim:
            raise EngineError(f"{part} is shorter than its {n} × {dim} vectors (truncated); {rebuild}")
        ntotal += n
    if ntotal != count:
        raise EngineError(f"{files['index']} holds {ntotal} vectors, but {path} says count {count}; {rebuild}")


def index_parts(index: Path, path: Path, rebuild: str) -> list[Path]:
    """The FAISS files of an `index` role: the file itself, or a folder's shards / on-disk IVF (its
    index.json names the layout; engine.core.storage.index.shards)."""
    if not index.is_dir():
        return [index]
    import json
    try:
        layout = json.loads((index / "index.json").read_text()).get("layout")
    except (OSError, ValueError, AttributeError) as exc:
        raise EngineError(f"{index}/index.json: not a readable index layout ({exc}); {rebuild}") from None
    parts = sorted(index.glob("shard-*.faiss")) if layout == "shards" else [index / "index.faiss"]
    if not parts or not all(p.is_file() for p in parts):
        raise EngineError(f"{index} lacks the FAISS files of its {layout!r} layout; {rebuild}")
    return parts
