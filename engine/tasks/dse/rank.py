"""Cases → feature matrices → rankings: untuned reciprocal rank fusion of four systems, or a weighted sum
of z-scored features (weights from `tune`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine.core.fusion import rrf, weighted_arrays
from engine.core.pipeline.query import Query
from engine.core.ranking import top_k
from engine.errors import EngineError, preview, where
from engine.progress import track, warn
from engine.tasks.dse.data import Case
from engine.tasks.dse.index import FEATURES, DseIndex

METHODS = ("rrf", "tuned", "query", "examples")
RRF_SYSTEMS = {"rrf": ("q_dense", "q_bm25", "ex_mean_all", "ex_bm25"),
               "query": ("q_dense", "q_bm25"),
               "examples": ("ex_mean_all", "ex_bm25")}
RRF_DEPTH = 1000    # per system list fed to RRF


@dataclass
class PreparedCase:
    """One case ready to rank: its docs × FEATURES matrix and the example positions it must not return."""
    case_id: str
    feats: np.ndarray
    banned: list[int]


def case_queries(known: Mapping[str, int], cases: Mapping[str, Case], queries: Mapping[str, str],
                 case_ids: Sequence[str], cases_path: object = "cases.tsv") -> list[Query]:
    """The cases to rank as pipeline queries (text and known example ids). Unknown example datasets are dropped
    with a warning (the case is then ranked by what is left); an unknown query leaves the examples; a case with
    neither is skipped."""
    unknown_ex: list[str] = []
    examples_only: list[str] = []
    skipped: list[str] = []
    out = []
    for cid in case_ids:
        case = cases[cid]
        text = queries.get(case.query_id, "")
        ex = []
        for e in case.examples:
            if e in known:
                ex.append(e)
            else:
                unknown_ex.append(f"{where(cases_path, case.line)} case {cid} dataset {e}")
        if not ex and not text:
            skipped.append(cid)
            continue
        if not text:
            examples_only.append(f"{where(cases_path, case.line)} case {cid} query {case.query_id}")
        out.append(Query(cid, text, tuple(ex)))
    if unknown_ex:
        warn(f"{len(unknown_ex)} example dataset id(s) are not in the index and are ignored: {preview(unknown_ex, 3)}")
    if examples_only:
        warn(f"{len(examples_only)} case(s) name a query id missing from the queries file; ranked by their "
             f"examples only: {preview(examples_only, 3)}")
    if skipped:
        warn(f"{len(skipped)} case(s) have neither a known query nor a known example dataset; no ranking: "
             f"{preview(skipped)}")
    return out


def prepare_cases(index: DseIndex, cases: Mapping[str, Case], queries: Mapping[str, str],
                  case_ids: Sequence[str], cases_path: object = "cases.tsv") -> list[PreparedCase]:
    """Feature matrices of the cases to rank (what the tuned weighted fusion reads), for `case_queries`."""
    qs = case_queries(index.pos, cases, queries, case_ids, cases_path)
    with_query = [q for q in qs if q.text]
    vecs = index.encode_queries([q.text for q in with_query]) if with_query else []
    vec_of = dict(zip([q.qid for q in with_query], vecs))
    out = []
    for q in track(qs, len(qs), "scoring cases"):
        ex = [index.pos[e] for e in q.examples]
        out.append(PreparedCase(q.qid, index.features(vec_of.get(q.qid), q.text or None, ex), ex))
    return out


def rank_rrf(feats: np.ndarray, systems: Sequence[str], banned: Sequence[int], depth: int) -> list[tuple[int, float]]:
    """RRF over the named feature columns, each a system ranking its top RRF_DEPTH docs."""
    lists = []
    for name in systems:
        col = feats[:, FEATURES.index(name)]
        if not np.any(col):
            continue  # a system with no input (e.g. no examples) says nothing
        lists.append([(str(i), float(col[i])) for i in top_k(col, RRF_DEPTH, banned)])
    return [(int(d), s) for d, s in rrf(lists, depth=depth)]


def rank_weighted(feats: np.ndarray, weights: Sequence[float], banned: Sequence[int],
                  depth: int) -> list[tuple[int, float]]:
    """Weighted sum of per-case z-scored features (z over the whole catalogue)."""
    fused = weighted_arrays(feats, weights, method="zscore")
    return [(int(i), float(fused[i])) for i in top_k(fused, depth, banned)]


def rankings_for(prepared: Sequence[PreparedCase], ids: Sequence[str], method: str, depth: int,
                 weights: Mapping[str, Sequence[float]] | None = None) -> dict[str, list[tuple[str, float]]]:
    """{case_id: [(dataset_id, score)]} best first. For `tuned`, `weights` maps case_id → weight vector."""
    if method not in METHODS:
        raise EngineError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    out = {}
    for p in prepared:
        if method == "tuned":
            ranked = rank_weighted(p.feats, weights[p.case_id], p.banned, depth)  # type: ignore[index]
        else:
            ranked = rank_rrf(p.feats, RRF_SYSTEMS[method], p.banned, depth)
        out[p.case_id] = [(ids[i], s) for i, s in ranked]
    return out
