"""Per-query ranking metrics, defined exactly as the official scorers compute them.

trec_eval semantics throughout: a doc is relevant when its grade is >= 1; the ranking is the run's
docs ordered by score descending, ties by docid descending (the rank column plays no part); cutoffs
cut the ranking, never the denominators (`map@k` and `recall@k` divide by all relevant docs, `p@k`
by k). Our own code: `ir_measures` is only the tests' oracle.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from engine.errors import EngineError

RELEVANT = 1  # trec_eval's default relevance level

FAMILIES = ("ndcg", "ndcg_exp", "map", "mrr", "recall", "p", "eventa")
_NEEDS_K = {"recall", "p"}
_NO_K = {"eventa"}

# EVENTA 2025 Track 2 Overall: weighted harmonic mean of five parts over the top 10.
EVENTA_DEPTH = 10
EVENTA_WEIGHTS: dict[str, float] = {"eventa.map": 0.3, "eventa.mrr": 0.2, "eventa.r@1": 0.2,
                                    "eventa.r@5": 0.15, "eventa.r@10": 0.15}
EVENTA_EPS = 1e-8
EVENTA_COVERAGE = "eventa.coverage"

# trec_eval / ir_measures spellings users paste in, mapped onto ours.
_ALIASES = [
    (re.compile(r"^ndcg_cut[._](\d+)$"), "ndcg@{}"),
    (re.compile(r"^map_cut[._](\d+)$"), "map@{}"),
    (re.compile(r"^p[._](\d+)$"), "p@{}"),
    (re.compile(r"^precision@(\d+)$"), "p@{}"),
    (re.compile(r"^recall[._](\d+)$"), "recall@{}"),
    (re.compile(r"^r@(\d+)$"), "recall@{}"),
    (re.compile(r"^(?:rr|mrr|recip_rank)@(\d+)$"), "mrr@{}"),
    (re.compile(r"^(?:ap)@(\d+)$"), "map@{}"),
]
_PLAIN_ALIASES = {"recip_rank": "mrr", "rr": "mrr", "ap": "map", "ndcg_cut": "ndcg"}
_SPEC = re.compile(r"^(ndcg_exp|ndcg|map|mrr|recall|p|eventa)(?:@(\d+))?$")


@dataclass(frozen=True)
class Metric:
    """A metric family with an optional cutoff k (None: the whole ranking)."""
    family: str
    k: int | None = None

    @property
    def name(self) -> str:
        return self.family if self.k is None else f"{self.family}@{self.k}"

    @property
    def columns(self) -> list[str]:
        """Names of the per-query values this metric produces (eventa reports its five parts)."""
        return list(EVENTA_WEIGHTS) if self.family == "eventa" else [self.name]


def parse_metric(text: str) -> Metric:
    """`ndcg@10`, `map`, `P_10`, `ndcg_cut.10` … → Metric; anything else is an `EngineError`."""
    t = text.strip().lower()
    t = _PLAIN_ALIASES.get(t, t)
    for pattern, template in _ALIASES:
        m = pattern.match(t)
        if m:
            t = template.format(m.group(1))
            break
    m = _SPEC.match(t)
    if not m:
        raise EngineError(f"unknown metric {text.strip()!r}; known: ndcg@k, ndcg_exp@k, map, map@k, mrr, mrr@k, "
                          "recall@k, p@k, eventa")
    family, k = m.group(1), (int(m.group(2)) if m.group(2) else None)
    if family in _NEEDS_K and k is None:
        raise EngineError(f"metric {text.strip()!r} needs a cutoff, e.g. {family}@10")
    if family in _NO_K and k is not None:
        raise EngineError(f"metric {text.strip()!r} takes no cutoff: EVENTA is defined over the top {EVENTA_DEPTH}")
    if k is not None and k < 1:
        raise EngineError(f"metric {text.strip()!r}: the cutoff must be at least 1")
    return Metric(family, k)


def parse_metrics(spec: str | Sequence[str]) -> list[Metric]:
    """A comma-separated list (or a sequence) of metric names, duplicates dropped, order kept."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[Metric] = []
    for item in items:
        if not str(item).strip():
            continue
        metric = parse_metric(str(item))
        if metric not in out:
            out.append(metric)
    if not out:
        raise EngineError("no metrics given")
    return out


def trec_order(scores: Mapping[str, float]) -> list[str]:
    """Docids as trec_eval ranks them: score descending, ties broken by docid descending."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def _cut(values: Sequence[int], k: int | None) -> Sequence[int]:
    return values if k is None else values[:k]


def average_precision(rels: Sequence[int], num_rel: int, k: int | None = None) -> float:
    """trec_eval `map` / `map_cut.k`: precision at each relevant doc within the cutoff, over all relevant."""
    if num_rel <= 0:
        return 0.0
    hits, total = 0, 0.0
    for i, rel in enumerate(_cut(rels, k)):
        if rel >= RELEVANT:
            hits += 1
            total += hits / (i + 1)
    return total / num_rel


def reciprocal_rank(rels: Sequence[int], k: int | None = None) -> float:
    """trec_eval `recip_rank`: 1 / rank of the first relevant doc (0 if none within the cutoff)."""
    for i, rel in enumerate(_cut(rels, k)):
        if rel >= RELEVANT:
            return 1.0 / (i + 1)
    return 0.0


def recall(rels: Sequence[int], num_rel: int, k: int) -> float:
    """trec_eval `recall.k`: relevant docs in the top k over all relevant docs."""
    if num_rel <= 0:
        return 0.0
    return sum(1 for rel in rels[:k] if rel >= RELEVANT) / num_rel


def precision(rels: Sequence[int], k: int) -> float:
    """trec_eval `P.k`: relevant docs in the top k over k, even when fewer than k were retrieved."""
    return sum(1 for rel in rels[:k] if rel >= RELEVANT) / k


def linear_gain(rel: int) -> float:
    """trec_eval's default nDCG gain: the grade itself; zero and negative grades gain nothing."""
    return float(rel) if rel > 0 else 0.0


def exp_gain(rel: int) -> float:
    """NTCIR-19 ModelRetrieval gain 2^rel − 1 (so grade 3 is worth 7 times grade 1)."""
    return float(2 ** rel - 1) if rel > 0 else 0.0


def ndcg(rels: Sequence[int], judged: Sequence[int], k: int | None = None,
         gain: Callable[[int], float] = linear_gain) -> float:
    """trec_eval `ndcg_cut.k`: DCG (gain / log2(rank + 1)) over the ideal DCG of all judged grades."""
    dcg = sum(gain(rel) / math.log2(i + 2) for i, rel in enumerate(_cut(rels, k)) if rel > 0)
    ideal = sorted((gain(r) for r in judged if r > 0), reverse=True)
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(_cut(ideal, k)))
    return dcg / idcg if idcg > 0 else 0.0


def eventa_parts(rels: Sequence[int], num_rel: int) -> dict[str, float]:
    """One query's EVENTA parts over the top 10: AP, RR, R@1, R@5, R@10 (one correct image: AP = RR)."""
    top = rels[:EVENTA_DEPTH]
    return {"eventa.map": average_precision(top, num_rel, EVENTA_DEPTH),
            "eventa.mrr": reciprocal_rank(top, EVENTA_DEPTH),
            "eventa.r@1": recall(top, num_rel, 1),
            "eventa.r@5": recall(top, num_rel, 5),
            "eventa.r@10": recall(top, num_rel, 10)}


def eventa_overall(parts: Mapping[str, float], coverage: float = 1.0) -> float:
    """EVENTA Overall = r × Σw / Σ(w / (m + ε)), r = valid queries / ground-truth queries."""
    denom = sum(w / (parts[name] + EVENTA_EPS) for name, w in EVENTA_WEIGHTS.items())
    return coverage * sum(EVENTA_WEIGHTS.values()) / denom


def score_query(scores: Mapping[str, float], judged: Mapping[str, int],
                metrics: Sequence[Metric]) -> dict[str, float]:
    """Every metric's per-query value for one query: `scores` is the run's {docid: score}."""
    ranked = trec_order(scores)
    rels = [judged.get(doc, 0) for doc in ranked]
    grades = list(judged.values())
    num_rel = sum(1 for r in grades if r >= RELEVANT)
    out: dict[str, float] = {}
    for m in metrics:
        if m.family == "ndcg":
            out[m.name] = ndcg(rels, grades, m.k, linear_gain)
        elif m.family == "ndcg_exp":
            out[m.name] = ndcg(rels, grades, m.k, exp_gain)
        elif m.family == "map":
            out[m.name] = average_precision(rels, num_rel, m.k)
        elif m.family == "mrr":
            out[m.name] = reciprocal_rank(rels, m.k)
        elif m.family == "recall":
            out[m.name] = recall(rels, num_rel, m.k)  # type: ignore[arg-type]
        elif m.family == "p":
            out[m.name] = precision(rels, m.k)  # type: ignore[arg-type]
        elif m.family == "eventa":
            out.update(eventa_parts(rels, num_rel))
        else:  # pragma: no cover - parse_metric admits only FAMILIES
            raise EngineError(f"unknown metric family {m.family!r}")
    return out
