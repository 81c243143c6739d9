"""engine: dense multimodal retrieval for shared tasks.

    from engine import Collection
    col = Collection.build("photos", images="photos/")      # offline image–text model by default
    col.search("a cat on a sofa", k=5)

The tree shows the architecture: `engine.core` (encoders → collection store → FAISS index → search),
`engine.eval` (metrics, runs, scoring profiles) beside it, `engine.io` (files in and out) under both, and
one folder per benchmark in `engine.tasks`. Heavy imports (torch, faiss, models) happen on first use, so
`engine eval` starts fast.
"""
from __future__ import annotations

from engine.version import __version__

__all__ = ["Collection", "Hit", "EngineError", "load_encoder", "__version__"]


def __getattr__(name: str):
    if name in ("Collection", "Hit"):
        from engine.core import collection
        return getattr(collection, name)
    if name == "EngineError":
        from engine.errors import EngineError
        return EngineError
    if name == "load_encoder":
        from engine.core.encoders.registry import load_encoder
        return load_encoder
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
