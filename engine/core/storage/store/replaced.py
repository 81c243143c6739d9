"""What a forced build is about to replace, said before it does: a build may replace a collection of another
kind (a text collection `engine serve` serves, by a LoRA adapter of the same name) only with --force, and
never silently."""
from __future__ import annotations

import json
from pathlib import Path

from engine.core.storage.store.generations import MANIFEST
from engine.errors import opt


def replaced_kind(folder: Path) -> str | None:
    """The kind (`text`, `image`, `lora`, …) of the collection in `folder`, "unreadable" for a manifest that
    does not parse, None when there is none."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        return str(manifest.get("kind") or "unknown") if isinstance(manifest, dict) else "unreadable"
    except (OSError, ValueError):
        return "unreadable"


def announce_replacement(folder: Path, new_kind: str) -> None:
    """A warning line (shown even with --quiet) when `folder` holds a collection of another kind than `new_kind`."""
    from engine.progress import warn
    kind = replaced_kind(folder)
    if kind is None or kind == new_kind:
        return
    count = ""
    try:
        count = f" of {int(json.loads((folder / MANIFEST).read_text(encoding='utf-8'))['count'])} items"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    warn(f"{opt('force')}: replacing {folder.name!r} in {folder.parent}/, a collection of kind {kind!r}{count}, "
         f"with one of kind {new_kind!r}")
