"""Two-hop stages: `expand` turns ranked parents into their children (EVENTA: articles → their images),
`similarity` re-scores candidates by a text–image (or text) encoder and fuses that with their score."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.io import fusion
from engine.io.options import COUNT, SHARE
from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.pipeline.retrieve import POOLINGS, _vectors, item_fields
from engine.core.ranking.pipeline.stage import Context, Run, Stage, check_choice, check_range, input_of, keep_args
from engine.io.ranking import Ranking
from engine.errors import EngineError


class Expand(Stage):
    """Each ranked parent replaced by its children in `collection`, parent by parent in the parents' order
    (a child already placed is not repeated): `via` names the parent → children lists, as
    "COLLECTION:DOCUMENT" (a JSON document stored in a collection) — or `parent`, a metadata field of the
    children naming their parent. `top` parents are expanded (all by default), at most `per_parent`
    children each; once `limit` children are placed no further parent is opened. `score` "order" scores
    children by position, "parent" gives each its parent's score (to fuse with, e.g. `similarity`)."""
    name = "expand"

    def __init__(self, collection: str, via: str | None = None, parent: str | None = None, top: int | None = None,
                 per_parent: int | None = None, limit: int | None = None, score: str = "order") -> None:
        super().__init__()
        if (via is None) == (parent is None):
            raise EngineError("expand(…) needs either via=\"COLLECTION:DOCUMENT\" (parent → children lists) or "
                              "parent=\"FIELD\" (the children's field naming their parent)")
        if via is not None and (not isinstance(via, str) or ":" not in via):
            raise EngineError(f"expand(…): via must be \"COLLECTION:DOCUMENT\", not {via!r}")
        for opt_name, v in (("top", top), ("per_parent", per_parent), ("limit", limit)):
            if v is not None:
                check_range("expand", opt_name, v, COUNT)
        check_choice("expand", "score", score, ("order", "parent"))
        self.collection, self.via, self.parent = collection, via, parent
        self.top, self.per_parent, self.limit, self.score = top, per_parent, limit, score
        keep_args(self, [collection], {"via": (via, None), "parent": (parent, None), "top": (top, None),
                                       "per_parent": (per_parent, None), "limit": (limit, None),
                                       "score": (score, "order")})

    def needs_input(self) -> bool:
        return True

    def collections(self) -> list[str]:
        return [self.collection] + ([self.via.rpartition(":")[0]] if self.via else [])

    def check(self, ctx: Context) -> None:
        super().check(ctx)
        if self.via:
            name, _, doc = self.via.rpartition(":")
            if doc not in ctx.collection(name).stored:
                raise EngineError(f"expand(…): collection {name!r} stores no document {doc!r}")

    def _children(self, ctx: Context) -> dict[str, list[str]]:
        key = (self.collection, self.via, self.parent)
        if key not in ctx.state.children:
            col = ctx.collection(self.collection)
            if self.collection not in ctx.state.live_ids:
                ctx.state.live_ids[self.collection] = {col.ids[r] for r in col.live_rows()}
            known = ctx.state.live_ids[self.collection]
            if self.via:
                name, _, doc = self.via.rpartition(":")
                lists = ctx.collection(name).document(doc)
                ctx.state.children[key] = {str(p): [str(c) for c in kids if str(c) in known]
                                           for p, kids in lists.items()}
            else:
                out: dict[str, list[str]] = {}
                for it in col.items:
                    if it["id"] in known:  # rows a delete marked are no one's children
                        out.setdefault(str(it.get(self.parent, "")), []).append(it["id"])
                ctx.state.children[key] = out
        return ctx.state.children[key]

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        run = input_of(self, run, queries)
        children = self._children(ctx)
        out: Run = {}
        for q in queries:
            ids: list[str] = []
            scores: list[float] = []
            seen: set[str] = set()
            for parent, pscore in list(run[q.qid])[:self.top]:
                for child in children.get(parent, [])[:self.per_parent]:
                    if child not in seen:
                        seen.add(child)
                        ids.append(child)
                        scores.append(pscore if self.score == "parent" else float(-len(scores)))
                if self.limit is not None and len(ids) >= self.limit:
                    break
            out[q.qid] = Ranking(ids, scores)
        return out


class Similarity(Stage):
    """Each candidate (an item of `collection`) scored by the cosine of the query's text to its stored vector
    (the collection's own encoder: text→image for an image collection), fused with its incoming score:
    `weight` is the incoming score's share (weighted: min-max normalised scores; rrf: ranks)."""
    name = "similarity"

    def __init__(self, collection: str, weight: float = 0.5, fusion: str = "weighted", pooling: str = "mean") -> None:
        super().__init__()
        check_range("similarity", "weight", weight, SHARE)
        check_choice("similarity", "fusion", fusion, ("weighted", "rrf"))
        check_choice("similarity", "pooling", pooling, POOLINGS)
        self.collection, self.weight, self.fusion, self.pooling = collection, float(weight), fusion, pooling
        keep_args(self, [collection], {"weight": (weight, 0.5), "fusion": (fusion, "weighted"),
                                       "pooling": (pooling, "mean")})

    def needs_input(self) -> bool:
        return True

    def collections(self) -> list[str]:
        return [self.collection]

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        from engine.core.ranking.text_pooling import similarity
        run = input_of(self, run, queries)
        todo = [q for q in queries if q.text and len(run[q.qid])]
        out = {q.qid: (run[q.qid] if q.text else Ranking()) for q in queries}
        if not todo:
            return out
        col = ctx.collection(self.collection)
        row = ctx.positions(self.collection)
        emb = ctx.state.vectors.get(self.collection)
        if emb is None:
            emb = ctx.state.vectors[self.collection] = np.asarray(col.embeddings, dtype=np.float32)
        sv = _vectors(ctx, col, [q.text for q in todo], self.pooling)
        ws = (1.0 - self.weight, self.weight)
        for n, q in enumerate(todo):
            incoming = run[q.qid]
            cands = [d for d in incoming.ids if d in row]
            sims = similarity(sv, n, emb[[row[c] for c in cands]], self.pooling)
            image_rank = sorted(zip(cands, sims.tolist()), key=lambda kv: -kv[1])
            method = "rrf" if self.fusion == "rrf" else "combsum"
            fused = fusion.fuse([image_rank, incoming], method, ws)
            fields = dict(zip(cands, item_fields(col, col.items_at([row[c] for c in cands]))))
            out[q.qid] = Ranking.of(fused, {d: f for d, f in fields.items() if f})
        return out
