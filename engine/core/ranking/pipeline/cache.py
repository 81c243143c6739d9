"""Stage outputs kept on disk (and in memory for one process), keyed by the identity of what computed them:
the stage's text and fingerprint (a reranker's model files, a served model), the keys of its children and of
its input (so everything upstream counts), the generations of the collections it reads and the query set.
A second run that changes only a later stage reads the earlier ones back; a rebuilt collection or a replaced
model invalidates what depends on it.

One JSON file per key under the cache folder (default `$ENGINE_CACHE/pipelines`): `<2 hex>/<key>.json`,
written atomically; rerankers keep their pair scores under `scores/` beside them. A file's modification time
is when it was last used (a read refreshes it): with `ENGINE_CACHE_MAX_GB` set, the least recently used
files go after a write until the folder fits. `cache_info` and `clear_cache` are `engine cache`'s work."""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from engine.io.ranking import Ranking
from engine.errors import EngineError

Run = dict[str, Ranking]

MAX_GB_ENV = "ENGINE_CACHE_MAX_GB"
SCORES = "scores"
"""The folder of rerankers' pair scores inside the cache folder."""
SCORES_KIND = "rerank scores"
ENTRY = re.compile(r"^[0-9a-f]{2}$"), re.compile(r"^[0-9a-f]{32}\.json$")
"""A stage entry's folder and file names."""


def default_cache_dir() -> Path:
    from engine.core.encoders.base import cache_dir
    return Path(cache_dir()) / "pipelines"


def stage_key(stage_text: str, fingerprint: str, upstream: str | None, children: Sequence[str],
              generations: Sequence[str], queries: str) -> str:
    """The key of a stage's output: its text and fingerprint, its children's keys and its input's key (each
    of which holds theirs), the generations of the collections it reads itself, and the query set."""
    h = hashlib.sha256(json.dumps([stage_text, fingerprint, upstream, list(children), list(generations),
                                   queries]).encode("utf-8"))
    return h.hexdigest()[:32]


def max_bytes() -> int | None:
    """The folder's size limit from `ENGINE_CACHE_MAX_GB` (None: unset, no limit); one line when it is not a
    positive number."""
    raw = os.environ.get(MAX_GB_ENV)
    if raw is None or not raw.strip():
        return None
    try:
        gb = float(raw)
    except ValueError:
        raise EngineError(f"{MAX_GB_ENV}={raw!r} is not a number (the stage cache's size limit in GB)") from None
    if not gb > 0 or gb == float("inf"):
        raise EngineError(f"{MAX_GB_ENV}={raw!r} must be a positive number of GB (unset it for no limit)")
    return int(gb * 2**30)


def used(path: str | os.PathLike) -> None:
    """Mark a cache file used now: its recency, which the size limit evicts by."""
    try:
        os.utime(path)
    except OSError:
        pass  # a read-only cache still serves; it is only evicted sooner


class StageCache:
    """Runs by key: in memory always, on disk under `folder` unless it is None."""

    def __init__(self, folder: str | os.PathLike | None = None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.memory: dict[str, Run] = {}
        self.limit: int | None = None
        if self.folder is not None:
            if self.folder.exists() and not self.folder.is_dir():
                raise EngineError(f"--cache {self.folder} is a file; give a folder")
            self.limit = max_bytes()

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str, qids: Iterable[str] = ()) -> Run | None:
        """The run stored under `key`, or None when it is absent, damaged or lacks one of `qids`."""
        run = self.memory.get(key)
        if run is None and self.folder is not None:
            path = self._path(key)
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                run = {q: Ranking.from_json(r) for q, r in data["run"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError, EngineError):
                return None  # absent or damaged: computed again and rewritten
            used(path)
            self.memory[key] = run
        if run is None or any(q not in run for q in qids):
            return None  # an entry that does not cover its queries is computed again
        return run

    def put(self, key: str, run: Run, stage_text: str) -> None:
        self.memory[key] = run
        if self.folder is None:
            return
        from engine.io.atomic import atomic_open
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_open(path) as fh:
                json.dump({"stage": stage_text, "run": {q: r.to_json() for q, r in run.items()}}, fh)
        except OSError as e:
            raise EngineError(f"cannot write the stage cache in {self.folder} ({e}); give another --cache or "
                              "--no-cache") from None
        if self.limit is not None:
            evict(self.folder, self.limit, keep=path)


# ---------------------------------------------------------------- what the folder holds

@dataclass(frozen=True)
class CacheFile:
    path: Path
    size: int
    used: float   # when it was last used (its modification time)
    scores: bool  # a reranker's pair scores (else a stage entry)


def cache_files(folder: str | os.PathLike) -> list[CacheFile]:
    """The stage entries and pair-score files under `folder` (nothing else there is the cache's)."""
    folder = Path(folder)
    out: list[CacheFile] = []
    if not folder.is_dir():
        return out
    for sub in folder.iterdir():
        if sub.is_dir() and sub.name == SCORES:
            files = [(p, True) for p in sub.rglob("*") if p.is_file()]
        elif sub.is_dir() and ENTRY[0].match(sub.name):
            files = [(p, False) for p in sub.iterdir() if p.is_file() and ENTRY[1].match(p.name)]
        else:
            continue
        for p, scores in files:
            try:
                st = p.stat()
            except OSError:
                continue  # removed meanwhile
            out.append(CacheFile(p, st.st_size, st.st_mtime, scores))
    return out


def evict(folder: str | os.PathLike, limit: int, keep: Path | None = None) -> list[CacheFile]:
    """Remove the least recently used files until the folder's cache files fit in `limit` bytes (`keep`, the
    file just written, stays); returns what went."""
    files = cache_files(folder)
    total = sum(f.size for f in files)
    gone: list[CacheFile] = []
    for f in sorted(files, key=lambda f: f.used):
        if total <= limit:
            break
        if keep is not None and f.path == keep:
            continue
        if _remove(f.path):
            total -= f.size
            gone.append(f)
    return gone


def _remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as e:
        raise EngineError(f"cannot remove {path} from the stage cache ({e})") from None
    if ENTRY[1].match(path.name):
        try:
            path.parent.rmdir()  # a stage entries' folder, when empty now
        except OSError:
            pass
    return True


def stage_kind(text: str) -> str:
    """The constructor of a stage from its text (`retrieve(…)` → retrieve, `a | b` → fuse), read without
    building the stage."""
    import ast
    names = {ast.RShift: "then", ast.Mod: "cutoff", ast.BitOr: "fuse", ast.BitXor: "concat"}
    try:
        node = ast.parse(f"(\n{text.strip()}\n)", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "unreadable"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node, ast.BinOp) and type(node.op) in names:
        return names[type(node.op)]
    return "unreadable"


def _kind(f: CacheFile) -> str:
    if f.scores:
        return SCORES_KIND
    try:
        text = json.loads(f.path.read_text(encoding="utf-8")).get("stage")
    except (OSError, ValueError, AttributeError):
        return "unreadable"
    return stage_kind(text) if isinstance(text, str) else "unreadable"


def cache_info(folder: str | os.PathLike) -> dict:
    """The folder, its cache files' total size and count, and each kind's (a stage's constructor, or the
    rerankers' pair scores)."""
    files = cache_files(folder)
    kinds: dict[str, dict[str, int]] = {}
    for f in files:
        k = kinds.setdefault(_kind(f), {"entries": 0, "bytes": 0})
        k["entries"] += 1
        k["bytes"] += f.size
    return {"folder": str(folder), "bytes": sum(f.size for f in files), "entries": len(files),
            "kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1]["bytes"]))}


def clear_cache(folder: str | os.PathLike, older_than_days: float | None = None) -> tuple[int, int]:
    """Remove the cache files (those not used for more than `older_than_days`, when given); returns
    (files, bytes) removed."""
    if older_than_days is not None and not older_than_days > 0:
        raise EngineError(f"--older-than must be a number of days greater than 0, not {older_than_days}")
    before = time.time() - older_than_days * 86_400 if older_than_days is not None else None
    n = size = 0
    for f in cache_files(folder):
        if (before is None or f.used < before) and _remove(f.path):
            n, size = n + 1, size + f.size
    return n, size
