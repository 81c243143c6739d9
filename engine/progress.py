"""Progress bars and console output that one `--quiet` switch silences."""
from __future__ import annotations

import errno
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterable, Iterator, TypeVar

from engine.errors import EngineError, render_options

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

T = TypeVar("T")

_state: dict = {"quiet": False}


def _console() -> "Console":
    """The stderr console, made on first output: a quiet query never imports rich."""
    if "console" not in _state:
        from rich.console import Console
        _state["console"] = Console(stderr=True)
    return _state["console"]


def _escape(text: str) -> str:
    """Text shown as it is: rich would take `[serve]` in a message for markup and drop it."""
    from rich.markup import escape
    return escape(text)


def __getattr__(name: str):
    """`engine.progress.console`, made on first use."""
    if name == "console":
        return _console()
    raise AttributeError(f"module 'engine.progress' has no attribute {name!r}")


LIBRARY_LOGGERS = ("sentence_transformers", "transformers", "huggingface_hub", "bm25s", "faiss", "urllib3",
                   "filelock", "onnxruntime", "PIL", "timm", "open_clip", "accelerate", "torch", "ray", "lightgbm")
"""Libraries whose own log lines stay out of the engine's output (ENGINE_LIBRARY_LOGS=1 lets them through)."""


def quiet_libraries() -> None:
    """Only errors from the libraries' loggers: a command speaks in its own lines, and a library's ("Converting
    SentenceTransformer model … to CrossEncoder", a hub retry, "Building index from tokens") is noise to a user
    who asked for neither. Their warnings that matter reach the user as the engine's own one-line errors."""
    import logging
    import os
    if os.environ.get("ENGINE_LIBRARY_LOGS", "").strip() not in ("", "0"):
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def set_quiet(quiet: bool) -> None:
    _state["quiet"] = quiet


_COLORS = {"yellow": "33", "red": "31"}


def _line(text: str, label: str = "", color: str = "") -> None:
    """One line on stderr. Plain, without importing rich, unless rich's console is there already (a bar or a
    table made it): then through it, so a live bar stays below the line. The label is colored on a terminal
    (not with NO_COLOR), as rich would."""
    if "console" in _state:
        head = f"[{color}]{label}[/{color}] " if label else ""
        _state["console"].print(head + _escape(text), soft_wrap=True, highlight=False)
        return
    import os
    if label and sys.stderr.isatty() and not os.environ.get("NO_COLOR"):
        label = f"\x1b[{_COLORS[color]}m{label}\x1b[0m"
    sys.stderr.write(f"{label} {text}\n" if label else f"{text}\n")
    sys.stderr.flush()


def info(message: str) -> None:
    """A status line on stderr (stdout is kept for results)."""
    if not _state["quiet"]:
        _line(render_options(message))


def warn(message: str) -> None:
    """Warnings show even with --quiet."""
    _line(render_options(message), "warning:", "yellow")


def make_progress() -> "Progress":
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=_console(),
                    disable=_state["quiet"] or not sys.stderr.isatty(), transient=False)


def track(items: Iterable[T], total: int | None, description: str) -> Iterator[T]:
    """Iterate with a progress bar (silent under --quiet or when stderr is not a terminal)."""
    with make_progress() as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)


def error_line(message: str) -> None:
    """One red `error:` line on stderr: what a command line shows instead of a traceback."""
    _line(message, "error:", "red")


@contextmanager
def one_line_errors() -> Iterator[None]:
    """A command's user errors as one red line and exit 2, an interrupt as exit 130, a full disk as a line that
    says nothing was lost: every command line's way out."""
    try:
        yield
    except EngineError as exc:
        error_line(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        error_line(f"{exc.filename or 'a file'}: no space left on the device; free some and run the command "
                   "again (every write goes to a temporary name: what was there is whole)")
        sys.exit(2)
