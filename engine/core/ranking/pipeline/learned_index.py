"""What the first stages over a model's own stored index share (the learned sparse index, the multi-vector
store): the index loaded once per context and checked against the collection's rows, the query model's files
in the cache key, and each query's top k made a ranking with the items' fields. A subclass says how to
search: its `role`, how to `load` the index, and `search`."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable, Sequence

import numpy as np

from engine.core.ranking.pipeline.query import Query
from engine.core.ranking.pipeline.stage import Context, Run, Stage, check_range
from engine.core.ranking.rerankers.candidates import item_fields
from engine.errors import EngineError
from engine.io.options import K
from engine.io.ranking import Ranking


class LearnedIndexStage(Stage):
    """Top k of a collection's stored learned index for each query's text (a first stage)."""
    role: str = ""
    load: Callable[..., Any]
    build_flag: str = ""
    """How to build the index, for the refusal when a collection lacks it (`--sparse sparse:NAME_OR_DIR`)."""

    def __init__(self, collection: str, k: int) -> None:
        super().__init__()
        if not isinstance(collection, str) or not collection.strip():
            raise EngineError(f"{self.name}(…) needs a collection name first, e.g. {self.name}(\"docs\")")
        check_range(self.name, "k", k, K)
        self.collection, self.k = collection, int(k)

    def collections(self) -> list[str]:
        return [self.collection]

    def _index(self, ctx: Context) -> Any:
        return ctx.stored_index(self.collection, self.role, type(self).load, f'{self.name}("{self.collection}")',
                                self.build_flag)

    def check(self, ctx: Context) -> None:
        super().check(ctx)
        self._index(ctx)

    def fingerprint(self, ctx: Context) -> str:
        """The query model's files: a replaced model is never served from the cache (the documents' side is
        the collection's generation)."""
        from engine.core.ranking.rerankers.fingerprint import spec_files
        return spec_files(str(self._index(ctx).meta.get("spec", "")))

    def search(self, index: Any, texts: list[str], live: np.ndarray | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(rows, scores) of each text's top k, best first."""
        raise NotImplementedError

    def transform(self, queries: Sequence[Query], run: Run | None, ctx: Context) -> Run:
        col = ctx.collection(self.collection)
        index = self._index(ctx)
        out: Run = {q.qid: Ranking() for q in queries}
        asked = [q for q in queries if q.text.strip()]
        if not asked:
            return out
        for q, (rows, scores) in zip(asked, self.search(index, [q.text for q in asked], col.live_mask())):
            hits = col.hits(scores[None, :], rows[None, :])[0]
            items = [{"id": h.id, **h.meta} for h in hits]
            out[q.qid] = Ranking([h.id for h in hits], [h.score for h in hits],
                                 dict(zip([h.id for h in hits], item_fields(col, items))))
        return out
