"""Reading a request's body: JSON only when it says so, parsed by the same strict reader as files, and never
waited for past the request's deadline.

`engine.io.jsonio.parse_json` bounds nesting and number length, refuses a key twice in one object, NaN and
lone surrogates; here its refusals become 422 (valid JSON we will not take) and a syntax error 400. A client
that announces more bytes than it sends is answered 408 at the deadline; one that hangs up mid-body is logged
in one line. Neither leaves a traceback in the log.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from engine.errors import EngineError
from engine.io.jsonio import InvalidJSON, parse_json

log = logging.getLogger("engine.serve")
JSON_TYPE = "application/json"


class BodyTimeout(Exception):
    """The client did not send its whole body before the request's deadline (408)."""

    def __init__(self, timeout_s: float):
        super().__init__(f"the request body did not arrive within this server's timeout of {timeout_s:g} s")


def media_type(request: Request) -> str:
    """The Content-Type without its parameters, lower-case ("" when absent)."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def left(deadline: float) -> float:
    """Seconds until `deadline` (a `time.monotonic()` value); never negative."""
    return max(0.0, deadline - time.monotonic())


async def within(awaitable: Any, deadline: float, timeout_s: float) -> Any:
    """`awaitable` bounded by the request's deadline; a body still arriving then is the client's fault (408)."""
    try:
        return await asyncio.wait_for(awaitable, left(deadline))
    except asyncio.TimeoutError:
        raise BodyTimeout(timeout_s) from None


async def json_body(request: Request, deadline: float, timeout_s: float) -> Any:
    """The body as JSON: 415 unless Content-Type is application/json, 400 if it is not JSON, 422 if it is
    JSON the strict reader refuses (too deep, a number too long, a key twice, a lone surrogate, NaN)."""
    ctype = media_type(request)
    if ctype != JSON_TYPE:
        got = f"got {request.headers.get('content-type')!r}" if ctype else "got no Content-Type"
        raise HTTPException(415, f"send JSON with Content-Type: application/json (or, for an image, "
                                 f"multipart/form-data); {got}")
    body = await within(request.body(), deadline, timeout_s)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(400, f"malformed JSON: the body is not UTF-8 (byte {exc.start})") from None
    try:
        return parse_json(text, "request body")
    except InvalidJSON as exc:
        raise HTTPException(400, f"malformed JSON: {exc}") from None
    except EngineError as exc:
        raise HTTPException(422, str(exc)) from None


def client_of(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "a client"


async def on_disconnect(request: Request, _: ClientDisconnect) -> Response:
    """A client that hung up before sending its whole body: one log line, no traceback, nothing to answer."""
    log.warning("%s hung up before sending its whole request body (%s %s); dropped", client_of(request),
             request.method, request.url.path)
    return Response(status_code=400)


async def on_timeout(request: Request, exc: BodyTimeout) -> JSONResponse:
    """A body still arriving at the deadline: one log line, 408, and the connection is closed."""
    log.warning("%s did not send its request body in time (%s %s); dropped", client_of(request), request.method,
             request.url.path)
    return JSONResponse({"detail": str(exc)}, status_code=408, headers={"Connection": "close"})
