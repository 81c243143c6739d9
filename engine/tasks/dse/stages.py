"""DSEBench's untuned rankings as pipelines of core stages (what `engine pipeline show dse` prints and
`engine dse submit` runs): reciprocal rank fusion of the query's dense and BM25 scores and the examples'
dense (mean over the examples) and BM25 scores, each over the whole catalogue, the examples excluded;
optionally reranked by the query against each dataset's whole record."""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.core.ranking.pipeline.parse import pipeline_file_text
from engine.tasks.dse.data import FIELDS
from engine.tasks.dse.index import DEFAULT_NAME, field_array

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec

SYSTEM_DEPTH = 1000   # per system list fed to RRF
INSTRUCTION = "Given a query and example datasets, retrieve datasets that serve the query as the examples do"
"""What an llm:/llm-list: reranker is told the task is (`options_taken`: only kinds that take one)."""


def systems(name: str = DEFAULT_NAME) -> dict[str, str]:
    col = f'"{name}"'
    fields = "[" + ", ".join(f'"{f}"' for f in FIELDS) + "]"
    emb = f'"{field_array("all")}"'
    return {"q_dense": f"score({col}, array={emb}, k={SYSTEM_DEPTH})",
            "q_bm25": f"score({col}, mode=\"bm25\", k={SYSTEM_DEPTH})",
            "ex_mean_all": f"score({col}, by=\"examples\", array={emb}, k={SYSTEM_DEPTH})",
            "ex_bm25": f"score({col}, by=\"examples\", mode=\"bm25\", fields={fields}, k={SYSTEM_DEPTH})"}


METHOD_SYSTEMS = {"rrf": ("q_dense", "q_bm25", "ex_mean_all", "ex_bm25"),
                  "query": ("q_dense", "q_bm25"),
                  "examples": ("ex_mean_all", "ex_bm25")}


def default_pipeline(method: str = "rrf", depth: int = 100, name: str = DEFAULT_NAME, rerank: str | None = None,
                     rerank_depth: int = 20) -> str:
    parts = systems(name)
    body = ",\n     ".join(parts[s] for s in METHOD_SYSTEMS[method])
    expr = f"fuse({body},\n     depth={depth})"
    if rerank is not None:
        expr = f"{expr}\n  >> {rerank_stage(rerank, rerank_depth, name)}"
    return expr


def rerank_stage(spec: "str | RerankerSpec", depth: int = 20, name: str = DEFAULT_NAME) -> str:
    """The query read against each dataset's whole record (its fields joined, what BM25 and `all` embed)."""
    from engine.core.ranking.rerankers.registry import options_taken
    from engine.core.ranking.rerankers.spec import RerankerSpec
    fields = "[" + ", ".join(f'"{f}"' for f in FIELDS) + "]"
    told = "".join(f", {k}=\"{v}\""
                   for k, v in options_taken(RerankerSpec.parse(spec), instruction=INSTRUCTION).items())
    return f'rerank("{spec}", depth={depth}, docs="{name}", fields={fields}{told})'



def default_pipeline_file() -> str:
    return pipeline_file_text(default_pipeline(), "DSEBench: query + example datasets → datasets "
                                                  "(`engine dse submit --pipeline FILE`)")
