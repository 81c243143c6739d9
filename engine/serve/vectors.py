"""Query vectors checked finite and searched: a `vector` query is searched as given, so its values must keep
every inner product inside float32 (a score that still comes out NaN or infinite, a damaged collection, is
refused by the collection's search: a one-line 422, never `"score": null` or an empty hit list answered 200);
every vector search of the service goes through the search pipeline."""
from __future__ import annotations

from typing import Any

import numpy as np

from engine.errors import EngineError

F32_MAX = float(np.finfo(np.float32).max)


def check_vector(vec: np.ndarray) -> np.ndarray:
    """`vec` if all its values are finite and their absolute sum is below float32's maximum: stored vectors
    are L2-normalized (every component within ±1), so no partial sum of a score can overflow."""
    if not np.isfinite(vec).all():
        raise EngineError("vector holds a NaN or infinite value")
    total = float(np.abs(vec.astype(np.float64)).sum())
    if total >= F32_MAX:
        raise EngineError(f"vector: the absolute values sum to {total:.3g}, over float32's {F32_MAX:.3g}; its "
                          "scores would overflow (scale the vector down: rankings do not change)")
    return vec


def vector_search(col: Any, vectors: np.ndarray, k: int) -> list:
    """Query vectors (a text batch's, an id's, a client's, an uploaded image's) searched by the search pipeline
    every door runs (`retrieve(NAME, mode="dense", k)`, `engine.core.ranking.search_settings`): the hits, in
    order, one list per vector."""
    from engine.core.ranking.pipeline.query import Query
    from engine.core.ranking.search_settings import SearchSettings, run_search
    stage = SearchSettings(k=k, mode="dense").stage(col, False)
    return run_search(col, stage, [Query(str(n), vector=tuple(v)) for n, v in enumerate(np.asarray(vectors).tolist())])
