"""Problems found in a user's file, each with its line: readers collect them, validators list them all,
and evaluation turns the first into an `EngineError` (one line, never a traceback)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

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


def read_text_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file without their line endings; a final newline adds no empty line."""
    path = Path(path)
    if not path.exists():
        raise EngineError(f"{path}: no such file")
    if path.is_dir():
        raise EngineError(f"{path}: is a folder, expected a file")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EngineError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
