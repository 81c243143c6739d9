"""`rerank(spec, depth)`: each query's top `depth` items reordered by any reranker of the registry
(`engine.core.ranking.rerankers`), the rest kept below them in their order."""
from __future__ import annotations

from typing import Any, Sequence

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.pipeline.stage import Context, Run, Stage, check_range, input_of, keep_args
from engine.errors import EngineError


class Rerank(Stage):
    """The top `depth` of each ranking scored by the reranker `spec` reading the query's text and each
    item's text (or image file): from the ranking's own fields, else from the collection `docs` (with
    `group`, a group's text is its first item's). Ties keep the incoming order; a query without text keeps
    its ranking. `fields` names the docs' metadata fields to read (joined), where the collection records no
    text of its own. Further keyword arguments are the reranker's own options."""
    name = "rerank"

    def __init__(self, spec: str, depth: int = 100, docs: str | None = None, group: str | None = None,
                 fields: Sequence[str] | None = None, **options: Any) -> None:
        super().__init__()
        from engine.core.ranking.rerankers.registry import RERANK_DEPTH, checked_options
        if not isinstance(spec, str):
            raise EngineError("rerank(…) needs a reranker spec first, e.g. rerank(\"cross:/models/ce\")")
        try:
            checked_options(spec, keywords=True, **options)  # the kind takes these options, each in range (nothing is read)
        except EngineError as exc:
            raise EngineError(f"rerank(\"{spec}\"): {exc}") from None
        check_range("rerank", "depth", depth, RERANK_DEPTH)
        if fields is not None and (not isinstance(fields, (list, tuple)) or not all(isinstance(f, str) for f in fields)):
            raise EngineError("rerank(…): fields must be a list of the docs' metadata fields to read")
        self.spec, self.depth, self.docs, self.group, self.options = spec, int(depth), docs, group, options
        self.fields = list(fields) if fields is not None else None
        keep_args(self, [spec], {"depth": (depth, 100), "docs": (docs, None), "group": (group, None),
                                 "fields": (self.fields, None),
                                 **{k: (v, object()) for k, v in options.items()}})

    def needs_input(self) -> bool:
        return True

    def collections(self) -> list[str]:
        return [self.docs] if self.docs else []

    def prepare(self, ctx: Context) -> None:
        self._reranker()

    def _reranker(self):
        """One loaded reranker per spec and options per process (`cached_reranker`)."""
        from engine.core.ranking.rerankers.registry import cached_reranker
        return cached_reranker(self.spec, **self.options)

    def _doc_texts(self, ctx: Context) -> dict[str, dict]:
        if not self.docs:
            return {}
        key = ("rerank-docs", self.docs, self.group, tuple(self.fields or ()))
        if key not in ctx.memo:
            from engine.core.ranking.pipeline.retrieve import item_fields
            col = ctx.collection(self.docs)
            items = col.items
            out: dict[str, dict] = {}
            for it, f in zip(items, item_fields(col, items, self.fields)):
                out.setdefault(str(it.get(self.group, "")) if self.group else it["id"], f)
            ctx.memo[key] = out
        return ctx.memo[key]

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.ranking.rerankers.base import IMAGE, TEXT
        from engine.core.ranking.rerankers.stage import rerank_ranking
        run = input_of(self, run, queries)
        todo = [q for q in queries if q.text and len(run[q.qid])]
        if not todo:
            return dict(run)
        reranker, docs = self._reranker(), self._doc_texts(ctx)
        out = dict(run)
        for q in todo:
            ranking = run[q.qid]
            head = ranking.ids[:self.depth]
            fields = {d: ranking.fields.get(d) or docs.get(d, {}) for d in head}
            kind = IMAGE if any("image" in f for f in fields.values()) else TEXT
            if kind == IMAGE and IMAGE not in reranker.candidates:
                raise EngineError(f"rerank(\"{self.spec}\") scores texts only, and the items to rerank are "
                                  "images: give one that scores (text, image) pairs, e.g. vlm:… or embed:clip:…")
            if kind == TEXT and TEXT not in reranker.candidates:
                raise EngineError(f"rerank(\"{self.spec}\") scores images only, and the items to rerank are "
                                  "texts: give a text reranker (llm:, llm-list:, cross:, embed:)")
            cands = {d: f.get("image" if kind == IMAGE else "text", "") for d, f in fields.items()}
            out[q.qid] = rerank_ranking(reranker, q.text, ranking, cands, self.depth, kind)
        return out
