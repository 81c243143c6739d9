"""Problems found in a user's file, each with its line: readers collect them, validators list them all,
and evaluation turns the first into an `EngineError` (one line, never a traceback)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import EngineError, where


@dataclass(frozen=True)
class Problem:
    """One fault in `path`; `line` is 1-based, None when it concerns the whole file."""
    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{where(self.path, self.line)}: {self.message}"


def raise_first(problems: Sequence[Problem], validate_hint: str | None = None) -> None:
    """Raise the first problem as an `EngineError`, saying how many more there are and how to list them."""
    if not problems:
        return
    msg = str(problems[0])
    if len(problems) > 1:
        msg += f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''}"
        msg += f"; `{validate_hint}` lists them)" if validate_hint else ")"
    raise EngineError(msg)
