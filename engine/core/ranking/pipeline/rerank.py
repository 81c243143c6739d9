"""`rerank(spec, depth)`: each query's top `depth` items reordered by any reranker of the registry
(`engine.core.ranking.rerankers`), the rest kept below them in their order."""
from __future__ import annotations

from typing import Any, Sequence

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.rerankers.spec import RerankerSpec  # a light module: the annotations a pipeline file is checked by
from engine.core.ranking.pipeline.stage import Context, Run, Stage, check_range, input_of, keep_args
from engine.errors import EngineError

BATCH_QUERIES = 32
"""Queries scored together (one batch across queries); their new scores are kept before the next batch."""


class Rerank(Stage):
    """The top `depth` of each ranking scored by the reranker `spec` reading the query's text and each
    item's text (or image file): from the ranking's own fields, else from the collection `docs` (with
    `group`, a group's text is its first item's). Ties keep the incoming order; a query without text keeps
    its ranking. `fields` names the docs' metadata fields to read (joined), where the collection records no
    text of its own. Further keyword arguments are the reranker's own options.

    With a stage cache folder, scores are kept per (reranker, query, candidate) under `<folder>/scores/`:
    only pairs not seen before are scored, and the model is loaded only for them."""
    name = "rerank"

    def __init__(self, spec: "str | RerankerSpec", depth: int = 100, docs: str | None = None,
                 group: str | None = None, fields: Sequence[str] | None = None, **options: Any) -> None:
        super().__init__()
        from engine.core.ranking.rerankers.registry import RERANK_DEPTH
        if not isinstance(spec, (str, RerankerSpec)):
            raise EngineError("rerank(…) needs a reranker spec first, e.g. rerank(\"cross:/models/ce\")")
        try:  # the kind takes these options, each in range; its model is checked with the stage (nothing is read)
            self.spec = RerankerSpec.parse(spec, keywords=True, check_arg=False, **options)
        except EngineError as exc:
            raise EngineError(f"rerank(\"{spec}\"): {exc}") from None
        check_range("rerank", "depth", depth, RERANK_DEPTH)
        if fields is not None and (not isinstance(fields, (list, tuple)) or not all(isinstance(f, str) for f in fields)):
            raise EngineError("rerank(…): fields must be a list of the docs' metadata fields to read")
        self.depth, self.docs, self.group, self.options = int(depth), docs, group, options
        self.fields = list(fields) if fields is not None else None
        keep_args(self, [spec if isinstance(spec, str) else spec.text],
                  {"depth": (depth, 100), "docs": (docs, None), "group": (group, None),
                   "fields": (self.fields, None), **{k: (v, object()) for k, v in self.given(spec, options).items()}})

    @staticmethod
    def given(spec: "str | RerankerSpec", options: dict[str, Any]) -> dict[str, Any]:
        """The options `str(stage)` writes: those given, or a parsed spec's own."""
        return options if isinstance(spec, str) else {**dict(spec.options), **options}

    def needs_input(self) -> bool:
        return True

    def collections(self) -> list[str]:
        return [self.docs] if self.docs else []

    def check(self, ctx: Context) -> None:
        try:
            self.spec.check_arg()
        except EngineError as exc:
            raise EngineError(f"{self}: {exc}") from None
        super().check(ctx)

    def fingerprint(self, ctx: Context) -> str:
        """The reranker's model files (or served URL and model), options and the engine's version: read
        without loading the model."""
        known = ctx.state.fingerprints
        if id(self) not in known:  # the cache key, prepare and the pair scores all ask: the files are read once
            from engine.core.ranking.rerankers.fingerprint import fingerprint
            known[id(self)] = fingerprint(self.spec)
        return known[id(self)]

    def prepare(self, ctx: Context) -> None:
        if self._score_cache(ctx) is None:  # scores that may all be kept load the model only if they are not
            self._reranker()

    def _reranker(self):
        """One loaded reranker per spec and options per process."""
        return self.spec.load()

    def _score_cache(self, ctx: Context):
        folder = getattr(ctx.cache, "folder", None)
        if folder is None:
            return None
        from engine.core.ranking.rerankers.score_cache import ScoreCache
        return ScoreCache(folder / "scores", self.fingerprint(ctx))

    def _doc_fields(self, ctx: Context) -> dict[str, dict]:
        """Item id (or group value) → what the reranker reads of it, from the collection `docs`."""
        if not self.docs:
            return {}
        key = (self.docs, self.group, tuple(self.fields or ()))
        if key not in ctx.state.rerank_docs:
            from engine.core.ranking.rerankers.candidates import item_fields
            col = ctx.collection(self.docs)
            items = col.items
            out: dict[str, dict] = {}
            for it, f in zip(items, item_fields(col, items, self.fields)):
                out.setdefault(str(it.get(self.group, "")) if self.group else it["id"], f)
            ctx.state.rerank_docs[key] = out
        return ctx.state.rerank_docs[key]

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.ranking.rerankers.base import IMAGE, TEXT
        from engine.core.ranking.rerankers.scoring import score_items
        from engine.core.ranking.rerankers.stage import check_candidates, reordered
        run = input_of(self, run, queries)
        todo = [q for q in queries if q.text and len(run[q.qid])]
        if not todo:
            return dict(run)
        docs = self._doc_fields(ctx)
        items = []
        for q in todo:
            ranking = run[q.qid]
            fields = [ranking.fields.get(d) or docs.get(d, {}) for d in ranking.ids[:self.depth]]
            kind = IMAGE if any(IMAGE in f for f in fields) else TEXT
            check_candidates(self.spec, kind, f"{self}: the items to rerank")
            items.append((q.text, [f.get(kind, "") for f in fields], kind))
        cache = self._score_cache(ctx)
        out = dict(run)
        scored = unread = asked = cached = 0
        from engine.core.ranking.rerankers.scoring import meter_label, pair_count
        from engine.progress import meter
        try:
            with meter(meter_label(self.spec), *pair_count(self.spec, items)):  # one meter over the chunks
                for start in range(0, len(todo), BATCH_QUERIES):
                    got = score_items(self.spec, self._reranker, items[start:start + BATCH_QUERIES], cache)
                    for q, scores in zip(todo[start:start + BATCH_QUERIES], got.scores):
                        out[q.qid] = reordered(run[q.qid], scores, self.depth)
                    scored, cached = scored + got.scored, cached + got.cached
                    unread, asked = unread + got.unread, asked + got.asked
        finally:
            if cache is not None:
                cache.close()
        ctx.note(self, pairs_scored=scored, pairs_cached=cached)
        if unread:
            from engine.core.ranking.rerankers.scoring import Scored
            ctx.degrade(self, Scored(unread=unread, asked=asked).degraded(self.spec) or "")
        return out
