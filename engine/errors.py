"""One exception type for everything a user can fix, and the small helpers its messages are built with.

Messages speak of values and files. Where one names an option the caller set, it writes `opt("batch_size")`:
a marker that reads as the Python parameter name (`batch_size`) from the API and that the CLI renders as
the flag of the command that ran (`--batch-size`), so engine code never hard-codes command-line spelling.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

_OPTION = re.compile(r"\x1e([a-z0-9_]+)\x1f")


def opt(name: str) -> str:
    """A reference to the option `name` (a Python parameter name) inside an error or warning message."""
    return f"\x1e{name}\x1f"


_style: dict[str, Callable[[str], str]] = {"name_of": str}


def set_option_names(name_of: Callable[[str], str]) -> None:
    """How `opt()` markers read from now on: the CLI installs its flag names, the API keeps parameter names."""
    _style["name_of"] = name_of


def render_options(message: str) -> str:
    """The message with every `opt()` marker replaced by the option's name in the current style."""
    return _OPTION.sub(lambda m: _style["name_of"](m.group(1)), message)


class EngineError(Exception):
    """A user-facing error. The message names the file, line or id at fault and, where there is one, the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        """One line always: line breaks that came in with a user's text (a column name, an id) are escaped."""
        return render_options(self.message).replace("\r", "\\r").replace("\n", "\\n")


def where(path: object, line: int | None = None) -> str:
    """`file:line` prefix for messages about bad input."""
    return f"{path}:{line}" if line is not None else f"{path}"


def preview(items: Sequence[object], n: int = 5) -> str:
    """The first `n` items, comma-separated, with `…` when there are more: for messages about many ids."""
    return ", ".join(map(str, items[:n])) + (" …" if len(items) > n else "")


def missing_extra(package: str, extra: str) -> EngineError:
    """The error for an optional dependency that is not installed, naming the extra that brings it and the
    command for an installed package and for a checkout of the repository."""
    many = "," in package or " and " in package
    return EngineError(f"{package} {'are' if many else 'is'} not installed; {'they come' if many else 'it comes'} "
                       f"with the `{extra}` extra: pip install 'engine[{extra}]' (in a checkout of the repository: "
                       f"pip install -e \".[{extra}]\")")


def check_arguments(argv: Sequence[str]) -> None:
    """Command-line words that are text: bytes that are not UTF-8 arrive as lone surrogates (Python's
    `surrogateescape`), which every later encode (a tokenizer, a run file, a prompt) would fail on."""
    for n, word in enumerate(argv, 1):
        try:
            word.encode("utf-8")
        except UnicodeEncodeError as exc:
            shown = word.encode("utf-8", "surrogateescape")[:40]
            raise EngineError(f"argument {n} ({shown!r}) is not valid UTF-8 text (byte {exc.start + 1}); "
                              "give text in UTF-8") from None
