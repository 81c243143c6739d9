"""`engine search` once its options are parsed and checked (`engine.commands.collection.SearchOptions`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.core.ranking.rerankers.options import RerankOptions
from engine.errors import EngineError, opt
from engine.io.jsonio import print_json
from engine.progress import set_quiet

if TYPE_CHECKING:
    from engine.core.collection import Collection
    from engine.core.storage.index.faiss_index import SearchKnobs


def search(o) -> None:
    """What `engine search` does with its options (`engine.commands.collection.SearchOptions`, checked against their ranges
    already): one text, one image, or a queries file into a TREC run."""
    set_quiet(o.quiet)
    from engine.core.collection import check_query
    from engine.core.encoders.device import check_batch_size, set_device
    from engine.core.storage.index.faiss_index import SearchKnobs
    check_query(o.text, o.k)  # every argument checked before a model loads
    from engine.core.ranking.hybrid import check_mode
    check_mode(o.mode, o.fusion)
    if o.where is not None:
        from engine.core.ranking.filters import parse_where
        parse_where(o.where)
    set_device(o.device)
    batch = check_batch_size(o.batch_size)
    rerank = RerankOptions.checked(o.rerank, o.rerank_depth, o.k, template=o.rerank_template,
                                   instruction=o.rerank_instruction, rounds=o.rerank_rounds,
                                   batch_tokens=o.rerank_batch_tokens)
    plan = Plan(o, SearchKnobs(nprobe=o.nprobe, ef=o.ef, k_factor=o.k_factor), rerank,
                64 if batch == "auto" else int(batch))
    if o.ray is None:
        return _search(plan)
    if o.server is not None:
        raise EngineError(f"{opt('ray')} searches the shards from here; leave out {opt('server')}")
    from engine.core.cluster import ray_session
    with ray_session(o.ray):
        _search(plan)


@dataclass(frozen=True)
class Plan:
    """A search's options with what checking them made: the index knobs, the reranker, the batch size."""
    options: Any  # engine.commands.collection.SearchOptions
    knobs: "SearchKnobs"
    rerank: RerankOptions
    batch_size: int

    @property
    def lexical(self) -> dict:
        return {"mode": self.options.mode, "fusion": self.options.fusion, "where": self.options.where}


def _search(plan: Plan) -> None:
    o, knobs, rr, lexical = plan.options, plan.knobs, plan.rerank, plan.lexical
    name, text, image, k, queries, out, server, ray = o.name, o.text, o.image, o.k, o.queries, o.out, o.server, o.ray
    from engine.core.collection import Collection
    from engine.progress import info

    def opened() -> Collection:
        col = Collection.open(name, o.root)
        if ray is not None:
            from engine.core.storage.index.shards import search_on_ray
            search_on_ray(col)
        return col

    if queries is not None:
        if server is not None:
            raise EngineError(f"{opt('queries')} runs here; leave out {opt('server')} (or POST /search/batch to it)")
        if out is None or text is not None or image is not None:
            raise EngineError(f"{opt('queries')} takes {opt('out')} RUN and no text or {opt('image')} query")
        from engine.io.ids import trec_safe_ids
        from engine.io.tables import read_queries
        qs = read_queries(queries)
        trec_safe_ids([q for q, _ in qs], "strict", queries, fixable=False)
        trec_safe_ids([o.run_id or name], "strict", opt("run_id"), fixable=False)
        col = opened()
        col.check_search(k, knobs)
        col.check_rerank(rr.spec, rr.depth, k, True, dict(rr.options))
        n = col.search_to_run(qs, out, k=k, run_id=o.run_id, batch_size=plan.batch_size, knobs=knobs, **lexical,
                              **rr.kwargs())
        info(f"wrote {n} lines for {len(qs)} queries to {out}")
        return
    if out is not None:
        raise EngineError(f"{opt('out')} goes with {opt('queries')} FILE")
    if (text is None) == (image is None):
        raise EngineError(f"give a text query or {opt('image')} PATH (or {opt('queries')} FILE {opt('out')} RUN)")
    if server is not None:
        from engine.core.remote import remote_search
        hits = remote_search(server, name, text=text, image=image, k=k, api_key=o.api_key, **rr.remote(),
                             **{key: v for key, v in lexical.items() if key != "fusion" or v != "weighted"})
    else:
        hits = opened().search(text=text, image=str(image) if image else None, k=k, knobs=knobs, **lexical,
                               **rr.kwargs())
    if o.as_json:
        print_json({"query": text if text is not None else str(image), "hits": [h.as_dict() for h in hits]})
    else:
        from rich.console import Console
        from engine.display import hits_table
        Console().print(hits_table(hits, title=f"{name}: {text if text is not None else image}"))
