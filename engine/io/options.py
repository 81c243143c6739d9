"""Every numeric option of every command, declared once with its range (finite always), and checked before the
command's work starts: before a model loads, a file is read or an output is written.

`RANGES` holds an option's range by parameter name; `PER_COMMAND` overrides it for one command ("eventa submit",
"build"). `engine.cli` wraps every command so `check_options` sees its values first; `tests/test_options.py`
walks the app and fails on a numeric option without a declared range. Output paths (`OUTPUTS`) are checked for
writability at the same time. A value outside its range is one line naming the option; "0 means default" only
where the range says so (and the option's help with it).
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

    def check(self, name: str, value: Any) -> Any:
        """`value` converted (a numeric string to a number; "auto" kept), or an EngineError naming the option."""
        if value is None:
            return None
        if self.listed:
            for part in str(value).split(","):
                try:
                    float(part)
                except ValueError:
                    continue  # the command's own parser names what is not a number
                self._one(name, part.strip(), raw=value)
            return value
        return self._one(name, value)

    def _one(self, name: str, value: Any, raw: Any = None) -> Any:
        if isinstance(value, str):
            if self.auto and value.strip().lower() == AUTO:
                return AUTO
            try:
                number: float = int(value) if self.integer else float(value)
            except ValueError:
                raise EngineError(f"{opt(name)} must be {self.describe()}, not {value!r}") from None
        else:
            number = value
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise EngineError(f"{opt(name)} must be {self.describe()}, not {value!r}")
        shown = raw if raw is not None else value
        if self.zero and number == 0:
            return number
        if (not self.integer and not self.open_lo and self.lo is not None and self.hi is not None
                and not self.lo <= number <= self.hi):
            raise EngineError(f"{opt(name)} must be between {_num(self.lo)} and {_num(self.hi)}, not {shown}")
        if not math.isfinite(number):
            raise EngineError(f"{opt(name)} must be {self.describe()}, not {shown}")
        if self.lo is not None and (number <= self.lo if self.open_lo else number < self.lo):
            bound = f"greater than {_num(self.lo)}" if self.open_lo else f"at least {_num(self.lo)}"
            bound = f"a whole number of {bound}" if self.integer else bound
            raise EngineError(f"{opt(name)} must be {bound}, not {shown}")
        if self.hi is not None and number > self.hi:
            raise EngineError(f"{opt(name)} must be at most {_num(self.hi)}, not {shown}"
                              + (f" (the bound is {opt(name)}'s documented limit)" if name == "resamples" else ""))
        return number


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def Int(lo: int | None = 1, hi: int | None = None, auto: bool = False) -> Range:
    return Range(lo, hi, auto=auto, integer=True)


def Float(lo: float | None = 0.0, hi: float | None = None, open_lo: bool = False, listed: bool = False) -> Range:
    return Range(lo, hi, open_lo=open_lo, listed=listed)


MAX_K = 100_000
SEED = Int(0, 2**32 - 1)
RANGES: dict[str, Range] = {
    "batch_size": Int(1, 65_536, auto=True),  # items per forward pass (auto: by device)
    "batch": Int(1, 65_536),
    "workers": Int(0, 256),                  # decoding threads; 0: decode in the calling thread
    "threads": Int(0, 1024),                 # 0: torch's default (the help says so)
    "chunk_size": Int(1, 10_000_000),
    "shards": Int(1, 1024),
    "compact_at": Float(0, 1),
    "seconds": Float(0, 86_400, open_lo=True),
    "wait": Float(0, 86_400),                # 0: fail at once (the help says so)
    "recall": Float(0, 1, open_lo=True),
    "k": Int(1, MAX_K),
    "nprobe": Int(1, 1_000_000),
    "ef": Int(1, 1_000_000),
    "k_factor": Float(1, 10_000),
    "n": Int(1, 1_000_000),
    "alpha": Float(0, 1, open_lo=True),
    "resamples": Int(1, MAX_RESAMPLES),
    "seed": SEED,
    "depth": Int(1, MAX_K),
    "sample": Int(1, 1_000_000),
    "temperature": Float(0, 1_000, open_lo=True),
    "prior_weight": Float(0, 1),
    "folds": Int(2, 1_000),
    "repeats": Int(1, 1_000),
    "passage_words": Int(16, 100_000),      # the passage splitter's floor (engine.tasks.eventa.build)
    "dense_weight": Float(0, 1_000),
    "bm25_weight": Float(0, 1_000),
    "top_articles": Range(1, MAX_K, integer=True, zero=True),  # 0: skip the article stage (the help says so)
    "article_weight": Float(0, 1),
    "limit": Int(1, 100_000_000),
    "articles": Int(1, 100_000),
    "images_per_article": Int(1, 1_000),
    "text_weight": Float(0, 1_000),
    "text_weights": Float(0, 1_000, listed=True),
    "weights": Float(0, 1_000, listed=True),
    "max_texts": Int(2, 100_000),            # modelret-a: labelled texts per task the candidates embed
    "max_length": Int(8, 8192),              # modelret-a: tokens per text for the candidates
    "rerank_depth": Int(1, 10_000),          # first-stage hits a reranker orders (engine.core.ranking.rerankers reads its cap here)
    "holdout": Float(0.05, 0.5),             # engine adapt: pairs held out for early stopping
    "reg": Float(0, 1_000),                  # engine adapt: pull toward the identity
    "epochs": Int(1, 100_000),               # engine adapt: most full-batch steps; rerank train: most passes
    "lr": Float(0, 0.01, open_lo=True),      # engine rerank train: AdamW learning rate
    "head_lr": Float(0, 0.1, open_lo=True),  # engine rerank train: a fresh head's AdamW learning rate
    "negatives": Int(1, 63),                 # engine rerank train: other documents per query per step
    "rerank_rounds": Int(1, 100),            # llm-list: grouped-voting rounds (engine.core.ranking.rerankers.prompts)
    "rerank_batch_tokens": Int(1, 16_777_216),  # llm: tokens of one forward pass (engine.core.ranking.rerankers.prompts)
    "older_than": Float(0, 36_500, open_lo=True),  # engine cache clear: days since an entry was last used
}
LEAVE_ONE_OUT = Range(2, 1_000, integer=True, zero=True)  # --folds 0: leave-one-out (the help says so)
PER_COMMAND: dict[tuple[str, str], Range] = {
    ("fuse", "k"): Int(0, 1_000_000),        # the RRF constant, not a result count
    ("rerank train", "batch_size"): Int(1, 1024),  # queries per step (no "auto": a fit, not an encode)
    ("mllm", "folds"): LEAVE_ONE_OUT,
    ("modelret-a", "folds"): LEAVE_ONE_OUT,
}
UNCHECKED_COMMANDS = ("serve",)
"""Commands whose options another module checks with its own ranges (`engine.serve.options.ServeOptions`)."""
OUTPUTS = ("out", "out_dir", "report", "save_weights")
OUTPUT_FOLDERS = (("adapt", "out"), ("rerank train", "out"))
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
    extras = getattr(declaration, "__metadata__", None)
    return Cli(extras[-1] if extras else declaration)


REQUIRED = object()
"""The default of an options field that has none (a required argument or option)."""


def declared_options(cls: type) -> list[tuple[str, Any, Any, Any]]:
    """(name, type, typer declaration, default) of each field of the options dataclass `cls` that the command
    line declares, in field order. A field whose type is itself an options dataclass (a group of options that
    several commands share) stands for that class's declared fields, in its place."""
    return [(name, kind, info, default) for name, kind, info, default, _ in _declared(cls)]


def _declared(cls: type) -> list[tuple[str, Any, Any, Any, str | None]]:
    """`declared_options` with, for each option, the field of `cls` holding its group (None: `cls` itself)."""
    import dataclasses
    import typing
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            out += [(name, kind, info, default, f.name) for name, kind, info, default in declared_options(hint)]
            continue
        marks = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Cli)]
        if marks:
            default = f.default if f.default is not dataclasses.MISSING else REQUIRED
            out.append((f.name, typing.get_args(hint)[0], marks[0].info, default, None))
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
              for name, kind, info, default, _ in declared]
    groups = {group: [name for name, *_, g in declared if g == group] for *_, group in declared if group}
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


def range_for(command: str, name: str) -> Optional[Range]:
    """The declared range of option `name` of `command` ("eventa submit"), or None."""
    return PER_COMMAND.get((command, name), RANGES.get(name))


def check_options(command: str, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with every declared numeric option checked (and numeric strings converted); outputs checked for
    writability. Raises EngineError (one line) on the first bad value."""
    from engine.io.atomic import check_writable
    out = dict(values)
    if command.split(" ")[0] in UNCHECKED_COMMANDS:
        return out
    for name, value in values.items():
        declared = range_for(command, name)
        if declared is not None and not isinstance(value, Path):  # `dse --folds` is a folder of splits
            out[name] = declared.check(name, value)
        elif name in OUTPUTS and isinstance(value, Path):
            check_writable(value, folder=name == "out_dir" or (command, name) in OUTPUT_FOLDERS)
    return out
