"""Fitting the `conse-neighbours` adapter (what it is: `engine.core.encoders.neighbours`): the means, the
memory of fitted photos, and its knobs by cross-validation by photo on the pairs themselves."""
from __future__ import annotations

import numpy as np

from engine.core.encoders.base import l2_normalize
from engine.core.folds import fold_assignment, splits
from engine.core.encoders.neighbours import FORM, Neighbours

ALPHAS = (0.0, 0.1, 0.2, 0.3)
KS = (5, 10, 20)
TAUS = (0.05, 0.2, 1.0)
FOLDS = 5


def remember(caps: np.ndarray, owner: np.ndarray, conse: np.ndarray, pooled: np.ndarray, photos: np.ndarray,
             alpha: float = 0.0, k: int = 5, tau: float = 1.0) -> Neighbours:
    """The form fitted on the captions of `photos` (rows of conse/pooled; `owner`: each caption's photo row)."""
    unit_caps = l2_normalize(caps)
    text_mean = unit_caps[np.isin(owner, photos)].mean(0)
    image_mean = l2_normalize(conse)[photos].mean(0)
    feats = l2_normalize(pooled)
    feature_mean = feats[photos].mean(0)
    mean_caps = np.stack([unit_caps[owner == p].mean(0) for p in photos])
    return Neighbours(text_mean, image_mean, feature_mean, l2_normalize(feats[photos] - feature_mean),
                      l2_normalize(mean_caps - text_mean), alpha, k, tau)


def grid() -> list[tuple[float, int, float]]:
    """(alpha, k, tau), the simplest first (ties keep it): alpha 0 is one point."""
    return [(0.0, KS[0], TAUS[-1])] + [(a, k, t) for a in ALPHAS[1:] for k in KS for t in TAUS]


def r_at_1(queries: np.ndarray, gallery: np.ndarray, gold: np.ndarray) -> np.ndarray:
    return (np.argmax(queries @ gallery.T, axis=1) == gold).astype(float)


def fit_neighbours(caps: np.ndarray, owner: np.ndarray, conse: np.ndarray, pooled: np.ndarray,
                   seed: int = 0) -> tuple[Neighbours, dict]:
    """Knobs by 5-fold cross-validation by photo (each fold's captions ranked against every photo, the fold's
    own photos unseen and the others encoded as fitted), then the form fitted on all pairs."""
    n = len(conse)
    fold_of = fold_assignment(n, min(FOLDS, n), seed)
    folds = [test for _, test in splits(fold_of)]
    points = grid()
    hits = np.zeros((len(points), len(caps)))
    base = np.zeros(len(caps))
    for fold in folds:
        held = np.isin(owner, fold)
        rest = np.setdiff1d(np.arange(n), fold)
        base[held] = r_at_1(l2_normalize(caps[held]), l2_normalize(conse), owner[held])
        for i, (alpha, k, tau) in enumerate(points):
            form = remember(caps, owner, conse, pooled, rest, alpha, k, tau)
            hits[i, held] = r_at_1(form.texts(caps[held]), form.images(conse, pooled), owner[held])
    scores = hits.mean(1)
    best = int(np.argmax(scores))
    alpha, k, tau = points[best]
    form = remember(caps, owner, conse, pooled, np.arange(n), alpha, k, tau)
    report = {"form": FORM, "photos": int(n), "pairs": int(len(caps)), "folds": len(folds), "seed": seed,
              "cv_r@1_views_only": float(base.mean()), "cv_r@1_chosen": float(scores[best]),
              "chosen": form.params(),
              "cv": [{"alpha": a, "k": kk, "tau": t, "r@1": float(s)} for (a, kk, t), s in zip(points, scores)]}
    return form, report
