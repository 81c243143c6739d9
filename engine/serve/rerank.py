"""The service's reranking stage: `"rerank": true` (the first spec `engine serve --rerank` allowed) or one of the
allowed specs by name; anything else is refused, so a client can never make the server load a model."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.errors import EngineError

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec


def check_allowed(specs: "tuple[str | RerankerSpec, ...]") -> "tuple[RerankerSpec, ...]":
    """`engine serve --rerank SPEC` values parsed once, at start-up (no model loads until a request asks)."""
    from engine.core.ranking.rerankers.spec import RerankerSpec
    return tuple(RerankerSpec.parse(spec) for spec in specs)


def chosen_spec(allowed: "tuple[RerankerSpec, ...]", value: Any) -> "RerankerSpec | None":
    """The parsed spec a request's `rerank` value names (None: no reranking)."""
    if value is None or value is False:
        return None
    if not allowed:
        raise EngineError("this server reranks nothing; start it with `engine serve --rerank SPEC` to allow a "
                          "reranker")
    if value is True:
        return allowed[0]
    for spec in allowed:
        if isinstance(value, str) and value.strip() == spec.text:
            return spec
    raise EngineError(f"rerank: {str(value)[:80]!r} is not allowed here; give true or one of "
                      f"{', '.join(s.text for s in allowed)}")
