"""Each benchmark's scoring rules as a named profile, so `engine eval RUN QRELS --profile NAME` prints the
table that benchmark publishes and task commands score themselves the same way. The rules come from the
organizers' public scorers; no profile needs a task's code."""
from __future__ import annotations

from dataclasses import dataclass

from engine.errors import EngineError


@dataclass(frozen=True)
class Profile:
    name: str
    metrics: str   # comma-separated, in the published table's order
    help: str
    checker: str = "trec"  # which rules accept a run: "trec" (engine.eval.validate) or "ntcir" (engine.eval.ntcir)


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("trec", "ndcg@10,map,mrr,recall@10,p@10", "trec_eval semantics (ties by docid descending, "
            "qrels queries missing from the run score 0)"),
    Profile("eventa", "eventa", "EVENTA 2025 Track 2: Overall = r × weighted harmonic mean of mAP, MRR, "
            "R@1, R@5, R@10 over the top 10"),
    Profile("dsebench", "ndcg@5,ndcg@10,map@5,map@10,recall@5,recall@10", "DSEBench: gain query_rel × "
            "target_sim, the metrics of the published table"),
    Profile("ntcir-a", "ndcg_exp@1,ndcg_exp@3,ndcg_exp@5", "NTCIR-19 ModelRetrieval A: nDCG@1/3/5 with gain "
            "2^rel − 1 (per criticality tier with groups); the NTCIR checker: up to 5 RunIDs scored apart, every "
            "topic lists every candidate, ties by line order", checker="ntcir"),
    Profile("ntcir-b", "mrr", "NTCIR-19 ModelRetrieval B: MRR of the one relevant LoRA; the NTCIR checker, "
            "`x.png` = `x`, `0001` = `1`", checker="ntcir"),
    Profile("mllm", "ndcg@10,mrr", "TREC 2025 Million LLMs: nDCG@10 and MRR"),
)}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise EngineError(f"unknown scoring profile {name!r}; known: {', '.join(PROFILES)}") from None
