"""/openapi.json true to what the server sends.

FastAPI's own description would document 422 details as arrays (the server sends one line), leave out the
4xx answers the handlers give, and embed the request models with `$defs` references that do not resolve
inside an OpenAPI document. Here the request models go into `components/schemas` (references rewritten),
and each operation lists the refusals it can answer, all of the shape `{"detail": "one line"}`.
"""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema


class Error(BaseModel):
    """Every refusal: one line saying what is wrong and, where there is one, the fix."""
    detail: str


ERRORS = {
    400: "Malformed JSON, a body that is not UTF-8, or a Content-Length that is not a number",
    401: "This server needs an API key (X-API-Key, Authorization: Bearer, or ?api_key=) and got none or "
         "another",
    404: "No such collection or item on this server",
    408: "The request body did not arrive within the server's timeout",
    413: "The request body is over the server's limit",
    415: "A body that is neither application/json nor multipart/form-data",
    422: "A request the server understood but refuses: a bound (k, text length, batch size, nesting depth, "
         "number length), a key twice, a lone surrogate, the wrong modality, a bad vector, a bad image",
    503: "The request took longer than the server's timeout",
}
BODY = (400, 408, 413, 415, 422, 503)
"""What an endpoint that reads a body can answer besides 401 and 404."""


def codes(path: str, method: str) -> list[int]:
    """The refusals an operation can answer."""
    out = [401]
    if "{collection}" in path or method == "post":
        out.append(404)
    if method == "post":
        out.extend(BODY)
    elif path.startswith("/thumb/"):
        out.extend((422, 503))
    return sorted(out)


def names_of(models: tuple[type[BaseModel], ...]) -> list[str]:
    return [m.__name__ for m in models]


def bound(schema: dict[str, Any], max_k: int, max_chars: int) -> None:
    """The server's own bounds on a request schema's `k`, `collection` and `text` (the models leave them to the
    handlers, whose messages name this server's limits)."""
    props = schema.get("properties", {})
    if "k" in props:
        props["k"].update(minimum=1, maximum=max_k)
    if "collection" in props:
        props["collection"]["minLength"] = 1
    text = props.get("text", {})
    for variant in text.get("anyOf", [text]):
        if variant.get("type") == "string":
            variant.update(minLength=1, maxLength=max_chars)


def openapi_schema(app: FastAPI, request_models: tuple[type[BaseModel], ...], max_k: int = 1000,
                   max_chars: int = 1000) -> dict[str, Any]:
    """The app's OpenAPI document with resolvable request schemas and every refusal documented (cached)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    _, defs = models_json_schema([(m, "validation") for m in (*request_models, Error)],
                                 ref_template="#/components/schemas/{model}")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    components.update(defs.get("$defs", {}))
    for name in (*names_of(request_models), "Query"):
        if name in components:
            bound(components[name], max_k, max_chars)
    names = set(names_of(request_models))
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body and body.get("schema", {}).get("title") in names:
                body["schema"] = {"$ref": f"#/components/schemas/{body['schema']['title']}"}
            for content in op.get("requestBody", {}).get("content", {}).values():
                bound(content.get("schema", {}), max_k, max_chars)
            responses = op.setdefault("responses", {})
            for code in {*codes(path, method), *(c for c in (422,) if str(c) in responses)}:
                responses[str(code)] = {"description": ERRORS[code], "content": error}
    app.openapi_schema = schema
    return schema
