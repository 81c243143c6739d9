"""Query vectors and scores checked finite: a `vector` query is searched as given, so its values must keep
every inner product inside float32, and a score that still comes out NaN or infinite (a damaged collection)
is a one-line 422, never `"score": null` or an empty hit list answered 200."""
from __future__ import annotations

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


def finite_hits(name: str, scores: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's (scores, rows), refused when a found row's score is not a finite number."""
    if not np.isfinite(scores[rows >= 0]).all():
        raise EngineError(f"collection {name!r} gave a NaN or infinite score: it holds a non-finite vector; "
                          f"run `engine verify {name}` and rebuild it")
    return scores, rows
