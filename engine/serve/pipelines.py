"""A served pipeline shaped by a request: `where`, `mode` and `fusion` apply to its first stage when that is a
`retrieve(…)` (a request's filter narrows the pipeline's own: both hold); any other first stage cannot use
them, and the request is refused naming the field, never run as if it had not asked."""
from __future__ import annotations

from typing import Any, Callable

from engine.core.ranking.pipeline.stage import Cutoff, Then
from engine.core.ranking.pipeline.stage import Stage
from engine.errors import EngineError


def shaped(stage: Stage, where: str | None = None, mode: str | None = None, fusion: str = "weighted") -> Stage:
    """The pipeline with the request's first-stage options applied (the pipeline itself when none is given)."""
    asked: dict[str, Any] = {name: v for name, v in (("where", where), ("mode", mode)) if v is not None}
    if fusion != "weighted":
        asked["fusion"] = fusion
    if not asked:
        return stage
    return _with_first(stage, lambda first: _retrieve_with(first, asked))


def home_collection(stage: Stage) -> str | None:
    """The collection the pipeline's first stage reads: whose items its hits are."""
    while True:
        if isinstance(stage, Then):
            stage = stage.first
        elif isinstance(stage, Cutoff):
            stage = stage.stage
        elif stage.collections():
            return stage.collections()[0]
        elif stage.children():
            stage = stage.children()[0]
        else:
            return None


def _with_first(stage: Stage, change: Callable[[Stage], Stage]) -> Stage:
    if isinstance(stage, Then):
        return Then(_with_first(stage.first, change), stage.second)
    if isinstance(stage, Cutoff):
        return Cutoff(_with_first(stage.stage, change), stage.k)
    return change(stage)


def _retrieve_with(first: Stage, asked: dict[str, Any]) -> Stage:
    from engine.core.ranking.pipeline.retrieve import Retrieve
    if not isinstance(first, Retrieve):
        field = next(iter(asked))
        raise EngineError(f"{field}: this pipeline starts with {first.name}(…), which takes no {field}; only a "
                          f"pipeline that starts with retrieve(…) does (leave out {field})")
    kwargs = dict(first.kwargs)
    if "where" in asked:
        from engine.core.ranking.filters import parse_where
        try:
            parse_where(asked["where"])
        except EngineError as exc:
            raise EngineError(f"where: {exc}") from None
        kwargs["where"] = f"({first.where}) and ({asked['where']})" if first.where else asked["where"]
    kwargs.update({name: v for name, v in asked.items() if name != "where"})
    return Retrieve(*first.args, **kwargs)
