"""What computes a reranker's scores, read without loading it: the key of its kept scores and of the pipeline
stages it computes, so a replaced model is never answered from a cache.

A local model is known by its files (each file of its folder, or the one file named: size, modification time
and a hash of its first and last MiB), a served one by its URL and model name, a hub name by the name; then
the options (template, instruction, …; a template FILE by its text), and the engine's version.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

MIB = 1 << 20
MAX_FILES = 2000   # a folder with more is known by its first MAX_FILES files (in name order) and their count
_HASHES: dict[tuple[str, int, int], str] = {}
"""A file's head-and-tail hash by (path, size, mtime): hashed once per process while it is unchanged."""


def file_identity(path: Path) -> list:
    """(size, mtime in ns, sha256 of the first and last MiB) of one file."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            h.update(fh.read(MIB))
            if st.st_size > MIB:
                fh.seek(max(MIB, st.st_size - MIB))
                h.update(fh.read(MIB))
        _HASHES[key] = h.hexdigest()
    return [st.st_size, st.st_mtime_ns, _HASHES[key]]


def files_identity(path: Path) -> list:
    """A file's identity, or every file of a folder (relative name, identity; hidden ones left out)."""
    if path.is_file():
        return [path.name, *file_identity(path)]
    files = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [Path(root) / n for n in names if not n.startswith(".")]
    files.sort()
    out: list = [len(files)]
    for f in files[:MAX_FILES]:
        try:
            out.append([str(f.relative_to(path)), *file_identity(f)])
        except OSError:
            out.append([str(f.relative_to(path)), "unreadable"])
    return out


def model_identity(kind: str, arg: str) -> list:
    """What the argument of a spec of `kind` names: a served model's URL and name, a local model's files, a
    hub name or encoder spec as written."""
    from engine.core.ranking.rerankers.endpoint import Endpoint, is_served
    if is_served(arg):
        e = Endpoint.parse(arg)
        return ["served", e.base, e.model]
    if kind == "embed":
        return ["encoder", arg, *[files_identity(p) for p in encoder_paths(arg)]]
    if kind in ("llm", "llm-list"):
        from engine.core.ranking.rerankers.packaged import PACKAGED, packaged_path
        if arg.lower() in PACKAGED:
            try:
                arg = packaged_path(arg)
            except Exception:
                return ["name", arg]  # not installed: refused when loaded
    path = Path(arg).expanduser()
    if path.exists():
        return ["files", files_identity(path)]
    snapshot = hub_snapshot(arg)
    return ["name", arg, files_identity(snapshot)] if snapshot is not None else ["name", arg]


def hub_snapshot(name: str) -> Path | None:
    """The folder of the Hugging Face cache's snapshot a hub name loads from, where one is cached here (no
    network): a model updated in the cache is another model."""
    try:
        from huggingface_hub import try_to_load_from_cache
        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # not a repository name, or no hub client: known by its name
        return None
    return Path(found).parent if isinstance(found, str) else None


def encoder_paths(spec: str) -> list[Path]:
    """The local files or folders an encoder spec names (`sbert:/models/x`, `adapted:/dir`): the parts of
    its argument that exist on disk."""
    _, _, arg = spec.partition(":")
    out = []
    for part in [arg, *arg.split(":")]:
        p = Path(part).expanduser() if part else None
        if p is not None and p.exists() and p not in out:
            out.append(p)
    return out[:1]


def option_identity(name: str, value: object) -> object:
    """An option as it shapes the scores: a template FILE by its text, the rest as given."""
    if name == "template" and isinstance(value, str) and value not in ("qwen3-reranker", "chat"):
        try:
            return ["file", hashlib.sha256(Path(value).read_bytes()).hexdigest()]
        except OSError:
            return ["file", value, "unreadable"]
    return value


def model_key(spec: Any) -> str:
    """The model's identity alone (its files, or served URL and name; no options): what a process's loaded
    models are kept by, so one replaced on disk is loaded again, and `llm:` and `llm-list:` share one."""
    kind = "llm" if spec.kind == "llm-list" else spec.kind
    return hashlib.sha256(json.dumps(model_identity(kind, spec.arg), default=str).encode("utf-8")).hexdigest()[:32]


def fingerprint(spec: Any) -> str:
    """A hex digest of what computes the scores of a `RerankerSpec` (no model loads); a cross-encoder's also
    names its runtime and weights (`backend`), so int8 scores never answer for float32 ones, nor torch's for
    onnxruntime's."""
    from engine.version import __version__
    parts = [__version__, spec.kind, model_identity(spec.kind, spec.arg),
             [[k, option_identity(k, v)] for k, v in spec.options if k != "dtype"]]
    if spec.kind == "cross":
        parts.append(backend(spec))
    from engine.core.ranking.rerankers.endpoint import is_served
    if not is_served(spec.arg):  # a local model's scores differ by device and precision (fp16 on a GPU)
        from engine.core.encoders.device import precision
        parts.append(precision())
    return hashlib.sha256(json.dumps(parts, default=str).encode("utf-8")).hexdigest()[:32]


def backend(spec: Any) -> dict:
    """A cross-encoder's runtime (onnx on a CPU where it exports, else torch) and weights' dtype (float32 unless
    given): `cross_onnx.runtime`, which refuses int8 on torch."""
    from engine.core.ranking.rerankers.cross_onnx import runtime
    dtype = spec.kwargs.get("dtype", "float32")
    return {"runtime": runtime(model_key(spec), spec.kwargs.get("max_length"), dtype, spec.arg), "dtype": dtype}


def spec_files(spec: str) -> str:
    """A model spec (`PREFIX:NAME_OR_DIR`) with its local folder's or file's identity (`files_identity`: size,
    mtime and a hash of the first and last MiB of each file), or the spec alone for a hub name: what a stage that
    encodes queries with such a model keys the cache on."""
    path = Path(spec.partition(":")[2] or spec).expanduser()
    if not path.exists():
        return spec
    return json.dumps([spec, files_identity(path)], default=str)
