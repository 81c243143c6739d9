"""Whether a model name that is not a local folder may be fetched from the Hugging Face hub: when the hub
cannot be reached, the libraries are asked for their cache only (`local_files_only`), so a missing model is
one line at once instead of a minute of retries with back-off (and their log lines)."""
from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

PROBE_SECONDS = 3.0
"""How long one connection to the hub may take before it counts as unreachable."""


@functools.lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """One TCP connection to the hub's host (HF_ENDPOINT's, else huggingface.co), once per process; False
    when the environment says offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0") or \
            os.environ.get("TRANSFORMERS_OFFLINE", "").strip() not in ("", "0"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=PROBE_SECONDS):
            return True
    except OSError:
        return False


def cache_only(name: str) -> bool:
    """`local_files_only` for loading `name`: True for a local folder, and for a hub name when the hub is out
    of reach (its cache is then all there is)."""
    return Path(name).exists() or not hub_reachable()


def unreachable_hint(name: str) -> str:
    """What to say about a hub name that could not be loaded."""
    if Path(name).exists() or hub_reachable():
        return ""
    return (f"{name!r} is not a local folder and not in the Hugging Face cache, and the hub cannot be reached "
            "from here")


def cached(name: str) -> bool:
    """Whether the hub cache holds the model `name` (or `sentence-transformers/name`, as that library looks)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    for repo in (name, f"sentence-transformers/{name}") if "/" not in name else (name,):
        try:
            if isinstance(try_to_load_from_cache(repo, "config.json"), str):
                return True
        except Exception:  # noqa: BLE001  (a name that is no valid repo id is simply not cached)
            continue
    return False


def out_of_reach(name: str) -> str:
    """Why `name` cannot be loaded here, said before the heavy libraries are imported ("" when it may be)."""
    if Path(name).exists() or cached(name):
        return ""
    return unreachable_hint(name)


def check_holds_model(name: str, said: str) -> None:
    """Refuse, in one line starting with `said`, a local folder `name` with neither a transformers
    `config.json` nor a sentence-transformers `modules.json`: a wrong folder (a model's parent, say), refused
    before anything is built or loaded."""
    path = Path(name).expanduser()
    if path.is_dir() and not any((path / f).is_file() for f in ("config.json", "modules.json")):
        from engine.errors import EngineError
        raise EngineError(f"{said}: the folder holds no model (no config.json or modules.json)")
