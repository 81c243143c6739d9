"""`--rerank SPEC --rerank-depth N` as one checked value the search commands pass along (no model loads)."""
from __future__ import annotations

from dataclasses import dataclass

from engine.core.rerankers.registry import check_depth, entry_for, reranker_help
from engine.errors import EngineError, opt

__all__ = ["RerankOptions", "reranker_help"]


@dataclass(frozen=True)
class RerankOptions:
    spec: str | None = None
    depth: int | None = None

    @classmethod
    def checked(cls, spec: str | None, depth: int | None, k: int) -> "RerankOptions":
        """The spelling of the spec and the depth's range, checked before anything is opened."""
        if spec is None:
            if depth is not None:
                raise EngineError(f"{opt('rerank_depth')} goes with {opt('rerank')} SPEC")
            return cls()
        entry_for(spec)
        check_depth(depth, k)
        return cls(spec.strip(), depth)

    def kwargs(self) -> dict:
        """Keyword arguments of `Collection.search`/`search_many`/`search_to_run`."""
        return {"rerank": self.spec, "rerank_depth": self.depth} if self.spec else {}

    def remote(self) -> dict:
        """Keyword arguments of the service client."""
        return {"rerank": self.spec, "rerank_depth": self.depth} if self.spec else {}
