"""Cases → pipeline queries (`case_queries`; the untuned rankings are pipelines: `engine.tasks.dse.stages`),
and cases → feature matrices → the tuned ranking, a weighted sum of z-scored features (weights from `tune`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine.io.fusion import weighted_arrays
from engine.core.ranking.pipeline.query import Query
from engine.io.ranking import top_k
from engine.errors import preview, where
from engine.progress import track, warn
from engine.tasks.dse.data import Case
from engine.tasks.dse.index import DseIndex

METHODS = ("rrf", "tuned", "query", "examples")  # rrf, query, examples: pipelines (engine.tasks.dse.stages)


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


def rank_weighted(feats: np.ndarray, weights: Sequence[float], banned: Sequence[int],
                  depth: int) -> list[tuple[int, float]]:
    """Weighted sum of per-case z-scored features (z over the whole catalogue)."""
    fused = weighted_arrays(feats, weights, method="zscore")
    return [(int(i), float(fused[i])) for i in top_k(fused, depth, banned)]


def tuned_rankings(prepared: Sequence[PreparedCase], ids: Sequence[str], depth: int,
                   weights: Mapping[str, Sequence[float]]) -> dict[str, list[tuple[str, float]]]:
    """{case_id: [(dataset_id, score)]} best first by the tuned weighted fusion (`weights`: case_id → vector)."""
    return {p.case_id: [(ids[i], s) for i, s in rank_weighted(p.feats, weights[p.case_id], p.banned, depth)]
            for p in prepared}
