"""`engine rerank RUN`: any TREC run's top `depth` documents per query reordered by a reranker reading the
documents' text from a source table; what lies below the depth keeps its order beneath them."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from engine.errors import EngineError, opt


def check_coverage(run: Mapping[str, Mapping[str, float]], run_path: Path, queries: Mapping[str, str],
                   queries_path: Path, docs: Mapping[str, str], docs_path: Path, depth: int) -> None:
    """Every query of the run has a text and every document it reranks one too: the first that lacks one is
    named, before any model loads."""
    from engine.io.fusion import ranked
    for qid, ranking in run.items():
        if qid not in queries:
            raise EngineError(f"{run_path}: query {qid!r} has no text in {queries_path}")
        for doc, _ in ranked(ranking)[:depth]:
            if doc not in docs:
                raise EngineError(f"{run_path}: query {qid!r} ranks document {doc!r}, which {docs_path} does not "
                                  f"hold (give {opt('docs')} the table the run was made from)")


def rerank_run_file(o: Any) -> tuple[int, int]:
    """`engine rerank RUN` (`engine.commands.rerank.RerankRunOptions`): read, check, rerank and write
    (atomically); returns (queries, lines written)."""
    from engine.core.ranking.rerankers.registry import check_depth
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.core.ranking.rerankers.stage import check_candidates
    from engine.core.sources import text_items
    from engine.io.runs import read_run, write_run
    from engine.io.tables import read_queries
    from engine.io.options import split_list
    run_path, queries_path, docs_path, spec, depth = o.run, o.queries, o.docs, o.model, o.depth
    spec = RerankerSpec.parse(spec, **o.reranker_options())
    check_candidates(spec, "text", str(docs_path))
    check_depth(depth, 1, "depth")
    run = read_run(run_path)
    if not run:
        raise EngineError(f"{run_path}: the run holds no lines")
    queries = dict(read_queries(queries_path))
    items, _ = text_items(docs_path, id_column=o.id_column, fields=split_list(o.fields))
    docs = {it.id: it.source for it in items}
    check_coverage(run, run_path, queries, queries_path, docs, docs_path, depth)
    from engine.core.ranking.rerankers.scoring import score_items
    from engine.core.ranking.rerankers.stage import reordered
    from engine.io.ranking import Ranking
    heads = {qid: Ranking.of(ranking).cut(depth).ids for qid, ranking in run.items()}
    got = score_items(spec, spec.load, [(queries[qid], [docs.get(d, "") for d in heads[qid]], "text") for qid in run])
    reranked = {qid: reordered(ranking, scores, depth) for (qid, ranking), scores in zip(run.items(), got.scores)}
    return len(reranked), write_run(o.out, reranked, o.run_id or f"rerank-{Path(run_path).stem}".replace(" ", "_"))
