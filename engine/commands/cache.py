"""`engine cache info` and `engine cache clear [--older-than DAYS]`: the stage cache's folder, what it holds
by stage kind, and removing it (or what has not been used for a while). Parsing only: the work lives in
`engine.core.ranking.pipeline.cache`."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.io.options import Float

cache_app = typer.Typer(no_args_is_help=True,
                        help="The stage cache (pipeline stage outputs and rerankers' pair scores): what it holds, "
                             "and clearing it. ENGINE_CACHE_MAX_GB caps its size (least recently used out).")

CacheDir = Annotated[Optional[Path], typer.Option("--cache", help="Folder of cached stage outputs (default: "
                                                  "$ENGINE_CACHE/pipelines).")]


def _folder(cache: Path | None) -> Path:
    from engine.core.ranking.pipeline.cache import default_cache_dir
    from engine.errors import EngineError
    folder = cache or default_cache_dir()
    if folder.exists() and not folder.is_dir():
        raise EngineError(f"--cache {folder} is a file; give a folder")
    return folder


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


@cache_app.command("info")
def info_cmd(cache: CacheDir = None,
             as_json: Annotated[bool, typer.Option("--json", help="Print JSON: folder, bytes, entries, kinds.")]
             = False) -> None:
    """Where the stage cache is, its size and entries, by stage kind (the rerankers' pair scores as their own)."""
    import json
    from engine.core.ranking.pipeline.cache import cache_info
    from engine.display import format_table
    got = cache_info(_folder(cache))
    if as_json:
        typer.echo(json.dumps(got, indent=2))
        return
    typer.echo(f"{got['folder']}: {got['entries']:,} {'entry' if got['entries'] == 1 else 'entries'}, "
               f"{_size(got['bytes'])}")
    if got["kinds"]:
        rows = [[kind, f"{k['entries']:,}", _size(k["bytes"])] for kind, k in got["kinds"].items()]
        typer.echo(format_table(["kind", "entries", "size"], rows))


OLDER_THAN = Float(0, 36_500, open_lo=True)
"""Days since an entry was last used (`clear --older-than`)."""


@cache_app.command("clear")
def clear_cmd(cache: CacheDir = None,
              older_than: Annotated[Optional[float], typer.Option("--older-than", metavar="DAYS",
                                    help="Remove only the entries not used for more than DAYS days (0–36500, "
                                    "above 0)."), OLDER_THAN] = None
              ) -> None:
    """Remove the stage cache's entries and pair scores (with --older-than, those not used for that long)."""
    from engine.core.ranking.pipeline.cache import clear_cache
    folder = _folder(cache)
    n, size = clear_cache(folder, older_than)
    since = f" not used for more than {older_than:g} day{'' if older_than == 1 else 's'}" \
        if older_than is not None else ""
    typer.echo(f"removed {n:,} {'entry' if n == 1 else 'entries'}{since} ({_size(size)}) from {folder}")
