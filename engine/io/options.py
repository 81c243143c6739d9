"""Every numeric option has a range (finite always), declared once beside its declaration and checked before
the command's work starts: before a model loads, a file is read or an output is written.

A range is a `Range` value. An options dataclass field carries it in its annotation
(`k: Annotated[int, cli(typer.Option("-k", …)), K] = 10`), a plain command's parameter likewise
(`Annotated[float, typer.Option(…), WAIT]`); a range several declarations share is a named constant in the module
that owns the option (`K`, `SEED` here for the engine-wide ones; a reranker's in the rerankers' registry; a
task's in the task), used by the command's flag, the pipeline stage's keyword and the reranker option alike, so
one name has one range. `engine.cli` wraps every command so `check_options` sees its values first, against
`ranges_of(command)`; the tests walk the app and fail on a numeric option without a declared range. Output paths
(`OUTPUTS`) are checked for writability at the same time. A value outside its range is one line naming the
option (its flag, or the stage and keyword: `Range.check`'s `label`); "0 means default" only where the range
says so (and the option's help with it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from engine.errors import EngineError, opt

AUTO = "auto"
MAX_RESAMPLES = 100_000
"""Bootstrap/permutation resamples `engine compare` draws at most (memory grows with resamples × queries)."""


@dataclass(frozen=True)
class Range:
    """lo ≤ value ≤ hi (lo < value when `open_lo`), finite; `auto` also accepts the word "auto";
    `listed` checks each number of a comma-separated list."""
    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False
    auto: bool = False
    listed: bool = False
    integer: bool = False
    zero: bool = False  # 0 is allowed besides the range: it has a meaning the option's help states

    def describe(self) -> str:
        lo = "" if self.lo is None else (f"greater than {_num(self.lo)}" if self.open_lo else f"at least {_num(self.lo)}")
        hi = "" if self.hi is None else f"at most {_num(self.hi)}"
        what = " and ".join(x for x in (lo, hi) if x) or "finite"
        kind = "a whole number" if self.integer else "a finite number"
        return f"{kind} {what}" + (" (or auto)" if self.auto else "") + (" (or 0)" if self.zero else "")

    def check(self, name: str, value: Any, label: str | None = None, text: bool = True) -> Any:
        """`value` converted (a numeric string to a number; "auto" kept), or an EngineError naming the option:
        `label` (a pipeline stage's "rerank(…): depth"), else its flag. `text=False`: a value given as a value
        (a pipeline file's literal, a Python argument), so a string is refused, not read as a number."""
        if value is None:
            return None
        who = label or opt(name)
        if self.listed and (text or isinstance(value, str)):
            for part in str(value).split(","):
                try:
                    float(part)
                except ValueError:
                    continue  # the command's own parser names what is not a number
                self._one(name, who, part.strip(), raw=value)
            return value
        if isinstance(value, str) and not text and not (self.auto and value.strip().lower() == AUTO):
            raise EngineError(f"{who} must be {self.describe()}, not {value!r}")
        return self._one(name, who, value)

    def _one(self, name: str, who: str, value: Any, raw: Any = None) -> Any:
        if isinstance(value, str):
            if self.auto and value.strip().lower() == AUTO:
                return AUTO
            try:
                number: float = int(value) if self.integer else float(value)
            except ValueError:
                raise EngineError(f"{who} must be {self.describe()}, not {value!r}") from None
        else:
            number = value
        if isinstance(number, bool) or not isinstance(number, (int, float)) \
                or (self.integer and isinstance(number, float)):
            raise EngineError(f"{who} must be {self.describe()}, not {value!r}")
        shown = raw if raw is not None else value
        if self.zero and number == 0:
            return number
        if not math.isfinite(number):
            raise EngineError(f"{who} must be {self.describe()}, not {shown}")
        if (not self.integer and not self.open_lo and self.lo is not None and self.hi is not None
                and not self.lo <= number <= self.hi):
            raise EngineError(f"{who} must be between {_num(self.lo)} and {_num(self.hi)}, not {shown}")
        if self.lo is not None and (number <= self.lo if self.open_lo else number < self.lo):
            bound = f"greater than {_num(self.lo)}" if self.open_lo else f"at least {_num(self.lo)}"
            bound = f"a whole number of {bound}" if self.integer else bound
            if self.zero:  # 0 has its own meaning: below it, 0 is the bound; between, both are said
                bound = ("a whole number of at least 0" if self.integer else "at least 0") if number < 0 \
                    else f"0 or {bound}"
            raise EngineError(f"{who} must be {bound}, not {shown}")
        if self.hi is not None and number > self.hi:
            raise EngineError(f"{who} must be at most {_num(self.hi)}, not {shown}"
                              + (f" (the bound is {who}'s documented limit)" if name == "resamples" else ""))
        return number


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def Int(lo: int | None = 1, hi: int | None = None, auto: bool = False) -> Range:
    return Range(lo, hi, auto=auto, integer=True)


def Float(lo: float | None = 0.0, hi: float | None = None, open_lo: bool = False, listed: bool = False) -> Range:
    return Range(lo, hi, open_lo=open_lo, listed=listed)


MAX_K = 100_000
K = Int(1, MAX_K)
"""Results per query: a command's -k, a first stage's k (and fetch), a cutoff's `% k`."""
DEPTH = Int(1, MAX_K)
"""Candidates or documents kept per query before a cut (`engine fuse --depth`, `fuse(depth=)`, a task's --depth)."""
COUNT = Int(1, 1_000_000)
"""A count of items or queries to take (`expand(top=, per_parent=, limit=)`, `engine bench --n`)."""
BATCH_SIZE = Int(1, 65_536, auto=True)
"""Items per forward pass (auto: by device)."""
BATCH = Int(1, 65_536)
"""A batch size with no "auto" (queries ranked per batch, a benchmark's batch)."""
WORKERS = Int(0, 256)
"""Decoding threads; 0: decode in the calling thread."""
THREADS = Int(0, 1024)
"""Torch/FAISS threads; 0: torch's default (the help says so)."""
SEED = Int(0, 2**32 - 1)
WAIT = Float(0, 86_400)
"""Seconds to wait for another writer; 0: fail at once (the help says so)."""
SHARE = Float(0, 1)
"""A share or weight from 0 to 1 (`similarity(weight=)`, a fraction of rows)."""
WEIGHT = Float(0, 1_000)
"""A fusion weight (`fuse(weights=)`, a task's --*-weight)."""
WEIGHTS = Float(0, 1_000, listed=True)
"""Comma-separated fusion weights (`engine fuse --weights`)."""
FOLDS = Int(2, 1_000)
"""Cross-validation folds."""

UNCHECKED_COMMANDS = ("serve",)
"""Commands whose options another module checks with its own ranges (`engine.serve.options.ServeOptions`)."""
OUTPUTS = ("out", "out_dir", "report", "save_weights", "plot")
OUTPUT_FOLDERS = (("adapt", "out"), ("rerank train", "out"), ("experiment", "out"))
"""Outputs that are folders (a model folder, replaced with --force), beside every `out_dir`."""
"""Parameter names of files or folders a command writes: checked for writability before the work."""


@dataclass(frozen=True)
class Cli:
    """A field's command-line declaration (typer's `Option`/`Argument` info: flags, help, env var), kept in the
    field's annotation: `k: Annotated[int, cli(typer.Option("-k", help=…))] = 10`."""
    info: Any


def cli(declaration: Any) -> Cli:
    """The marker for an options field's command-line declaration: a typer `Option(...)`/`Argument(...)`, or a
    shared `Annotated[type, Option(...)]` alias (its typer part is taken)."""
    extras = [e for e in getattr(declaration, "__metadata__", ()) if not isinstance(e, Range)]
    return Cli(extras[-1] if extras else declaration)


REQUIRED = object()
"""The default of an options field that has none (a required argument or option)."""


def declared_options(cls: type) -> list[tuple[str, Any, Any, Any]]:
    """(name, type, typer declaration, default) of each field of the options dataclass `cls` that the command
    line declares, in field order. A field whose type is itself an options dataclass (a group of options that
    several commands share) stands for that class's declared fields, in its place."""
    return [(name, kind, info, default) for name, kind, info, default, *_ in _declared(cls)]


def _declared(cls: type) -> list[tuple[str, Any, Any, Any, str | None, Range | None]]:
    """`declared_options` with, for each option, the field of `cls` holding its group (None: `cls` itself) and
    its declared range (None: none)."""
    import dataclasses
    import typing
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            out += [(name, kind, info, default, f.name, rng) for name, kind, info, default, _, rng in _declared(hint)]
            continue
        marks = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Cli)]
        ranges = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Range)]
        if marks:
            default = f.default if f.default is not dataclasses.MISSING else REQUIRED
            out.append((f.name, typing.get_args(hint)[0], marks[0].info, default, None, ranges[0] if ranges else None))
    return out


def options_command(cls: type, run: Any) -> Any:
    """A typer command whose parameters are the declared fields of the options dataclass `cls` (flags, help,
    defaults as declared there; a group's fields in its place) and that calls `run(cls(**values))`, each group
    built from its own fields; `run`'s docstring is its help."""
    import functools
    import inspect
    import typing
    from typing import Annotated
    declared = _declared(cls)
    params = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[kind, info],
                                default=inspect.Parameter.empty if default is REQUIRED else default)
              for name, kind, info, default, *_ in declared]
    groups = {group: [name for name, _, _, _, g, _ in declared if g == group] for _, _, _, _, group, _ in declared
              if group}
    hints = typing.get_type_hints(cls) if groups else {}

    @functools.wraps(run)
    def command(**values: Any) -> None:
        for group, names in groups.items():
            values[group] = hints[group](**{name: values.pop(name) for name in names})
        run(cls(**values))
    del command.__wrapped__  # typer reads the signature below, not `run`'s
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {}
    command.options = cls
    return command


def taken(cls: type, options: Any, **given: Any) -> Any:
    """An instance of the dataclass `cls` whose fields are taken from the command's `options` object where it has
    a field of the same name (else `cls`'s default), then `given`: a command's options handed to the layer below
    without naming each one again."""
    import dataclasses
    names = {f.name for f in dataclasses.fields(cls)}
    values = {name: getattr(options, name) for name in names if hasattr(options, name)}
    return cls(**{**values, **{k: v for k, v in given.items() if k in names}})


def split_list(value: Optional[str]) -> Optional[list[str]]:
    """A comma-separated option as a list (None when not given)."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def declared_ranges(cls: type) -> dict[str, Range]:
    """The range each declared option of the options dataclass `cls` carries in its annotation (its groups'
    fields too)."""
    return {name: rng for name, *_, rng in _declared(cls) if rng is not None}


def ranges_of(command: Any) -> dict[str, Range]:
    """The declared range of each option of a typer command function: its options class's fields
    (`options_command`), or its parameters' annotations (`Annotated[float, typer.Option(…), WAIT]`)."""
    import inspect
    import typing
    if getattr(command, "options", None) is not None:
        return declared_ranges(command.options)
    hints = typing.get_type_hints(inspect.unwrap(command), include_extras=True)
    return {name: marks[0] for name, hint in hints.items()
            if (marks := [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Range)])}


def check_options(command: str, values: dict[str, Any], ranges: dict[str, Range] | None = None) -> dict[str, Any]:
    """`values` with every option that has a declared range (`ranges`, by parameter name) checked and numeric
    strings converted; outputs checked for writability. Raises EngineError (one line) on the first bad value."""
    from engine.io.atomic import check_writable
    out = dict(values)
    if command.split(" ")[0] in UNCHECKED_COMMANDS:
        return out
    for name, value in values.items():
        declared = (ranges or {}).get(name)
        if declared is not None and not isinstance(value, Path):
            out[name] = declared.check(name, value)
        elif name in OUTPUTS and isinstance(value, Path):
            check_writable(value, folder=name == "out_dir" or (command, name) in OUTPUT_FOLDERS)
    return out
