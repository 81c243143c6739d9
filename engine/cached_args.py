"""A command's argument shape, cached from its click definition, so a plain `engine search` line is parsed
without importing typer or assembling the app (≈ 10 % of a cold query's 0.35 s on 2 cores).

The options are declared once, in `engine.core.cli` (typer). The first `engine search` that goes through
typer writes the command's shape (names, flags, types, defaults, env vars) to
`$ENGINE_CACHE/cli/search-KEY.json`, KEY naming the engine's version and the modules that declare the
options; later lines are parsed from it here. Anything the shape does not cover plainly (`--help`, an
unknown or repeated option, `--opt=` forms of short flags, a value that starts with `-`, a word where a
number goes, `--ray`) returns None and goes through typer, which answers as it always has.
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any, Callable, Optional

IMPLEMENTATIONS = {"search": ("engine.core.search_command", "search")}
"""Commands parsed here, each with the typer-free function its typer command forwards every option to."""
DECLARING = ("cli.py", "core/cli.py", "core/search_command.py", "core/store/stored.py", "serve/options.py",
             "version.py")
"""The modules (under engine/) whose change can change a shape: their sizes and times are in the key."""
TYPES = {"int": int, "float": float, "str": str, "path": Path, "bool": bool}


def shape_file(command: str) -> Path:
    from engine.core.encoders.base import cache_dir
    from engine.version import __version__
    here = Path(__file__).parent
    stats = [os.stat(here / f) for f in DECLARING]
    stamp = [__version__, *((s.st_size, s.st_mtime_ns) for s in stats)]
    return cache_dir() / "cli" / f"{command}-{zlib.crc32(json.dumps(stamp).encode()):08x}.json"


def shape_of(command: Any) -> Optional[dict]:
    """A click command's parameters as plain data, or None where one is more than a name, flags, a type and a
    default (several values, counts, callbacks, choices): such a command is always parsed by click."""
    params = []
    for p in command.params:
        kind = {"int": "int", "integer": "int", "float": "float", "str": "str", "text": "str", "path": "path",
                "boolean": "bool"}.get(p.type.name)
        flag = bool(getattr(p, "is_flag", False))
        if (kind is None or p.nargs != 1 or p.multiple or getattr(p, "count", False) or p.callback is not None
                or p.is_eager or p.secondary_opts or (flag and kind != "bool") or isinstance(p.envvar, list)):
            return None
        default = p.default
        if default is not None and not isinstance(default, (str, int, float, bool, Path)):
            return None
        params.append({"name": p.name, "argument": p.param_type_name == "argument", "opts": list(p.opts),
                       "flag": flag, "type": kind, "required": bool(p.required), "envvar": p.envvar,
                       "default": str(default) if isinstance(default, Path) else default})
    return {"params": params}


def save_shape(name: str, command: Any) -> None:
    """Cache `command`'s shape for the next `engine NAME` line (best effort: a read-only cache is no error)."""
    if name not in IMPLEMENTATIONS:
        return
    try:
        path = shape_file(name)
        if path.exists():
            return
        shape = shape_of(command)
        if shape is None:
            return
        from engine.io.atomic import write_json
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, shape)
    except OSError:
        return


def parse(shape: dict, args: list[str]) -> Optional[dict[str, Any]]:
    """`args` (after the command's name) as the command's keyword arguments, as click would give them; None
    for anything but a plain line."""
    by_opt = {o: p for p in shape["params"] if not p["argument"] for o in p["opts"]}
    positional = [p for p in shape["params"] if p["argument"]]
    given: dict[str, Any] = {}
    words = iter(args)
    for word in words:
        if word.startswith("-") and word != "-":
            name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
            p = by_opt.get(name)
            if p is None or p["name"] in given or (eq and p["flag"]):
                return None
            if p["flag"]:
                given[p["name"]] = True
                continue
            value = value if eq else next(words, None)
            if value is None or value.startswith("-"):
                return None
            given[p["name"]] = value
        elif positional:
            given[positional.pop(0)["name"]] = word
        else:
            return None
    out: dict[str, Any] = {}
    for p in shape["params"]:
        value = given.get(p["name"])
        if value is None and p["envvar"]:
            value = os.environ.get(p["envvar"]) or None
        if value is None:
            if p["required"]:
                return None
            out[p["name"]] = None if p["default"] is None else TYPES[p["type"]](p["default"])
            continue
        try:
            out[p["name"]] = value if p["flag"] else TYPES[p["type"]](value)
        except ValueError:
            return None  # click says what is wrong with it
    return out


def cached_call(argv: list[str]) -> Optional[Callable[[], None]]:
    """The command `argv` names, ready to run as the command line runs it (options checked as typer's path
    checks them, errors as one line); None where typer must parse the line (another command, no cached shape
    yet, anything but a plain line)."""
    if not argv or argv[0] not in IMPLEMENTATIONS or "--ray" in argv:
        return None
    try:
        shape = json.loads(shape_file(argv[0]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kwargs = parse(shape, argv[1:])
    if kwargs is None:
        return None
    flags = {p["name"]: max(p["opts"], key=len) for p in shape["params"] if not p["argument"]}

    def run() -> None:
        import importlib

        from engine.errors import set_option_names
        from engine.io.options import check_options
        from engine.progress import one_line_errors
        set_option_names(lambda name: flags.get(name, "--" + name.replace("_", "-")))
        try:
            with one_line_errors():  # messages name the flags: the names go back only after they are shown
                module, function = IMPLEMENTATIONS[argv[0]]
                getattr(importlib.import_module(module), function)(**check_options(argv[0], kwargs))
        finally:
            set_option_names(str)  # Python callers after this one see parameter names again
    return run
