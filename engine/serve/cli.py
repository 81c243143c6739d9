"""The `serve` command. Parsing only: defaults come from `ServeOptions`, the work from `engine.serve.app`."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.serve.options import API_KEY_ENV, ServeOptions, upload_bytes

DEFAULTS = ServeOptions()


def serve_cmd(
    root: Annotated[Path, typer.Option("--root", envvar="ENGINE_ROOT", help="Folder that holds collections.")]
    = DEFAULTS.root,
    collections: Annotated[str | None, typer.Option("--collections", help="Comma-separated collections to serve "
                           "(default: every collection under --root, new ones included).")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on; anything but loopback needs "
                    "--api-key.")] = DEFAULTS.host,
    port: Annotated[int, typer.Option("--port", help="Port to listen on (1–65535).")] = DEFAULTS.port,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar=API_KEY_ENV, show_envvar=True,
                       help="Key every request must carry (X-API-Key or Authorization: Bearer).")] = None,
    max_k: Annotated[int, typer.Option("--max-k", help="Most results per query (1–100000).")] = DEFAULTS.max_k,
    max_upload_mb: Annotated[float, typer.Option("--max-upload-mb", help="Largest uploaded image, MiB (up to 1024).")]
    = DEFAULTS.max_upload_bytes / 2**20,
    max_image_pixels: Annotated[int, typer.Option("--max-image-pixels", help="Largest uploaded image, width × "
                                "height (1–1e9).")] = DEFAULTS.max_image_pixels,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds a request may take, its body's arrival included (over 0, up to 3600; then 503, or 408 for a body still arriving).")]
    = DEFAULTS.timeout_s,
    batch_window_ms: Annotated[float, typer.Option("--batch-window-ms", help="How long a text query waits for "
                               "others to be encoded with it (0–1000).")] = DEFAULTS.batch_window_ms,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Most text queries encoded together (1–1024).")]
    = DEFAULTS.max_batch,
    batch_workers: Annotated[int, typer.Option("--batch-workers", help="Text batches encoded and searched at once, "
                             "each on its own thread (1–64).")] = DEFAULTS.batch_workers,
    rerank: Annotated[list[str] | None, typer.Option("--rerank", help="A reranker spec requests may ask for "
                      "(\"rerank\": true takes the first; repeat to allow more), e.g. cross:/models/minilm-ce.")]
    = None,
    pipeline: Annotated[list[str] | None, typer.Option("--pipeline", help="NAME=FILE: serve a pipeline file; "
                        "POST /search {\"pipeline\": NAME, \"text\": …} runs it (repeatable).")] = None,
) -> None:
    """Serve collections over HTTP: JSON search API (docs at /docs), Prometheus /metrics and a web page at /."""
    from engine.io.options import split_list
    from engine.serve.server import serve
    names = split_list(collections)
    serve(ServeOptions(root=root, collections=tuple(names) if names else None, host=host, port=port,
                       api_key=api_key, max_k=max_k, max_upload_bytes=upload_bytes(max_upload_mb),
                       max_image_pixels=max_image_pixels, timeout_s=timeout_s, batch_window_ms=batch_window_ms,
                       max_batch=max_batch, batch_workers=batch_workers, rerank=tuple(rerank or ()),
                       pipelines=served_pipelines(pipeline or [])))


def served_pipelines(specs: list[str]) -> tuple:
    """NAME=FILE pairs parsed before the server starts: a bad file is one line, not a failing request later."""
    from engine.core.pipeline.parse import read_pipeline_file
    from engine.errors import EngineError
    out: dict = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise EngineError(f"--pipeline takes NAME=FILE, not {spec!r}")
        if name in out:
            raise EngineError(f"--pipeline {name!r} is given twice")
        out[name.strip()] = read_pipeline_file(path.strip())
    return tuple(out.items())


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
