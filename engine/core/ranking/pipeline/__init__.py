"""Pipelines: rankers composed of stages (PyTerrier's idea, without pandas).

A stage takes queries and, unless it is a first stage, the ranking each query has so far, and returns a
ranking per query (`engine.io.ranking.Ranking`). Stages compose with operators — `a >> b` (then), `a % k`
(keep the top k), `a | b` (reciprocal rank fusion), `a ^ b` (a, then b's items a lacks) — in Python, or as
the same expression in a pipeline file (`engine.core.ranking.pipeline.parse`). `run_pipeline` runs one on a query
set, compiling it once into a plan and caching each costly stage's output on disk
(`engine.core.ranking.pipeline.cache`).
"""
from engine.core.ranking.pipeline.query import Query, read_queries_file
from engine.core.ranking.pipeline.run import run_pipeline
from engine.core.ranking.pipeline.stage import Context, Stage

__all__ = ["Context", "Query", "Stage", "read_queries_file", "run_pipeline"]
