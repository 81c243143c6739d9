"""The HTTP service: FastAPI over the public Collection API, so a hit list is exactly `engine search`'s.

Every refusal is a 4xx whose body is `{"detail": "one line"}`; a request that runs past the timeout is a 503;
nothing a client sends produces a traceback, and the server goes on after each bad request.
"""
from __future__ import annotations

import asyncio
import functools
import io
import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from engine import __version__
from engine.core.collection import Hit
from engine.errors import EngineError
from engine.serve.batching import MicroBatcher
from engine.serve.body import BodyTimeout, json_body, left, on_disconnect, on_timeout, within
from engine.serve.catalog import Catalog, Served, UnknownCollection
from engine.serve.limits import BodyTooLarge, Guard, read_upload
from engine.serve.metrics import Metrics
from engine.serve.options import ServeOptions
from engine.serve.rerank import chosen_spec
from engine.serve.schema import openapi_schema
from engine.serve.vectors import check_vector, vector_search

STATIC = Path(__file__).parent / "static"
log = logging.getLogger("engine.serve")


class Query(BaseModel):
    """One query: exactly one of `text`, `id` (an item of the collection: "more like this") or `vector`."""
    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    id: str | None = None
    vector: list[StrictFloat] | None = None   # numbers only: true or "1" is refused, not read as 1.0


class Lexical(BaseModel):
    """Search mode and metadata filter, as `engine search --mode/--fusion/--where` takes them."""
    mode: str | None = Field(None, description="dense, bm25 or hybrid (default: hybrid where the collection "
                             "has BM25, dense otherwise)")
    fusion: str = Field("weighted", description="weighted or rrf")
    where: str | None = Field(None, description="metadata filter, e.g. year >= 2020 and split == \"a\"")

    def given(self, col) -> bool:
        from engine.core.ranking.hybrid import has_bm25
        return self.mode is not None or self.where is not None or self.fusion != "weighted" or has_bm25(col)


class SearchRequest(Query, Lexical):
    collection: str | None = Field(None, description="The collection to search (or give `pipeline`)")
    pipeline: str | None = Field(None, description="A pipeline the server serves (`engine serve --pipeline "
                                 "NAME=FILE`; GET /pipelines lists them), run on `text`")
    k: StrictInt = Field(10, description="Results wanted: 1 to the server's --max-k (1000 by default)")
    rerank: bool | str | None = Field(None, description="true: the server's reranker; or one it allows by spec")
    rerank_depth: StrictInt | None = Field(None, description="Candidates the reranker reorders (default: its depth)")


class BatchRequest(Lexical):
    model_config = ConfigDict(extra="forbid")
    collection: str | None = Field(None, description="The collection to search (or give `pipeline`)")
    pipeline: str | None = Field(None, description="A pipeline the server serves, run on every query")
    k: StrictInt = Field(10, description="Results wanted per query: 1 to the server's --max-k (1000 by default)")
    queries: list[Query] = Field(description="Each with one of text, id, vector")
    rerank: bool | str | None = Field(None, description="true: the server's reranker; or one it allows by spec "
                                      "(every query a text)")
    rerank_depth: StrictInt | None = Field(None, description="Candidates the reranker reorders (default: its depth)")


class HitOut(BaseModel):
    rank: int
    id: str
    score: float
    meta: dict[str, Any]
    thumb: str | None = None


class SearchResponse(BaseModel):
    collection: str
    hits: list[HitOut]
    took_ms: float


class BatchResponse(BaseModel):
    collection: str
    results: list[list[HitOut]]
    took_ms: float


def _refuse(status: int, message: str) -> HTTPException:
    return HTTPException(status_code=status, detail=message)


def _parse(model: type[BaseModel], payload: Any) -> Any:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        raise _refuse(422, f"{where}: {err.get('msg', 'invalid')}") from None


def create_app(options: ServeOptions | None = None) -> FastAPI:
    """The app over `options.root`; `engine serve` runs it with uvicorn, tests with a TestClient."""
    opts = (options or ServeOptions()).checked()
    metrics = Metrics()
    catalog = Catalog(opts.root, opts.collections)
    state: dict[str, Any] = {}

    async def lifespan(app: FastAPI):
        state["batcher"] = MicroBatcher(opts.batch_window_ms / 1000, opts.max_batch, metrics, opts.batch_workers,
                                        search=vector_search)
        for name in catalog.names():  # warm: the first query should not pay for loading
            try:
                await run_in_threadpool(catalog.get, name)
            except EngineError as exc:
                log.warning("%s", exc)
        metrics.collections.set(catalog.loaded())
        try:
            yield
        finally:
            state.pop("batcher").close()

    app = FastAPI(title="engine", version=__version__, lifespan=lifespan,
                  description="Search engine collections by text, image, item id or vector. Every error is "
                              "`{\"detail\": \"one line\"}`.")
    app.state.catalog, app.state.options, app.state.metrics = catalog, opts, metrics
    app.openapi = lambda: openapi_schema(app, (SearchRequest, BatchRequest), opts.max_k,  # type: ignore
                                         opts.max_query_chars)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(Guard, api_key=opts.api_key, max_json=opts.max_body_bytes,
                       max_multipart=opts.max_upload_bytes + (64 << 10), metrics=metrics)

    # ------------------------------------------------------------------ errors: one line, never a traceback
    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"detail": " ".join(str(message).split())}, status_code=status)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return error(exc.status_code, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "request"
        return error(422, f"{where}: {err.get('msg', 'invalid')}")

    @app.exception_handler(UnknownCollection)
    async def _unknown(_: Request, exc: UnknownCollection) -> JSONResponse:
        return error(404, str(exc))

    @app.exception_handler(EngineError)
    async def _engine(_: Request, exc: EngineError) -> JSONResponse:
        return error(422, str(exc))

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_: Request, exc: BodyTooLarge) -> JSONResponse:
        return error(413, str(exc))

    app.add_exception_handler(ClientDisconnect, on_disconnect)  # type: ignore[arg-type]
    app.add_exception_handler(BodyTimeout, on_timeout)  # type: ignore[arg-type]

    @app.exception_handler(asyncio.TimeoutError)
    async def _timeout(_: Request, exc: asyncio.TimeoutError) -> JSONResponse:
        return error(503, f"the query took longer than this server's timeout of {opts.timeout_s:g} s")

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return error(500, f"internal error ({type(exc).__name__}); the server goes on")

    # ------------------------------------------------------------------ helpers
    def served(name: str) -> Served:
        served = catalog.get(name)
        metrics.collections.set(catalog.loaded())
        return served

    def check_k(k: int) -> int:
        if not 1 <= k <= opts.max_k:
            raise _refuse(422, f"k must be between 1 and {opts.max_k} (got {k})")
        return k

    def thumb_url(s: Served, item_id: str) -> str | None:
        return f"/thumb/{quote(s.name, safe='')}/{quote(item_id, safe='')}" if item_id in s.files else None

    def hit_json(s: Served, h: Hit) -> dict:
        return {"rank": h.rank, "id": h.id, "score": h.score, "meta": h.meta, "thumb": thumb_url(s, h.id)}

    def require(s: Served, modality: str) -> None:
        """The core's own message when the collection's encoder cannot take this modality."""
        enc = s.col.encoder
        if modality not in enc.modalities:
            s.col.encode_queries(**{f"{modality}s": []})

    def by_vectors(s: Served, vectors: np.ndarray, k: int) -> list[list[Hit]]:
        t0 = time.perf_counter()
        out = vector_search(s.col, vectors, k)
        metrics.search.observe(time.perf_counter() - t0)
        return out

    def query_vector(s: Served, q: Query) -> np.ndarray:
        if q.id is not None:
            row = s.rows.get(q.id)
            if row is None:
                raise _refuse(404, f"no item {q.id!r} in collection {s.name!r}")
            return s.vector(row)
        with np.errstate(over="ignore"):
            vec = np.asarray(q.vector, dtype=np.float32)
        if vec.ndim != 1 or len(vec) != s.col.dim:
            raise _refuse(422, f"vector has {vec.size} values; collection {s.name!r} is {s.col.dim}-d")
        return check_vector(vec)

    def check_query(q: Query) -> None:
        given = [f for f in ("text", "id", "vector") if getattr(q, f) is not None]
        if len(given) != 1:
            raise _refuse(422, f"give exactly one of text, id, vector (got {', '.join(given) or 'none'})")
        if q.text is not None and not q.text.strip():
            raise _refuse(422, "text is empty")
        if q.text is not None and len(q.text) > opts.max_query_chars:
            raise _refuse(422, f"text is {len(q.text)} characters, over the limit of {opts.max_query_chars}")

    async def bounded(awaitable, deadline: float | None = None):
        """`awaitable` within what is left of the request's `timeout_s` (the body's reading counts)."""
        return await asyncio.wait_for(awaitable, opts.timeout_s if deadline is None else left(deadline))

    def deadline() -> float:
        return time.monotonic() + opts.timeout_s

    async def run_queries(s: Served, queries: list[Query], k: int) -> list[list[Hit]]:
        """Texts go through the micro-batcher; ids and vectors are searched together in one FAISS call."""
        for q in queries:
            check_query(q)
        if any(q.text is not None for q in queries):
            require(s, "text")
        texts = {n: state["batcher"].submit(s.col, q.text, k) for n, q in enumerate(queries) if q.text is not None}
        others = [n for n, q in enumerate(queries) if q.text is None]
        results: dict[int, list[Hit]] = {}
        if others:
            vectors = np.stack([query_vector(s, queries[n]) for n in others])
            for n, hits in zip(others, await run_in_threadpool(by_vectors, s, vectors, k)):
                results[n] = hits
        for n, future in texts.items():
            results[n] = await asyncio.wrap_future(future)
        return [results[n] for n in range(len(queries))]

    def staged(s: Served, queries: list[Query], k: int, how: "SearchRequest | BatchRequest") -> list[list[Hit]]:
        """Queries in a mode other than plain dense, filtered, or reranked: the pipeline every search door
        builds (`SearchSettings.stage`: retrieve >> rerank % k), run on them all at once. An id query is
        searched by its item's vector from this generation."""
        from engine.core.ranking.pipeline.query import Query as PipelineQuery
        from engine.core.ranking.search_settings import SearchSettings, run_search
        for n, q in enumerate(queries):
            check_query(q)
            if q.text is None and how.rerank not in (None, False):
                where = f"queries.{n}: " if isinstance(how, BatchRequest) else ""
                raise EngineError(f"{where}rerank reorders the hits of a text query; an id or vector query "
                                  "takes none")
        if any(q.text is not None for q in queries):
            require(s, "text")
        spec = chosen_spec(opts.rerank, how.rerank)
        settings = SearchSettings(k=k, mode=how.mode, fusion=how.fusion, where=how.where, rerank=spec,
                                  rerank_depth=how.rerank_depth if spec is not None else None)
        stage = settings.stage(s.col, all(q.text is not None for q in queries))
        asked = [PipelineQuery(str(n), q.text) if q.text is not None else
                 PipelineQuery(str(n), vector=tuple(query_vector(s, q).tolist())) for n, q in enumerate(queries)]
        return run_search(s.col, stage, asked)

    def plain(how: "SearchRequest | BatchRequest", col) -> bool:
        """Whether the queries go the micro-batched dense way: no reranker, no mode, no filter, no BM25."""
        return how.rerank in (None, False) and not how.given(col)

    async def image_search(request: Request, until: float) -> JSONResponse:
        t0 = time.perf_counter()
        form = await within(request.form(max_files=1, max_fields=8, max_part_size=64 << 10), until, opts.timeout_s)
        try:
            return await answer_form(form, t0, until)
        finally:
            await form.close()

    async def answer_form(form: Any, t0: float, until: float) -> JSONResponse:
        upload = form.get("image")
        name, pipe = form.get("collection"), form.get("pipeline")
        if isinstance(pipe, str) and pipe:  # a served pipeline, its first stage's collection encoding the image
            if name:
                raise _refuse(422, "give either collection or pipeline, not both")
            name = home_of(pipe)
        elif not isinstance(name, str) or not name:
            raise _refuse(422, "collection: a form field is required")
        if upload is None or isinstance(upload, str):
            raise _refuse(422, "image: upload a file in the form field 'image'")
        try:
            k = check_k(int(form.get("k") or 10))
        except ValueError:
            raise _refuse(422, f"k must be a whole number (got {form.get('k')!r})") from None
        s = await run_in_threadpool(served, name)
        require(s, "image")
        data = await upload.read(opts.max_upload_bytes + 1)

        def encode_and_search() -> list[dict]:
            from engine.core.images import stack
            img = read_upload(data, upload.filename or "image", opts.max_upload_bytes, opts.max_image_pixels)
            t1 = time.perf_counter()
            enc = s.col.image_query_encoder  # the image side `engine search --image` uses: the same scores
            vec = enc.encode_image_batch(stack([enc.preprocess(img)]))
            metrics.encode.labels("image").observe(time.perf_counter() - t1)
            if pipe:
                from engine.core.ranking.pipeline import Query as PipelineQuery
                return run_pipeline_query(pipe, PipelineQuery("q", vector=tuple(np.ravel(vec).tolist())), k)
            return [hit_json(s, h) for h in by_vectors(s, vec, k)[0]]

        hits = await bounded(run_in_threadpool(encode_and_search), until)
        return JSONResponse({"collection": pipe or s.name, "hits": hits,
                             "took_ms": round((time.perf_counter() - t0) * 1000, 3)})

    # ------------------------------------------------------------------ endpoints
    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/health", summary="200 while the server runs")
    async def health() -> dict:
        return {"status": "ok", "version": __version__, "loaded": catalog.loaded(), "auth": bool(opts.api_key),
                "rerankers": [spec.text for spec in opts.rerank]}

    def describe(s: Served) -> dict:
        col = s.col
        spec = col.manifest.get("encoder")
        info = {**{k: v for k, v in col.info().items() if k != "path"}, "generation": col.manifest.get("generation")}
        return {"name": s.name, "kind": col.kind, "count": len(col), "encoder": spec, "dim": col.dim,
                "queries": sorted(col.encoder.modalities) + ["id", "vector"] if spec else ["id", "vector"],
                "thumbnails": bool(s.files), "manifest": info}

    pipelines = dict(opts.pipelines)

    class Current(dict):
        """The collections of one pipeline request: a served name is the catalog's current generation (loaded
        whole when opened, so a commit deleting its files changes nothing for the request, and the next request
        sees the new one); other names (a task's `a/b`) are opened for the request by the pipeline itself."""

        def __contains__(self, name: object) -> bool:
            if not super().__contains__(name) and isinstance(name, str) and "/" not in name:
                try:
                    self[name] = catalog.get(name).col
                except EngineError:
                    return False
            return super().__contains__(name)

    @app.get("/pipelines", summary="The pipelines served: name, expression, the collection its first stage reads")
    async def list_pipelines() -> list[dict]:
        from engine.serve.pipelines import home_collection
        return [{"name": n, "pipeline": str(p), "collection": home_collection(p)} for n, p in pipelines.items()]

    def known_pipeline(name: str) -> None:
        if name not in pipelines:
            raise _refuse(404, f"no pipeline {name!r} is served"
                          + (f"; served: {', '.join(pipelines)}" if pipelines else
                             " (start the server with --pipeline NAME=FILE)"))

    def home_of(name: str) -> str:
        """The served collection a pipeline's first stage reads: what encodes an image query for it."""
        from engine.serve.pipelines import home_collection
        known_pipeline(name)
        home = home_collection(pipelines[name])
        if home is None or "/" in home or home not in catalog.names():
            raise _refuse(422, f"image: pipeline {name!r} starts with no collection this server serves, so no "
                               "encoder here can read an image for it; give text")
        return home

    def run_pipeline_query(name: str, query: Any, k: int, how: Lexical | None = None) -> list[dict]:
        return run_pipeline_queries(name, [query], k, how)[0]

    def run_pipeline_queries(name: str, queries: list, k: int, how: Lexical | None = None) -> list[list[dict]]:
        """The pipeline (its first stage shaped by the request's `where`, `mode`, `fusion`) on the queries, each
        ranking cut to k; each hit with the metadata and thumbnail of the collection it ranks."""
        from engine.core.ranking.pipeline import Context
        from engine.core.ranking.pipeline.run import run_pipeline
        from engine.serve.pipelines import home_collection, shaped
        stage = pipelines[name]
        if how is not None:
            stage = shaped(stage, where=how.where, mode=how.mode, fusion=how.fusion)
        home = home_collection(stage)
        s = served(home) if home is not None and "/" not in home and home in catalog.names() else None
        for query in queries:
            if query.item is not None and s is not None and query.item not in s.rows:
                raise _refuse(404, f"no item {query.item!r} in collection {s.name!r}")
        run = run_pipeline(stage, queries, Context(root=opts.root, opened=Current()))
        rankings = [run[q.qid].cut(k) for q in queries]
        rows = {d: s.rows[d] for r in rankings for d in r.ids if d in s.rows} if s is not None else {}
        items = dict(zip(rows, s.col.items_at(list(rows.values())))) if rows else {}
        return [[hit_json(s, Hit(d, sc, r, {f: v for f, v in items[d].items() if f != "id"}))
                 if d in items else {"rank": r, "id": d, "score": sc, "meta": {}, "thumb": None}
                 for r, (d, sc) in enumerate(ranking, 1)] for ranking in rankings]

    def pipeline_request(req: "SearchRequest | BatchRequest") -> None:
        """What a pipeline request may not carry: a collection besides, or a reranker (it has its own)."""
        if req.collection is not None:
            raise _refuse(422, "give either collection or pipeline, not both")
        known_pipeline(req.pipeline)
        for field in ("rerank", "rerank_depth"):
            if getattr(req, field) is not None:
                raise _refuse(422, f"{field}: a pipeline carries its own rerankers; leave it out (or serve a "
                                   "pipeline that reranks)")

    def pipeline_query(q: Query, qid: str) -> Any:
        """A request's text, id or vector query as the pipeline's `Query`."""
        from engine.core.ranking.pipeline import Query as PipelineQuery
        check_query(q)
        vector = check_vector(np.asarray(q.vector, dtype=np.float32)) if q.vector is not None else None
        return PipelineQuery(qid, q.text or "", item=q.id, vector=tuple(vector.tolist()) if vector is not None else None)

    async def pipeline_search(req: "SearchRequest", t0: float, until: float) -> dict:
        pipeline_request(req)
        query = pipeline_query(req, "q")
        k = check_k(req.k)
        hits = await bounded(run_in_threadpool(run_pipeline_query, req.pipeline, query, k, req), until)
        return {"collection": req.pipeline, "hits": hits, "took_ms": round((time.perf_counter() - t0) * 1000, 3)}

    @app.get("/collections", summary="Every served collection: name, kind, count, encoder, manifest")
    async def collections() -> list[dict]:
        out = []
        for name in catalog.names():
            try:
                out.append(describe(await run_in_threadpool(served, name)))
            except EngineError as exc:  # a damaged collection is listed with its problem, not a 500
                out.append({"name": name, "error": str(exc)})
        return out

    @app.get("/collections/{collection}", summary="One collection's description and manifest")
    async def collection(collection: str) -> dict:
        return describe(await run_in_threadpool(served, collection))

    @app.post("/search", response_model=SearchResponse, summary="Top-k for one text, item id, vector or image",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": SearchRequest.model_json_schema()},
                  "multipart/form-data": {"schema": {"type": "object", "required": ["collection", "image"],
                                                     "properties": {"collection": {"type": "string"},
                                                                    "pipeline": {"type": "string", "description":
                                                                                 "a served pipeline instead of "
                                                                                 "collection"},
                                                                    "k": {"type": "integer", "default": 10},
                                                                    "image": {"type": "string",
                                                                              "format": "binary"}}}}}}})
    async def search(request: Request):
        until = deadline()
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            return await image_search(request, until)
        t0 = time.perf_counter()
        req = _parse(SearchRequest, await json_body(request, until, opts.timeout_s))
        if req.pipeline is not None:
            return await pipeline_search(req, t0, until)
        if req.collection is None:
            raise _refuse(422, "collection: required (or give pipeline)")
        k = check_k(req.k)
        s = await run_in_threadpool(served, req.collection)
        chosen_spec(opts.rerank, req.rerank)  # refused before anything runs
        hits = (await bounded(run_queries(s, [req], k) if plain(req, s.col)
                              else run_in_threadpool(staged, s, [req], k, req), until))[0]
        return {"collection": s.name, "hits": [hit_json(s, h) for h in hits],
                "took_ms": round((time.perf_counter() - t0) * 1000, 3)}

    @app.post("/search/batch", response_model=BatchResponse, summary="Top-k for many queries, in order",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": BatchRequest.model_json_schema()}}}})
    async def search_batch(request: Request):
        t0, until = time.perf_counter(), deadline()
        req = _parse(BatchRequest, await json_body(request, until, opts.timeout_s))
        k = check_k(req.k)
        if not 1 <= len(req.queries) <= opts.max_batch_queries:
            raise _refuse(422, f"queries: give 1 to {opts.max_batch_queries} (got {len(req.queries)})")
        if req.pipeline is not None:
            pipeline_request(req)
            queries = [pipeline_query(q, str(n)) for n, q in enumerate(req.queries)]
            results = await bounded(run_in_threadpool(run_pipeline_queries, req.pipeline, queries, k, req), until)
            return {"collection": req.pipeline, "results": results,
                    "took_ms": round((time.perf_counter() - t0) * 1000, 3)}
        if req.collection is None:
            raise _refuse(422, "collection: required (or give pipeline)")
        s = await run_in_threadpool(served, req.collection)
        chosen_spec(opts.rerank, req.rerank)
        results = await bounded(run_queries(s, req.queries, k) if plain(req, s.col)
                                else run_in_threadpool(staged, s, req.queries, k, req), until)
        return {"collection": s.name, "results": [[hit_json(s, h) for h in hits] for hits in results],
                "took_ms": round((time.perf_counter() - t0) * 1000, 3)}

    @app.get("/items/{collection}/{item_id:path}", summary="An item's metadata")
    async def item(collection: str, item_id: str) -> dict:
        s = await run_in_threadpool(served, collection)
        row = s.rows.get(item_id)
        if row is None:
            raise _refuse(404, f"no item {item_id!r} in collection {s.name!r}")
        meta = {k: v for k, v in s.col.items[row].items() if k != "id"}
        return {"id": item_id, "row": row, "meta": meta, "thumb": thumb_url(s, item_id)}

    @app.get("/thumb/{collection}/{item_id:path}", summary="An image item, downscaled (JPEG)",
             response_class=Response, responses={200: {"content": {"image/jpeg": {}}}})
    async def thumb(collection: str, item_id: str, size: int | None = None) -> Response:
        size = opts.thumb_size if size is None else size   # size=0 is out of range, not the default
        if not 16 <= size <= 1024:
            raise _refuse(422, f"size must be between 16 and 1024 (got {size})")
        s = await run_in_threadpool(served, collection)
        if item_id not in s.rows:
            raise _refuse(404, f"no item {item_id!r} in collection {s.name!r}")
        path = s.files.get(item_id)  # only a file the build encoded; nothing from the request reaches the disk
        if path is None:
            why = "a text item" if s.col.kind == "text" else "an image the build did not record (rebuild the collection)"
            raise _refuse(404, f"item {item_id!r} of collection {s.name!r} has no thumbnail: {why}")
        data = await bounded(run_in_threadpool(_thumbnail, path, size))
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def prometheus() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        metrics.collections.set(catalog.loaded())
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)

    return app


@functools.lru_cache(maxsize=512)
def _thumbnail(path: str, size: int) -> bytes:
    from engine.core.images import ImageReadError, load_image
    try:
        img = load_image(path)
    except ImageReadError as exc:
        raise EngineError(f"the indexed image of this item can no longer be read: {exc}") from None
    img.thumbnail((size, size))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=85)
    return out.getvalue()

