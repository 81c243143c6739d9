"""Per-query ranking metrics, defined exactly as the official scorers compute them, and their registry.

trec_eval semantics throughout: a doc is relevant when its grade is >= 1; the ranking is the run's
docs ordered by score descending, ties by docid descending (the rank column plays no part); cutoffs
cut the ranking, never the denominators (`map@k` and `recall@k` divide by all relevant docs, `p@k`
by k). Our own code: `ir_measures` is only the tests' oracle.

A metric is one function `(query: Judged, k) -> value` registered with one `@metric(...)` line: its name,
whether it takes a cutoff, the spellings users paste in from trec_eval or ir_measures, and a help line.
Parsing, `--metrics` help and the unknown-metric error are generated from the registry.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from engine.errors import EngineError

RELEVANT = 1  # trec_eval's default relevance level
OPTIONAL, REQUIRED, NONE = "optional", "required", "none"  # does the metric take a cutoff k?


@dataclass(frozen=True)
class Judged:
    """One query as the metrics see it: the grades of the run's docs in ranked order and all judged grades."""
    rels: Sequence[int]
    judged: Sequence[int]

    @property
    def num_rel(self) -> int:
        return sum(1 for r in self.judged if r >= RELEVANT)


MetricFn = Callable[[Judged, "int | None"], "float | dict[str, float]"]


@dataclass(frozen=True)
class MetricDef:
    family: str
    fn: MetricFn
    cutoff: str
    help: str
    aliases: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()  # per-query columns of a metric that reports several values (its fn returns them)
    summary: Callable[..., dict[str, float]] | None = None  # run-level aggregation, when not the mean of the qrels


REGISTRY: dict[str, MetricDef] = {}


def metric(family: str, cutoff: str = OPTIONAL, aliases: tuple[str, ...] = (), help: str = "",
           parts: tuple[str, ...] = (), summary: Callable[..., dict[str, float]] | None = None):
    """Register the decorated function as the metric `family` (see the module docstring)."""
    def register(fn: MetricFn) -> MetricFn:
        REGISTRY[family] = MetricDef(family, fn, cutoff, help or (fn.__doc__ or "").split("\n")[0], aliases,
                                     parts, summary)
        return fn
    return register


@dataclass(frozen=True)
class Metric:
    """A registered metric family with an optional cutoff k (None: the whole ranking)."""
    family: str
    k: int | None = None

    @property
    def name(self) -> str:
        return self.family if self.k is None else f"{self.family}@{self.k}"

    @property
    def definition(self) -> MetricDef:
        return REGISTRY[self.family]

    @property
    def columns(self) -> list[str]:
        """Names of the per-query values this metric produces."""
        return list(self.definition.parts) or [self.name]


# ---------------------------------------------------------------- primitives (also used by task objectives)

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


# ---------------------------------------------------------------- EVENTA 2025 Track 2

EVENTA_DEPTH = 10
EVENTA_WEIGHTS: dict[str, float] = {"eventa.map": 0.3, "eventa.mrr": 0.2, "eventa.r@1": 0.2,
                                    "eventa.r@5": 0.15, "eventa.r@10": 0.15}
EVENTA_EPS = 1e-8
EVENTA_COVERAGE = "eventa.coverage"


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


def eventa_summary(per_query: Mapping[str, Mapping[str, float]], qids: Sequence[str],
                   answered: set[str]) -> dict[str, float]:
    """The organizers' aggregation: parts averaged over the queries the run answers ("valid" queries),
    Overall from those means times the coverage r = valid / ground-truth queries."""
    valid = [q for q in qids if q in answered]
    means = {p: (sum(per_query[q][p] for q in valid) / len(valid) if valid else 0.0) for p in EVENTA_WEIGHTS}
    coverage = len(valid) / len(qids) if qids else 0.0
    return {"eventa": eventa_overall(means, coverage), **means, EVENTA_COVERAGE: coverage}


# ---------------------------------------------------------------- the registered metrics

@metric("ndcg", aliases=("ndcg_cut",), help="trec_eval `ndcg_cut.k` (gain = grade)")
def ndcg_linear(q: Judged, k: int | None) -> float:
    return ndcg(q.rels, q.judged, k, linear_gain)


@metric("ndcg_exp", help="nDCG with gain 2^grade − 1 (NTCIR-19 ModelRetrieval)")
def ndcg_exponential(q: Judged, k: int | None) -> float:
    return ndcg(q.rels, q.judged, k, exp_gain)


@metric("map", aliases=("ap", "map_cut"), help="trec_eval `map`, `map_cut.k`")
def map_(q: Judged, k: int | None) -> float:
    return average_precision(q.rels, q.num_rel, k)


@metric("mrr", aliases=("rr", "recip_rank"), help="reciprocal rank of the first relevant doc (0 beyond k)")
def mrr(q: Judged, k: int | None) -> float:
    return reciprocal_rank(q.rels, k)


@metric("recall", REQUIRED, aliases=("r",), help="trec_eval `recall.k`: relevant docs in the top k over all relevant")
def recall_at(q: Judged, k: int | None) -> float:
    return recall(q.rels, q.num_rel, k or 0)


@metric("p", REQUIRED, aliases=("precision",), help="trec_eval `P.k`: relevant docs in the top k over k")
def precision_at(q: Judged, k: int | None) -> float:
    return precision(q.rels, k or 0)


@metric("eventa", NONE, help="EVENTA 2025 Track 2 Overall = r × weighted harmonic mean of (mAP, MRR, R@1, R@5, R@10) "
        "over the top 10, weights (0.3, 0.2, 0.2, 0.15, 0.15), ε = 1e-8; printed with its five parts (averaged "
        "over the queries the run answers) and r (`eventa.coverage` = answered / ground-truth queries)",
        parts=("eventa", *EVENTA_WEIGHTS, EVENTA_COVERAGE), summary=eventa_summary)
def eventa(q: Judged, k: int | None) -> dict[str, float]:
    return eventa_parts(q.rels, q.num_rel)


# ---------------------------------------------------------------- parsing

_SPELLING = re.compile(r"^(?P<base>[a-z_]+?)(?:[@._](?P<k>\d+))?$")


def _family(base: str) -> str | None:
    for family, d in REGISTRY.items():
        if base == family or base in d.aliases:
            return family
    return None


def known_metrics() -> str:
    """The metric names users may write, e.g. for help and errors: `ndcg@k, map, map@k, …`."""
    names = []
    for family, d in REGISTRY.items():
        names += {OPTIONAL: [family, f"{family}@k"], REQUIRED: [f"{family}@k"], NONE: [family]}[d.cutoff]
    return ", ".join(names)


def parse_metric(text: str) -> Metric:
    """`ndcg@10`, `map`, `P_10`, `ndcg_cut.10` … → Metric; anything else is an `EngineError`."""
    t = text.strip().lower()
    m = _SPELLING.match(t)
    family = _family(m.group("base")) if m else None
    if family is None:
        raise EngineError(f"unknown metric {text.strip()!r}; known: {known_metrics()}")
    k = int(m.group("k")) if m.group("k") else None  # type: ignore[union-attr]
    cutoff = REGISTRY[family].cutoff
    if cutoff == REQUIRED and k is None:
        raise EngineError(f"metric {text.strip()!r} needs a cutoff, e.g. {family}@10")
    if cutoff == NONE and k is not None:
        raise EngineError(f"metric {text.strip()!r} takes no cutoff")
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
        metric_ = parse_metric(str(item))
        if metric_ not in out:
            out.append(metric_)
    if not out:
        raise EngineError("no metrics given")
    return out


def trec_order(scores: Mapping[str, float]) -> list[str]:
    """Docids as trec_eval ranks them: score descending, ties broken by docid descending."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def score_query(scores: Mapping[str, float], judged: Mapping[str, int],
                metrics: Sequence[Metric]) -> dict[str, float]:
    """Every metric's per-query value for one query: `scores` is the run's {docid: score}."""
    q = Judged([judged.get(doc, 0) for doc in trec_order(scores)], list(judged.values()))
    out: dict[str, float] = {}
    for m in metrics:
        value = m.definition.fn(q, m.k)
        if isinstance(value, dict):
            out.update(value)
        else:
            out[m.name] = value
    return out


def metric_table() -> tuple[list[str], list[list[str]]]:
    """Headers and rows describing every registered metric (docs/eval.md, `engine eval --help`)."""
    forms = {OPTIONAL: "`{f}`, `{f}@k`", REQUIRED: "`{f}@k`", NONE: "`{f}`"}
    rows = [[forms[d.cutoff].format(f=f), ", ".join(f"`{a}`" for a in d.aliases) or "—", d.help]
            for f, d in REGISTRY.items()]
    return ["metric", "also written", "definition"], rows
