"""`engine search` once its options are parsed and checked (`engine.commands.collection.SearchOptions`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError, opt
from engine.io.jsonio import print_json
from engine.progress import set_quiet

if TYPE_CHECKING:
    from engine.core.collection import Collection
    from engine.core.ranking.rerankers.spec import RerankerSpec
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
    plan = Plan(o, SearchKnobs(nprobe=o.nprobe, ef=o.ef, k_factor=o.k_factor), reranker(o),
                64 if batch == "auto" else int(batch))
    if o.ray is None:
        return _search(plan)
    if o.server is not None:
        raise EngineError(f"{opt('ray')} searches the shards from here; leave out {opt('server')}")
    from engine.core.cluster import ray_session
    with ray_session(o.ray):
        _search(plan)


def reranker(o) -> "RerankerSpec | None":
    """`--rerank SPEC` and its options parsed once, here at the edge (`RerankerSpec`), and `--rerank-depth`
    checked against -k (`SearchSettings.parsed`); everything below takes the parsed spec."""
    from engine.core.ranking.search_settings import SearchSettings
    options = {"template": o.rerank_template, "instruction": o.rerank_instruction, "rounds": o.rerank_rounds,
               "batch_tokens": o.rerank_batch_tokens, "dtype": o.rerank_dtype}
    return SearchSettings(k=o.k, rerank=o.rerank, rerank_depth=o.rerank_depth, rerank_options=options).parsed().rerank


@dataclass(frozen=True)
class Plan:
    """A search's options with what checking them made: the index knobs, the reranker, the batch size."""
    options: Any  # engine.commands.collection.SearchOptions
    knobs: "SearchKnobs"
    rerank: "RerankerSpec | None"
    batch_size: int

    @property
    def settings(self) -> dict:
        """The `SearchSettings` of the local search (`engine.core.ranking.search_settings`)."""
        o = self.options
        return {"k": o.k, "knobs": self.knobs, "mode": o.mode, "fusion": o.fusion, "where": o.where,
                "rerank": self.rerank, "rerank_depth": o.rerank_depth if self.rerank else None}

    def remote(self) -> dict:
        """What the service client sends: a server reranks with a spec it allows, as it was started."""
        o, spec = self.options, self.rerank
        if spec is not None and spec.options:
            raise EngineError(f"{opt('rerank_' + spec.options[0][0])} shapes a reranker loaded here; a "
                              f"{opt('server')} reranks with the reranker it allows, as it was started")
        lexical = {"mode": o.mode, "where": o.where, **({"fusion": o.fusion} if o.fusion != "weighted" else {})}
        staged = {"rerank": o.rerank.strip(), "rerank_depth": o.rerank_depth} if spec is not None else {}
        return {"k": o.k, **lexical, **staged}


def _search(plan: Plan) -> None:
    o = plan.options
    name, text, image, queries, out, server, ray = o.name, o.text, o.image, o.queries, o.out, o.server, o.ray
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
        n = opened().search_to_run(qs, out, run_id=o.run_id, batch_size=plan.batch_size, **plan.settings)
        info(f"wrote {n} lines for {len(qs)} queries to {out}")
        return
    if out is not None:
        raise EngineError(f"{opt('out')} goes with {opt('queries')} FILE")
    if (text is None) == (image is None):
        raise EngineError(f"give a text query or {opt('image')} PATH (or {opt('queries')} FILE {opt('out')} RUN)")
    if server is not None:
        from engine.core.remote import remote_search
        hits = remote_search(server, name, text=text, image=image, api_key=o.api_key, **plan.remote())
    else:
        hits = opened().search(text=text, image=str(image) if image else None, **plan.settings)
    if o.as_json:
        print_json({"query": text if text is not None else str(image), "hits": [h.as_dict() for h in hits]})
    else:
        from rich.console import Console
        from engine.display import hits_table
        Console().print(hits_table(hits, title=f"{name}: {text if text is not None else image}"))
