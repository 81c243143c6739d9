"""The client side of `engine search --server URL`: the standard library only, so it needs no extra. It sits in
the core, below the service it talks to, which reads the API key from the same variable."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.core.collection import Hit
from engine.errors import EngineError

API_KEY_ENV = "ENGINE_API_KEY"
"""Environment variable that holds the API key when it is not given on the command line."""


def remote_search(url: str, collection: str, text: str | None = None, image: str | Path | None = None,
                  api_key: str | None = None, timeout: float = 60.0, **options: Any) -> list[Hit]:
    """The hits a running `engine serve` returns for one text or image query, as `Collection.search` would;
    `options`: k (10), and for a text query rerank, rerank_depth, mode, fusion, where (as given)."""
    from urllib.error import HTTPError, URLError  # here, not at the top: `engine search` imports this module
    from urllib.request import Request, urlopen   # for API_KEY_ENV, and a local query needs no sockets
    k = options.pop("k", 10)
    rerank, rerank_depth = options.pop("rerank", None), options.pop("rerank_depth", None)
    endpoint = url.rstrip("/") + "/search"
    headers = {"X-API-Key": api_key} if api_key else {}
    if image is not None:
        path = Path(image)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise EngineError(f"query image {path}: {exc.strerror or exc}") from None
        body, ctype = _multipart({"collection": collection, "k": str(k)}, "image", path.name, data)
    else:
        extra = {key: v for key, v in options.items() if v is not None}
        staged = {"rerank": rerank, **({"rerank_depth": rerank_depth} if rerank_depth else {})} if rerank else {}
        body = json.dumps({"collection": collection, "text": text, "k": k, **extra, **staged}).encode()
        ctype = "application/json"
    request = Request(endpoint, data=body, headers={**headers, "Content-Type": ctype}, method="POST")
    try:
        with urlopen(request, timeout=timeout) as response:
            payload = json.loads(response.read())
    except HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail", exc.reason)
        except (ValueError, AttributeError):
            detail = exc.reason
        raise EngineError(f"server {url} answered {exc.code}: {detail}") from None
    except (URLError, OSError) as exc:
        raise EngineError(f"cannot reach server {url}: {getattr(exc, 'reason', exc)}") from None
    except ValueError:
        raise EngineError(f"server {url} did not answer with JSON (is it `engine serve`?)") from None
    return [Hit(h["id"], float(h["score"]), int(h["rank"]), h.get("meta") or {}) for h in payload["hits"]]


def _multipart(fields: dict[str, str], file_field: str, filename: str, data: bytes) -> tuple[bytes, str]:
    import mimetypes
    import uuid
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
             for name, value in fields.items()]
    ctype = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    safe = filename.replace('"', "_")
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{safe}"\r\n'
                 f"Content-Type: {ctype}\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"
