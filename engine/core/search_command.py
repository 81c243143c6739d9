"""`engine search` once its options are parsed: no typer here, so a plain query's start-up (`engine.cached_args`)
reaches the collection without assembling the command line's app."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from engine.core.rerankers.options import RerankOptions
from engine.core.store.stored import DEFAULT_ROOT
from engine.errors import EngineError, opt
from engine.io.jsonio import print_json
from engine.progress import set_quiet

if TYPE_CHECKING:
    from engine.core.collection import Collection


def search(name: str, text: Optional[str] = None, image: Optional[Path] = None, k: int = 10, as_json: bool = False,
           queries: Optional[Path] = None, out: Optional[Path] = None, run_id: Optional[str] = None,
           batch_size: str = "64", device: str = "auto", nprobe: Optional[int] = None, ef: Optional[int] = None,
           k_factor: Optional[float] = None, server: Optional[str] = None, rerank: Optional[str] = None,
           rerank_depth: Optional[int] = None, rerank_template: Optional[str] = None,
           rerank_instruction: Optional[str] = None, rerank_rounds: Optional[int] = None, api_key: Optional[str] = None, ray: Optional[str] = None,
           mode: Optional[str] = None, fusion: str = "weighted", where: Optional[str] = None,
           root: Path = DEFAULT_ROOT, quiet: bool = False) -> None:
    """What `engine search` does with its parsed options (engine.core.cli declares them; engine.cached_args
    parses a plain query line without typer): one text, one image, or a queries file into a TREC run."""
    set_quiet(quiet)
    from engine.core.collection import check_query
    from engine.core.encoders.device import check_batch_size, set_device
    from engine.core.index.faiss_index import SearchKnobs
    check_query(text, k)  # every argument checked before a model loads
    from engine.core.hybrid import check_mode
    check_mode(mode, fusion)
    if where is not None:
        from engine.core.filters import parse_where
        parse_where(where)
    lexical = {"mode": mode, "fusion": fusion, "where": where}
    knobs = SearchKnobs(nprobe=nprobe, ef=ef, k_factor=k_factor)
    set_device(device)
    batch = check_batch_size(batch_size)
    args = (name, text, image, k, as_json, queries, out, run_id, 64 if batch == "auto" else int(batch), knobs,
            server, api_key, root, lexical, RerankOptions.checked(rerank, rerank_depth, k, template=rerank_template,
                                                                    instruction=rerank_instruction,
                                                                    rounds=rerank_rounds))
    if ray is None:
        return _search(*args, ray=None)
    if server is not None:
        raise EngineError(f"{opt('ray')} searches the shards from here; leave out {opt('server')}")
    from engine.core.cluster import ray_session
    with ray_session(ray):
        _search(*args, ray=ray)


def _search(name: str, text: Optional[str], image: Optional[Path], k: int, as_json: bool, queries: Optional[Path],
            out: Optional[Path], run_id: Optional[str], batch_size: int, knobs, server: Optional[str],
            api_key: Optional[str], root: Path, lexical: dict, rr: RerankOptions, ray: Optional[str]) -> None:
    from engine.core.collection import Collection
    from engine.progress import info

    def opened() -> Collection:
        col = Collection.open(name, root)
        if ray is not None:
            from engine.core.index.shards import search_on_ray
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
        trec_safe_ids([run_id or name], "strict", opt("run_id"), fixable=False)
        col = opened()
        col.check_search(k, knobs)
        col.check_rerank(rr.spec, rr.depth, k, True, dict(rr.options))
        n = col.search_to_run(qs, out, k=k, run_id=run_id, batch_size=batch_size, knobs=knobs, **lexical,
                              **rr.kwargs())
        info(f"wrote {n} lines for {len(qs)} queries to {out}")
        return
    if out is not None:
        raise EngineError(f"{opt('out')} goes with {opt('queries')} FILE")
    if (text is None) == (image is None):
        raise EngineError(f"give a text query or {opt('image')} PATH (or {opt('queries')} FILE {opt('out')} RUN)")
    if server is not None:
        from engine.core.remote import remote_search
        hits = remote_search(server, name, text=text, image=image, k=k, api_key=api_key, **rr.remote(),
                             **{key: v for key, v in lexical.items() if key != "fusion" or v != "weighted"})
    else:
        hits = opened().search(text=text, image=str(image) if image else None, k=k, knobs=knobs, **lexical,
                               **rr.kwargs())
    if as_json:
        print_json({"query": text if text is not None else str(image), "hits": [h.as_dict() for h in hits]})
    else:
        from rich.console import Console
        from engine.display import hits_table
        Console().print(hits_table(hits, title=f"{name}: {text if text is not None else image}"))
