"""One exception type for everything a user can fix: the CLI prints its message on one line."""
from __future__ import annotations


class EngineError(Exception):
    """A user-facing error. The message names the file, line or id at fault and, where there is one, the fix."""


def where(path: object, line: int | None = None) -> str:
    """`file:line` prefix for messages about bad input."""
    return f"{path}:{line}" if line is not None else f"{path}"
