"""Fusion weights for the `tuned` method: coordinate ascent on nDCG@10 (DSEBench gain) over a small grid,
per fold on that fold's training cases, and weights files in and out."""
from __future__ import annotations

import math
import os
from typing import Mapping, Sequence

import numpy as np

from engine.io.fusion import WEIGHT_GRID, coordinate_ascent, normalize_array
from engine.io.ranking import top_k
from engine.errors import EngineError, preview
from engine.eval.evaluate import evaluate
from engine.io.runs import Qrels, Run
from engine.io.tables import read_json
from engine.progress import info, warn
from engine.tasks.dse.data import Case, Fold
from engine.tasks.dse.index import FEATURES, DseIndex
from engine.tasks.dse.rank import PreparedCase, prepare_cases
from engine.tasks.dse.stages import METHOD_SYSTEMS

TUNE_METRIC = "ndcg@10"
POOL = 500          # per feature, for tuning: docs outside every feature's top POOL are never ranked


def weights_vector(weights: Mapping[str, float]) -> list[float]:
    """{feature: weight} as one weight per FEATURES column (missing features weigh 0)."""
    unknown = [k for k in weights if k not in FEATURES]
    if unknown:
        raise EngineError(f"unknown DSE feature(s) {', '.join(unknown)} in the weights; known: {', '.join(FEATURES)}")
    return [float(weights.get(f, 0.0)) for f in FEATURES]


def default_weights() -> list[float]:
    """Tuning's starting point: the four RRF systems, equally weighted."""
    return [1.0 if f in METHOD_SYSTEMS["rrf"] else 0.0 for f in FEATURES]


def _pool(p: PreparedCase) -> np.ndarray:
    """Positions in the top POOL of any feature that has input: the only docs a tuning trial ranks."""
    top = [top_k(p.feats[:, j], POOL, p.banned) for j in range(p.feats.shape[1]) if np.any(p.feats[:, j])]
    return np.unique(np.concatenate(top)) if top else np.zeros(0, dtype=np.int64)


def tune_weights(prepared: Sequence[PreparedCase], qrels: Qrels, ids: Sequence[str],
                 passes: int = 3) -> tuple[list[float], float]:
    """Coordinate ascent over WEIGHT_GRID maximizing mean nDCG@10 (DSEBench gain) on judged cases.

    Z-scores are taken over the whole catalogue once; ranking is then restricted to each case's pool
    (top POOL docs of any feature), which keeps every trial a small matrix product.
    """
    judged = [p for p in prepared if p.case_id in qrels]
    if not judged:
        raise EngineError("no training case has both judgments and a ranking; cannot tune weights")
    tables = []
    for p in judged:
        pool = _pool(p)
        # one feature column at a time, as the weights have always been fitted (a whole-matrix pass sums
        # in another order and may round differently in the last bit)
        z = np.column_stack([normalize_array(col, "zscore") for col in p.feats.T]).astype(np.float32)[pool]
        tables.append((p.case_id, pool, z))
    sub_qrels = {p.case_id: qrels[p.case_id] for p in judged}

    def objective(w: np.ndarray) -> float:
        run: Run = {}
        for cid, pool, z in tables:
            s = z @ w
            run[cid] = {ids[pool[i]]: float(s[i]) for i in top_k(s, 10)}
        return evaluate(run, sub_qrels, TUNE_METRIC).means[TUNE_METRIC]

    return coordinate_ascent(objective, default_weights(), WEIGHT_GRID, passes)


def cross_validated_weights(index: DseIndex, cases: Mapping[str, Case], queries: Mapping[str, str],
                            folds: Sequence[Fold], case_ids: Sequence[str], prepared: Sequence[PreparedCase],
                            cases_path: object = "cases.tsv") -> tuple[dict[str, list[float]], dict]:
    """Weights for every case: those of the fold whose test part holds it, tuned on that fold's train
    cases; cases in no fold's test part get weights tuned on every judged case. Also the report that
    `save_weights` writes: {features, folds: {name: {train_ndcg@10, weights}}, all?}."""
    have = {p.case_id: p for p in prepared}
    judged_all: Qrels = {}
    for f in folds:
        for part in (f.train, f.valid, f.test):
            judged_all.update(part)
    need = [c for c in judged_all if c in cases and c not in have]
    if need:
        info(f"dse: scoring {len(need)} judged training case(s)")
        for p in prepare_cases(index, cases, queries, need, cases_path):
            have[p.case_id] = p
    unknown = [c for c in judged_all if c not in cases]
    if unknown:
        warn(f"{len(unknown)} judged case id(s) are not in the cases file; not used for tuning: {preview(unknown)}")
    per_case: dict[str, list[float]] = {}
    report: dict = {"features": list(FEATURES), "folds": {}}
    for f in folds:
        train = [have[c] for c in f.train if c in have]
        w, v = tune_weights(train, f.train, index.ids)
        report["folds"][f.name] = {"train_ndcg@10": round(v, 4), "weights": dict(zip(FEATURES, w))}
        info(f"dse tune {f.name}: train nDCG@10 {v:.4f} on {len(train)} cases")
        for c in f.test:
            per_case.setdefault(c, w)
    rest = [c for c in case_ids if c not in per_case]
    if rest:
        w, v = tune_weights(list(have.values()), judged_all, index.ids)
        report["all"] = {"train_ndcg@10": round(v, 4), "weights": dict(zip(FEATURES, w))}
        for c in rest:
            per_case[c] = w
    return per_case, report


def load_weights(path: str | os.PathLike) -> list[float]:
    """A weights file: {feature: weight}, or the report `save_weights` writes (its `all` weights)."""
    data = read_json(path, "weights file")
    if isinstance(data, dict) and isinstance(data.get("all"), dict):
        data = data["all"].get("weights", data["all"])
    if not isinstance(data, dict) or not data:
        raise EngineError(f"{path}: expected {{feature: weight}}; features: {', '.join(FEATURES)}")
    try:
        vec = weights_vector({k: float(v) for k, v in data.items()})
    except (TypeError, ValueError):
        raise EngineError(f"{path}: weights must be numbers") from None
    if not any(vec) or not all(math.isfinite(x) for x in vec):
        raise EngineError(f"{path}: weights must be finite and not all zero")
    return vec
