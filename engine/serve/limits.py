"""What a request may send: the body-size limit and API-key check (one ASGI layer, before any parsing), the
per-endpoint request metrics, and the checks on an uploaded image before it is decoded."""
from __future__ import annotations

import hmac
import io
import json
import time
from collections.abc import Callable
from typing import Any

from engine.errors import EngineError
from engine.serve.metrics import Metrics

OPEN_PATHS = ("/", "/favicon.ico", "/docs", "/docs/oauth2-redirect", "/openapi.json")
"""Paths served without the API key: the page, its static files and the API's schema hold no data."""


class BodyTooLarge(Exception):
    def __init__(self, limit: int):
        super().__init__(f"request body is over the limit of {limit} bytes")


def one_line(status: int, message: str) -> tuple[dict, bytes]:
    body = json.dumps({"detail": " ".join(str(message).split())}).encode()
    return {"type": "http.response.start", "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}, body


class Guard:
    """ASGI middleware: API key, Content-Length against the limit (a body streamed without one is counted as it
    arrives and refused the moment it passes the limit), and a count and latency per endpoint template."""

    def __init__(self, app: Callable, *, api_key: str | None, max_json: int, max_multipart: int, metrics: Metrics):
        self.app, self.api_key, self.metrics = app, api_key, metrics
        self.max_json, self.max_multipart = max_json, max_multipart

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = {"code": 500}

        async def send_tracked(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                start, body = one_line(*refusal)
                await send_tracked(start)
                await send({"type": "http.response.body", "body": body})
                return
            limit = self._limit(scope)
            seen = 0

            async def receive_limited() -> dict:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > limit:
                        raise BodyTooLarge(limit)
                return message

            await self.app(scope, receive_limited, send_tracked)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or ("/static" if scope["path"].startswith("/static/") else "other")
            self.metrics.requests.labels(endpoint, str(status["code"])).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)

    def _limit(self, scope: dict) -> int:
        ctype = _header(scope, b"content-type")
        return self.max_multipart if ctype.startswith("multipart/") else self.max_json

    def _refusal(self, scope: dict) -> tuple[int, str] | None:
        path = scope["path"]
        if self.api_key and path not in OPEN_PATHS and not path.startswith("/static/"):
            given = _header(scope, b"x-api-key") or _bearer(_header(scope, b"authorization")) or _query_key(scope)
            if not given or not hmac.compare_digest(given.encode(), self.api_key.encode()):
                return 401, "this server needs an API key: send the header X-API-Key (or Authorization: Bearer KEY)"
        length = _header(scope, b"content-length")
        if length:
            limit = self._limit(scope)
            if not length.isdigit():
                return 400, f"Content-Length {length!r} is not a number"
            if int(length) > limit:
                return 413, f"request body of {int(length)} bytes is over the limit of {limit} bytes"
        return None


def _header(scope: dict, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1").strip()
    return ""


def _bearer(value: str) -> str:
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _query_key(scope: dict) -> str:
    from urllib.parse import parse_qs
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("api_key")
    return values[0] if values else ""


def read_upload(data: bytes, name: str, max_bytes: int, max_pixels: int) -> Any:
    """An uploaded image as RGB, read the way `engine search --image` reads a file; its size is checked
    from the header before a pixel is decoded, so a decompression bomb costs nothing."""
    from PIL import Image, UnidentifiedImageError

    from engine.core.images import ImageReadError, load_image
    if not data:
        raise EngineError(f"upload {name!r} is empty")
    if len(data) > max_bytes:
        raise EngineError(f"upload {name!r} is {len(data)} bytes, over the limit of {max_bytes}")
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise EngineError(f"upload {name!r} is not an image (unrecognised format)") from None
    except Image.DecompressionBombError:
        width, height = max_pixels + 1, 1
    if width * height > max_pixels:
        raise EngineError(f"upload {name!r} has {width}×{height} pixels, over the limit of {max_pixels}")
    try:
        return load_image(io.BytesIO(data))
    except ImageReadError as exc:
        raise EngineError(f"upload {name!r}: {exc}") from None
