"""The `serve` command. Parsing only: defaults come from `ServeOptions`, the work from `engine.serve.app`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from engine.serve.options import API_KEY_ENV, ServeOptions, upload_bytes
from engine.io.options import cli, options_command, split_list

DEFAULTS = ServeOptions()


@dataclass(frozen=True)
class ServeCommandOptions:
    """What `engine serve` is told, each option declared once (engine.io.options.options_command)."""
    root: Annotated[Path, cli(typer.Option("--root", envvar="ENGINE_ROOT", help="Folder that holds collections."))] \
        = DEFAULTS.root
    collections: Annotated[str | None, cli(typer.Option("--collections", help="Comma-separated collections to serve "
                           "(default: every collection under --root, new ones included)."))] = None
    host: Annotated[str, cli(typer.Option("--host", help="Address to listen on; anything but loopback needs "
                    "--api-key."))] = DEFAULTS.host
    port: Annotated[int, cli(typer.Option("--port", help="Port to listen on (1–65535)."))] = DEFAULTS.port
    api_key: Annotated[str | None, cli(typer.Option("--api-key", envvar=API_KEY_ENV, show_envvar=True,
                       help="Key every request must carry (X-API-Key or Authorization: Bearer)."))] = None
    max_k: Annotated[int, cli(typer.Option("--max-k", help="Most results per query (1–100000)."))] = DEFAULTS.max_k
    max_upload_mb: Annotated[float, cli(typer.Option("--max-upload-mb", help="Largest uploaded image, MiB (up to "
                             "1024)."))] \
        = DEFAULTS.max_upload_bytes / 2**20
    max_image_pixels: Annotated[int, cli(typer.Option("--max-image-pixels", help="Largest uploaded image, width × "
                                "height (1–1e9)."))] = DEFAULTS.max_image_pixels
    timeout_s: Annotated[float, cli(typer.Option("--timeout", help="Seconds a request may take, its body's arrival "
                         "included (over 0, up to 3600; then 503, or 408 for a body still arriving)."))] \
        = DEFAULTS.timeout_s
    batch_window_ms: Annotated[float, cli(typer.Option("--batch-window-ms", help="How long a text query waits for "
                               "others to be encoded with it (0–1000)."))] = DEFAULTS.batch_window_ms
    max_batch: Annotated[int, cli(typer.Option("--max-batch", help="Most text queries encoded together (1–1024)."))] \
        = DEFAULTS.max_batch
    batch_workers: Annotated[int, cli(typer.Option("--batch-workers", help="Text batches encoded and searched at once, "
                             "each on its own thread (1–64)."))] = DEFAULTS.batch_workers
    rerank: Annotated[list[str] | None, cli(typer.Option("--rerank", help="A reranker spec requests may ask for "
                      "(\"rerank\": true takes the first; repeat to allow more), e.g. cross:/models/minilm-ce."))] \
        = None
    pipeline: Annotated[list[str] | None, cli(typer.Option("--pipeline", help="NAME=FILE: serve a pipeline file; "
                        "POST /search {\"pipeline\": NAME, \"text\": …} runs it (repeatable)."))] = None


def _serve(o: ServeCommandOptions) -> None:
    """Serve collections over HTTP: JSON search API (docs at /docs), Prometheus /metrics and a web page at /."""
    from engine.serve.server import serve
    names = split_list(o.collections)
    serve(ServeOptions(root=o.root, collections=tuple(names) if names else None, host=o.host, port=o.port,
                       api_key=o.api_key, max_k=o.max_k, max_upload_bytes=upload_bytes(o.max_upload_mb),
                       max_image_pixels=o.max_image_pixels, timeout_s=o.timeout_s, batch_window_ms=o.batch_window_ms,
                       max_batch=o.max_batch, batch_workers=o.batch_workers, rerank=tuple(o.rerank or ()),
                       pipelines=served_pipelines(o.pipeline or [])))


serve_cmd = options_command(ServeCommandOptions, _serve)


def served_pipelines(specs: list[str]) -> tuple:
    """NAME=FILE pairs parsed before the server starts: a bad file is one line, not a failing request later."""
    from engine.core.ranking.pipeline.parse import read_pipeline_file
    from engine.errors import EngineError
    out: dict = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise EngineError(f"--pipeline takes NAME=FILE, not {spec!r}")
        name = name.strip()
        if name in out:
            raise EngineError(f"--pipeline {name!r} is given twice (names are compared without their blanks)")
        out[name] = read_pipeline_file(path.strip())
    return tuple(out.items())
