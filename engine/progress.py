"""Progress bars and console output that one `--quiet` switch silences."""
from __future__ import annotations

import sys
from typing import Iterable, Iterator, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from engine.errors import render_options

T = TypeVar("T")

_state = {"quiet": False}
console = Console(stderr=True)


def set_quiet(quiet: bool) -> None:
    _state["quiet"] = quiet


def info(message: str) -> None:
    """A status line on stderr (stdout is kept for results)."""
    if not _state["quiet"]:
        console.print(escape(render_options(message)), soft_wrap=True)  # tables keep their lines


def warn(message: str) -> None:
    """Warnings show even with --quiet."""
    console.print(f"[yellow]warning:[/yellow] {escape(render_options(message))}")


def make_progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                    disable=_state["quiet"] or not sys.stderr.isatty(), transient=False)


def track(items: Iterable[T], total: int | None, description: str) -> Iterator[T]:
    """Iterate with a progress bar (silent under --quiet or when stderr is not a terminal)."""
    with make_progress() as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)
