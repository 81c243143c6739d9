"""`--rerank SPEC --rerank-depth N` (and the reranker's options: `--rerank-template`, `--rerank-instruction`,
`--rerank-rounds`) as one checked value the search commands pass along (no model loads)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.core.ranking.rerankers.registry import check_depth, reranker_help
from engine.core.ranking.rerankers.spec import RerankerSpec
from engine.errors import EngineError, opt

__all__ = ["RerankOptions", "reranker_help"]


@dataclass(frozen=True)
class RerankOptions:
    spec: RerankerSpec | None = None  # with its options (template=, instruction=, rounds=), checked
    depth: int | None = None
    options: tuple[tuple[str, Any], ...] = ()  # the options that were given (in `spec` too): what a server refuses

    @classmethod
    def checked(cls, spec: "str | RerankerSpec | None", depth: int | None, k: int, **options: Any) -> "RerankOptions":
        """The spelling of the spec, the depth's range and each option (template=, instruction=, rounds=),
        checked before anything is opened."""
        given = {name: value for name, value in options.items() if value is not None}
        if spec is None:
            if depth is not None:
                raise EngineError(f"{opt('rerank_depth')} goes with {opt('rerank')} SPEC")
            if given:
                raise EngineError(f"{opt('rerank_' + next(iter(given)))} goes with {opt('rerank')} SPEC")
            return cls()
        parsed = RerankerSpec.parse(spec, **given)
        check_depth(depth, k)
        return cls(parsed, depth, tuple((name, v) for name, v in parsed.options if name in given))

    def kwargs(self) -> dict:
        """Keyword arguments of `Collection.search`/`search_many`/`search_to_run`."""
        if not self.spec:
            return {}
        return {"rerank": self.spec, "rerank_depth": self.depth}

    def remote(self) -> dict:
        """Keyword arguments of the service client (which reranks with a spec the server allows, as it is)."""
        if self.options:
            raise EngineError(f"{opt('rerank_' + self.options[0][0])} shapes a reranker loaded here; a "
                              f"{opt('server')} reranks with the reranker it allows, as it was started")
        return {"rerank": self.spec.text, "rerank_depth": self.depth} if self.spec else {}
