"""The collection store: one folder, one manifest, every file written by generation and checksummed.

    NAME/manifest.json        {"format": 2, "generation": G, "roles": {role: file}, "files": {file: {bytes, sha256}}, …}
    NAME/<role>-<G>.<ext>     one file (or folder) per role: embeddings, items, index, and any named arrays,
                              JSON documents or folders a task stores beside them

A commit writes the new generation's files under temporary names and renames them, then replaces
manifest.json (the commit point), then deletes files no manifest refers to any more; a crash anywhere
leaves the previous generation whole. A file may outlive its generation: a commit that only adds roles
keeps referring to the files it did not rewrite.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from engine.errors import EngineError
from engine.io.atomic import atomic_path, write_json
from engine.io.jsonio import parse_json

FORMAT = 2
"""Manifest format this engine writes. 1: engine 0.1 collections (read as they are: no named arrays)."""
MANIFEST = "manifest.json"
_GENERATION_FILE = re.compile(r"^(?P<role>[a-z0-9_.]+)-(?P<gen>\d{6})(?:\.[a-z0-9.]+)?$")


@dataclass(frozen=True)
class FileWriter:
    """How to write one role: the file name's suffix ("" for a folder) and a function that writes it at a path."""
    suffix: str
    write: Callable[[Path], None]


def npy(array: np.ndarray) -> FileWriter:
    def write(path: Path) -> None:
        with open(path, "wb") as fh:
            np.save(fh, np.ascontiguousarray(array))
    return FileWriter(".npy", write)


def jsonl(rows: Iterable[Mapping[str, Any]]) -> FileWriter:
    def write(path: Path) -> None:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return FileWriter(".jsonl", write)


def json_document(obj: Any) -> FileWriter:
    def write(path: Path) -> None:
        path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return FileWriter(".json", write)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _records(folder: Path, name: str) -> dict[str, dict]:
    """Size and checksum of a role's file, or of every file inside a role's folder."""
    path = folder / name
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


def verify(folder: Path, manifest: dict, rebuild: str) -> None:
    """Every file the manifest lists exists with its recorded size and checksum."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise EngineError(f"{folder / MANIFEST} lists no files to verify; {rebuild}")
    for name, meta in files.items():
        path = folder / name
        if not path.is_file():
            raise EngineError(f"{path} is missing but {folder / MANIFEST} lists it; {rebuild}")
        if path.stat().st_size != meta.get("bytes") or sha256(path) != meta.get("sha256"):
            raise EngineError(f"{path} does not match its checksum in {folder / MANIFEST} (changed or damaged); "
                              f"{rebuild}")


def next_generation(folder: Path) -> int:
    try:
        return int(json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("generation", 0)) + 1
    except (OSError, ValueError, AttributeError):
        return 1


def _write_role(folder: Path, name: str, writer: FileWriter) -> None:
    target = folder / name
    if writer.suffix:
        with atomic_path(target) as tmp:
            writer.write(tmp)
        return
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder))
    try:
        writer.write(tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def commit(folder: Path, manifest: dict, writers: Mapping[str, FileWriter],
           keep: Mapping[str, str] | None = None) -> dict:
    """Write `writers` as the next generation's roles, keep the `keep` roles' existing files, then publish
    `manifest` (given the roles, checksums, format and generation) and drop unreferenced generation files."""
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
        _write_role(folder, name, writer)
        roles[role] = name
        files.update(_records(folder, name))
    manifest = {"format": FORMAT, **{k: v for k, v in manifest.items() if k not in ("roles", "files")},
                "generation": gen, "roles": roles, "files": files}
    write_json(folder / MANIFEST, manifest)
    live = set(roles.values())
    for path in folder.iterdir():
        if _GENERATION_FILE.match(path.name) and path.name not in live:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return manifest

