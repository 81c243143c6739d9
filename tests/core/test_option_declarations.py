"""Each option is declared once: a command built from an options dataclass (`engine.io.options.options_command`)
shows on the command line exactly the flags, help, defaults and env vars its fields declare, and every numeric
option of every command has its range declared in `engine.io.options`."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from engine.cli import COMMANDS, root_command
from engine.io.options import cli, declared_options, options_command, ranges_of


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
    missing = [n for n in numeric if n not in ranges_of(command.callback)]
    assert not missing, f"engine {' '.join(path)}: no range declared for {missing} (a Range beside the declaration)"


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


# ---------------------------------------------------------------- one range per option, beside its declaration

STAGE_KEYWORDS = {
    # (command, option) → the pipeline stages that take the same option, as (expression with {v}, keyword)
    ("search", "k"): [('retrieve("docs", k={v})', "k"), ('score("docs", k={v})', "k"), ('retrieve("docs") % {v}', "k")],
    ("pipeline", "run", "k"): [('retrieve("docs", k={v})', "k"), ('retrieve("docs") % {v}', "k")],
    ("fuse", "k"): [('fuse(retrieve("a"), retrieve("b"), k={v})', "k")],
    ("fuse", "depth"): [('fuse(retrieve("a"), retrieve("b"), depth={v})', "depth")],
    ("fuse", "weights"): [('fuse(retrieve("a"), retrieve("b"), method="wsum", weights=[{v}, 1])', "weights")],
    ("rerank", "run", "depth"): [('retrieve("a") >> rerank("cross:m", depth={v})', "depth")],
    ("search", "rerank_depth"): [('retrieve("a") >> rerank("cross:m", depth={v})', "depth")],
    ("eventa", "submit", "rerank_depth"): [('retrieve("a") >> rerank("cross:m", depth={v})', "depth")],
    ("dse", "submit", "rerank_depth"): [('retrieve("a") >> rerank("cross:m", depth={v})', "depth")],
    ("search", "rerank_rounds"): [('retrieve("a") >> rerank("llm-list:m", rounds={v})', "rounds")],
    ("rerank", "run", "rerank_rounds"): [('retrieve("a") >> rerank("llm-list:m", rounds={v})', "rounds")],
}


def _edges(r):
    """(accepted, refused) values at each declared bound of the range `r`."""
    step = 1 if r.integer else 0.5
    ok = [v for v in (r.lo, r.hi) if v is not None and not (r.open_lo and v == r.lo)]
    bad = ([r.lo - step] if r.lo is not None else []) + ([r.hi + step] if r.hi is not None else [])
    cast = int if r.integer else float
    return [cast(v) for v in ok], [cast(v) for v in bad]


@pytest.mark.parametrize("key", list(STAGE_KEYWORDS), ids=lambda k: " ".join(k))
def test_a_flag_and_the_stage_keyword_of_the_same_option_have_one_range(key):
    """The flag's declared range is the stage keyword's: both accept its bounds and refuse one step past them,
    each in one line naming the option as its user wrote it (the flag; the stage and keyword)."""
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.errors import EngineError
    from engine.io.options import check_options
    *path, name = key
    r = ranges_of(dict(ALL)[tuple(path)].callback)[name]
    ok, bad = _edges(r)
    assert ok and bad
    for v in ok:
        check_options(" ".join(path), {name: v}, {name: r})
    for v in bad:
        with pytest.raises(EngineError, match=rf"^{name} must be"):  # the flag, as the command line shows it
            check_options(" ".join(path), {name: v}, {name: r})
    for text, keyword in STAGE_KEYWORDS[key]:
        for v in ok:
            parse_pipeline(text.format(v=v))
        for v in bad:
            with pytest.raises(EngineError) as err:
                parse_pipeline(text.format(v=v))
            assert f"{keyword} must be" in str(err.value) and "\n" not in str(err.value), (text, v, err.value)


def test_engine_io_options_names_no_task_option():
    """The bottom layer declares the engine-wide ranges (k, depth, batch size, seed…); a task's options and their
    ranges live in the task."""
    from pathlib import Path
    import engine.io.options as io_options
    text = Path(io_options.__file__).read_text(encoding="utf-8").lower()
    named = {"eventa", "dse", "dsebench", "lora", "mllm", "modelret", "passage", "article", "caption",
             "max_texts", "prior_weight", "temperature", "text_weight", "rerank_rounds", "rerank_depth"}
    found = sorted(w for w in named if re.search(rf"\b{w}", text))
    assert not found, f"engine/io/options.py names task or reranker options: {found}"
    assert not hasattr(io_options, "RANGES") and not hasattr(io_options, "PER_COMMAND")
