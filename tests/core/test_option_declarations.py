"""Each option is declared once: a command built from an options dataclass (`engine.io.options.options_command`)
shows on the command line exactly the flags, help, defaults and env vars its fields declare, and every numeric
option of every command has its range declared in `engine.io.options`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from engine.cli import COMMANDS, root_command
from engine.io.options import cli, declared_options, options_command, range_for


def is_group(command) -> bool:
    return hasattr(command, "list_commands")


def is_option(param) -> bool:
    return param.param_type_name == "option"


def commands(group, path: tuple[str, ...] = ()):
    """(path, click command) of every command under `group`, loaded the way the command line loads them."""
    for name in group.list_commands(None):
        sub = group.get_command(None, name)
        if is_group(sub):
            yield from commands(sub, (*path, name))
        else:
            yield (*path, name), sub


ALL = list(commands(root_command()))


def test_every_command_is_reached():
    assert {path[0] for path, _ in ALL} == set(COMMANDS)
    assert len(ALL) > 30


@pytest.mark.parametrize("path, command", [(p, c) for p, c in ALL if hasattr(c.callback, "options")],
                         ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_a_command_from_an_options_class_shows_its_declarations(path, command):
    declared = {name: (info, default) for name, _, info, default in declared_options(command.callback.options)}
    params = {p.name: p for p in command.params}
    assert set(params) == set(declared)
    for name, (info, default) in declared.items():
        p = params[name]
        assert p.help == info.help if is_option(p) else True
        if is_option(p):
            assert set(p.opts) | set(p.secondary_opts) >= set(info.param_decls), name
            assert p.envvar == info.envvar, name
        if p.required:
            continue
        assert p.default == default or str(p.default) == str(default), name


@pytest.mark.parametrize("path, command", ALL, ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_every_numeric_option_has_a_declared_range(path, command):
    from engine.io.options import UNCHECKED_COMMANDS
    if path[0] in UNCHECKED_COMMANDS:
        return
    numeric = [p.name for p in command.params if p.type.name in ("integer", "float")]
    missing = [n for n in numeric if range_for(" ".join(path), n) is None]
    assert not missing, f"engine {' '.join(path)}: no range declared for {missing} (engine/io/options.py RANGES)"


def test_search_is_declared_by_its_options_class():
    search = dict(ALL)[("search",)]
    assert search.callback.options.__name__ == "SearchOptions"
    assert [p.name for p in search.params][:4] == ["name", "text", "image", "k"]


@dataclass(frozen=True)
class Knobs:
    depth: Annotated[int, cli(typer.Option("--depth", help="Depth."))] = 5


@dataclass(frozen=True)
class GroupedOptions:
    name: Annotated[str, cli(typer.Argument(help="Name."))]
    knobs: Knobs = Knobs()
    quiet: Annotated[bool, cli(typer.Option("--quiet", help="Quiet."))] = False


def test_a_group_of_options_is_declared_once_and_rebuilt_for_the_command():
    seen = []
    app = typer.Typer()
    app.command("a")(options_command(GroupedOptions, seen.append))
    app.command("b")(options_command(GroupedOptions, seen.append))
    assert [n for n, *_ in declared_options(GroupedOptions)] == ["name", "depth", "quiet"]
    assert CliRunner().invoke(app, ["a", "x", "--depth", "7"]).exit_code == 0
    assert CliRunner().invoke(app, ["b", "y", "--quiet"]).exit_code == 0
    assert seen == [GroupedOptions("x", Knobs(7)), GroupedOptions("y", Knobs(), True)]
