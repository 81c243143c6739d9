"""Stage outputs kept on disk (and in memory for one process), keyed by the stage's text, everything upstream
of it, the generations of the collections it reads and the query set: a second run that changes only a
later stage reads the earlier ones back, and a rebuilt collection invalidates what depends on it.

One JSON file per (stage, input, queries) under the cache folder (default `$ENGINE_CACHE/pipelines`),
written atomically."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from engine.io.ranking import Ranking
from engine.errors import EngineError

Run = dict[str, Ranking]


def default_cache_dir() -> Path:
    from engine.core.encoders.base import cache_dir
    return Path(cache_dir()) / "pipelines"


def stage_key(stage_text: str, upstream: str | None, generations: list[str], queries: str) -> str:
    h = hashlib.sha256(json.dumps([stage_text, upstream, generations, queries]).encode("utf-8"))
    return h.hexdigest()[:32]


class StageCache:
    """Runs by key: in memory always, on disk under `folder` unless it is None."""

    def __init__(self, folder: str | os.PathLike | None = None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.memory: dict[str, Run] = {}
        if self.folder is not None:
            if self.folder.exists() and not self.folder.is_dir():
                raise EngineError(f"--cache {self.folder} is a file; give a folder")

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Run | None:
        if key in self.memory:
            return self.memory[key]
        if self.folder is None:
            return None
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            run = {q: Ranking.from_json(r) for q, r in data["run"].items()}
        except (OSError, ValueError, KeyError, TypeError, EngineError):
            return None  # absent or damaged: computed again and rewritten
        self.memory[key] = run
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
