"""The service's reranking stage: `"rerank": true` (the first spec `engine serve --rerank` allowed) or one of the
allowed specs by name; anything else is refused, so a client can never make the server load a model."""
from __future__ import annotations

from typing import Any

from engine.errors import EngineError


def check_allowed(specs: tuple[str, ...]) -> tuple[str, ...]:
    """`engine serve --rerank SPEC` values, spelled right (no model loads until a request asks)."""
    from engine.core.ranking.rerankers.spec import RerankerSpec
    for spec in specs:
        RerankerSpec.parse(spec)
    return tuple(s.strip() for s in specs)


def chosen_spec(allowed: tuple[str, ...], value: Any) -> str | None:
    """The spec a request's `rerank` value names (None: no reranking)."""
    if value is None or value is False:
        return None
    if not allowed:
        raise EngineError("this server reranks nothing; start it with `engine serve --rerank SPEC` to allow a "
                          "reranker")
    if value is True:
        return allowed[0]
    if isinstance(value, str) and value.strip() in allowed:
        return value.strip()
    raise EngineError(f"rerank: {str(value)[:80]!r} is not allowed here; give true or one of {', '.join(allowed)}")


def reranked_search(col: Any, text: str | None, k: int, spec: str, depth: int | None, **lexical: Any) -> list:
    """`Collection.search` with the reranker (text queries only: the core's own message otherwise); `lexical`
    (mode, fusion, where) shapes its first stage."""
    if text is None:
        raise EngineError("rerank reorders the hits of a text query; an id or vector query takes none")
    from engine.core.ranking.rerankers.spec import RerankerSpec
    parsed = RerankerSpec.parse(spec)
    col.check_rerank(parsed, depth, k, True)
    return col.search(text=text, k=k, rerank=parsed.load(), rerank_depth=depth, **lexical)


def reranked_batch(col: Any, texts: list[str | None], k: int, spec: str, depth: int | None,
                   **lexical: Any) -> list[list]:
    """`/search/batch` with the reranker: every query must be a text (checked first, so one bad query refuses
    the batch before any model loads); one batched first stage (`Collection.search_many`), then each reranked."""
    for n, text in enumerate(texts):
        if text is None:
            raise EngineError(f"queries.{n}: rerank reorders the hits of a text query; an id or vector query "
                              "takes none")
    from engine.core.ranking.rerankers.spec import RerankerSpec
    parsed = RerankerSpec.parse(spec)
    col.check_rerank(parsed, depth, k, True)
    return col.search_many(texts=texts, k=k, rerank=parsed.load(), rerank_depth=depth, **lexical)
