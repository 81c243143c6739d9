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
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """A meter's rate ("12.3 pairs/s"); empty for a task that has none."""
        def render(self, task) -> Text:
            return Text(str(task.fields.get("rate", "")))
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), RateColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=_console(),
                    disable=_state["quiet"] or not sys.stderr.isatty(), transient=False)


LOG_EVERY = 5.0
"""Seconds between two progress lines when stderr is not a terminal (a log file, a pipe)."""


class Meter:
    """One long stage's count of work done out of its total: a bar on a terminal, a line every `LOG_EVERY`
    seconds in a log, nothing under --quiet. Work deep inside a stage reports through `advance` without being
    handed the meter (the innermost open meter counts it)."""

    def __init__(self, description: str, total: int, unit: str) -> None:
        import time
        self.description, self.total, self.unit = description, max(0, int(total)), unit
        self.done, self.start, self.bar, self.task = 0, time.monotonic(), None, None

    def rate(self) -> float:
        import time
        return self.done / max(time.monotonic() - self.start, 1e-9)

    def rate_text(self) -> str:
        return f"{self.rate():.1f} {self.unit}/s" if self.done else ""

    def line(self) -> str:
        """`description: done/total unit, rate, about N s left` (a log's progress line)."""
        text = f"{self.description}: {self.done}/{self.total} {self.unit}"
        if self.done:
            left = (self.total - self.done) / self.rate()
            text += f", {self.rate():.1f}/s, about {left:.0f} s left"
        return text

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + int(n)) if self.total else self.done + int(n)
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, rate=self.rate_text())


_meters: list[Meter] = []


def advance(n: int = 1) -> None:
    """Count `n` units of work done on the innermost open meter (none open: nothing)."""
    if _meters:
        _meters[-1].advance(n)


@contextmanager
def meter(description: str, total: int, unit: str = "items") -> Iterator[Meter]:
    """A `Meter` open for the duration of the block; meters opened inside share the terminal's one display, and
    one of the same description as the innermost open meter is that meter (a stage that scores in chunks opens
    one meter over all of them; each chunk's own opening counts on it)."""
    if _meters and _meters[-1].description == description:
        yield _meters[-1]
        return
    m = Meter(description, total, unit)
    _meters.append(m)
    try:
        if _state["quiet"] or m.total == 0:
            yield m
        elif sys.stderr.isatty():
            with _bar(m):
                yield m
        else:
            with _log_lines(m):
                yield m
    finally:
        _meters.remove(m)


@contextmanager
def _bar(m: Meter) -> Iterator[None]:
    """The meter as a task of the display already shown (an outer meter's), else of a new one."""
    live = _state.get("live")
    if live is not None:
        m.bar, m.task = live, live.add_task(m.description, total=m.total, rate="")
        try:
            yield
        finally:
            live.remove_task(m.task)
        return
    from rich.errors import LiveError
    bar = make_progress()
    try:
        bar.start()
    except LiveError:  # another display (a build's bar) holds the terminal: this meter stays unseen
        yield
        return
    _state["live"] = bar
    try:
        m.bar, m.task = bar, bar.add_task(m.description, total=m.total, rate="")
        yield
    finally:
        _state.pop("live", None)
        bar.stop()


@contextmanager
def _log_lines(m: Meter) -> Iterator[None]:
    """A line every LOG_EVERY seconds while the block runs (from a daemon thread: the work need not call in)."""
    import threading
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(LOG_EVERY):
            _console().print(_escape(m.line()), soft_wrap=True, highlight=False)
    thread = threading.Thread(target=tick, daemon=True, name="progress-lines")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def track(items: Iterable[T], total: int | None, description: str) -> Iterator[T]:
    """Iterate with a progress `meter` (a bar on a terminal, lines in a log, silent under --quiet)."""
    if total is None:
        try:
            total = len(items)  # type: ignore[arg-type]
        except TypeError:
            total = 0
    with meter(description, total) as m:
        for item in items:
            yield item
            m.advance()


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
