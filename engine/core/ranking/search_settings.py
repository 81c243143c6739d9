"""How a collection is searched, beside the query itself: `Collection.search`, `search_many` and
`search_to_run` take these as keywords (`col.search("q", k=5, mode="hybrid")`) or as one object, and every
search door (the Python API, `engine search`, the service) turns them into one pipeline:

    retrieve(NAME, mode, k=depth, where, fusion, nprobe, ef, k_factor) >> rerank(SPEC, depth) % k

(without a reranker, `retrieve(…, k, texts=False)`: no stage reads the hits' texts)

run by the pipeline runner (`engine.core.ranking.pipeline.run.run_pipeline`), so a search answers what the
same pipeline file answers.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from engine.core.ranking.pipeline.query import Query
    from engine.core.ranking.pipeline.stage import Stage
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.core.storage.index.faiss_index import SearchKnobs
    from engine.core.storage.searchable import Hit, SearchableCollection


@dataclass(frozen=True)
class SearchSettings:
    """`k` hits per query; `knobs` override the stored nprobe / efSearch / k_factor for this search; `mode`
    dense, bm25 or hybrid (default: hybrid where the collection stores BM25) fused by `fusion`; `where` a
    metadata filter (`engine.core.ranking.filters`); `rerank` a reranker spec (text, or a `RerankerSpec`
    parsed at the edge; text queries only) that reorders the first stage's top `rerank_depth` hits, with
    `rerank_options` (e.g. template=, instruction=); `batch_size` queries run together by `search_many`."""
    k: int = 10
    knobs: "SearchKnobs | None" = None
    mode: str | None = None
    fusion: str = "weighted"
    where: str | None = None
    rerank: "str | RerankerSpec | None" = None
    rerank_depth: int | None = None
    rerank_options: Mapping[str, Any] | None = None
    batch_size: int = 64

    @classmethod
    def of(cls, settings: "SearchSettings | None", options: Mapping[str, Any],
           **defaults: Any) -> "SearchSettings":
        """`settings` (or the defaults) with the keyword `options` a caller gave on top; an unknown keyword is a
        TypeError naming it, as a misspelt keyword argument is."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unexpected search option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        base = settings if settings is not None else cls(**defaults)
        return replace(base, **options) if options else base

    def stage(self, col: "SearchableCollection", text: bool) -> "Stage":
        """The search as a stage tree over the opened collection `col`, every argument checked against it before
        any model loads (`text`: the queries are texts, not images, items or vectors)."""
        from engine.core.ranking.hybrid import check_search_mode
        from engine.core.ranking.pipeline.retrieve import Retrieve
        check_search_mode(col, self.mode, self.fusion, self.where, text)
        spec, depth = self._reranker(col, text)
        knobs = {n: getattr(self.knobs, n) for n in ("nprobe", "ef", "k_factor")} if self.knobs else {}
        first = Retrieve(col.name, self.mode, depth, self.where, self.fusion, texts=spec is not None,
                         **{n: v for n, v in knobs.items() if v is not None})
        col.check_search(depth, self.knobs)
        if spec is None:
            return first
        return first >> rerank_stage(spec, depth) % self.k

    def parsed(self) -> "SearchSettings":
        """These settings with the reranker spec parsed (once: a `RerankerSpec` is taken as it is) with its
        options, and its depth checked against k; a depth or an option without a reranker is refused. No
        collection is needed: what a command checks at its edge, before anything opens."""
        from engine.errors import EngineError, opt
        given = {n: v for n, v in (self.rerank_options or {}).items() if v is not None}
        if self.rerank is None:
            if self.rerank_depth is not None:
                raise EngineError(f"{opt('rerank_depth')} goes with {opt('rerank')} SPEC")
            if given:
                raise EngineError(f"{opt('rerank_' + next(iter(given)))} goes with {opt('rerank')} SPEC")
            return self
        from engine.core.ranking.rerankers.registry import check_depth
        from engine.core.ranking.rerankers.spec import RerankerSpec
        check_depth(self.rerank_depth, self.k)
        return replace(self, rerank=RerankerSpec.parse(self.rerank, **given), rerank_options=None)

    def _reranker(self, col: "SearchableCollection", text: bool) -> "tuple[RerankerSpec | None, int]":
        """The parsed reranker and the depth the first stage fetches for it (k without one), checked against
        the collection's items."""
        from engine.errors import EngineError, opt
        spec = self.parsed().rerank
        if spec is None:
            return None, self.k
        from engine.core.ranking.rerankers.registry import check_depth
        depth = check_depth(self.rerank_depth, self.k)
        if not text:
            raise EngineError(f"{opt('rerank')} reorders the hits of a text query; an image query takes none")
        from engine.core.ranking.rerankers.stage import check_candidates
        check_candidates(spec, col.kind, f"collection {col.name!r}")
        from engine.core.storage.store.stored import IMAGE_FILES
        if col.kind == "image" and IMAGE_FILES not in col.stored:
            raise EngineError(f"collection {col.name!r} records no image files; rebuild it to rerank its images")
        return spec, depth


def rerank_stage(spec: "RerankerSpec", depth: int) -> "Stage":
    """`rerank(spec, depth)` given the parsed spec: nothing is parsed again on the way."""
    from engine.core.ranking.pipeline.rerank import Rerank
    return Rerank(spec, depth)


def run_search(col: "SearchableCollection", stage: "Stage", queries: Sequence["Query"]) -> "list[list[Hit]]":
    """The stage tree run on the queries over the opened collection (no stage cache: a search is answered
    fresh), each query's ranking as hits: rank, id, score and the item's metadata."""
    from engine.core.ranking.pipeline.run import run_pipeline
    from engine.core.ranking.pipeline.stage import Context
    run = run_pipeline(stage, queries, Context(opened={col.name: col}))
    return [as_hits(run[q.qid]) for q in queries]


def as_hits(ranking) -> "list[Hit]":
    """A ranking as hits, each with the metadata its first stage read (`meta` in the item's fields)."""
    from engine.core.storage.searchable import Hit
    return [Hit(d, s, r, dict(ranking.fields.get(d, {}).get("meta") or {}))
            for r, (d, s) in enumerate(ranking, 1)]
