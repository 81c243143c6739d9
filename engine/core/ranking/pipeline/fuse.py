"""`fuse(a, b, …)`: several stages' rankings of each query fused into one (`a | b` is `fuse(a, b)`). The
stage is defined with `Stage`, whose `|` builds it (`engine.core.ranking.pipeline.stage`); the registry
finds `fuse` through this module."""
from __future__ import annotations

from engine.core.ranking.pipeline.stage import Fuse

__all__ = ["Fuse"]
