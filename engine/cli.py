"""The `engine` command: one typer app whose commands load lazily, and errors turned into one red line.

The root group knows each command by name and the module that declares it (`COMMANDS`); a command's module
is imported only when that command runs or a help page lists it (click's lazy-group pattern). So
`engine search` imports what search declares and needs, never the tasks, the service or the evaluation.
The console script (`engine.__main__`) and the repository's top-level `cli.py` both run `main`.
"""
from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any, Callable, Sequence

import typer
from typer.core import TyperGroup

from engine.errors import set_option_names

TASKS = ("engine.tasks.eventa", "engine.tasks.model_ranking", "engine.tasks.lora", "engine.tasks.dse")
COMMANDS: dict[str, str] = {
    "build": "engine.commands.collection:build_cmd", "search": "engine.commands.collection:search_cmd",
    "delete": "engine.commands.collection:delete_cmd", "compact": "engine.commands.collection:compact_cmd", "info": "engine.commands.collection:info_cmd",
    "verify": "engine.commands.collection:verify_cmd", "list": "engine.commands.collection:list_cmd", "bench": "engine.commands.collection:bench_cmd",
    "demo": "engine.commands.collection:demo_cmd", "models": "engine.commands.collection:models_cmd",
    "rerank": "engine.commands.rerank:rerank_app", "adapt": "engine.commands.adapt:adapt_cmd",
    "pipeline": "engine.commands.pipeline:pipeline_app", "cache": "engine.commands.cache:cache_app",
    "eval": "engine.commands.eval:eval_cmd", "metrics": "engine.commands.eval:metrics_cmd",
    "compare": "engine.commands.eval:compare_cmd", "fuse": "engine.commands.eval:fuse_cmd",
    "experiment": "engine.commands.eval:experiment_cmd",
    "validate": "engine.cli:validate_group", "convert": "engine.cli:convert_group",
    "serve": "engine.commands.serve:serve_cmd",
    "eventa": "engine.tasks.eventa.cli:eventa_app",
    "modelret-a": "engine.tasks.model_ranking.cli:modelret_a_cmd", "mllm": "engine.tasks.model_ranking.cli:mllm_cmd",
    "lora": "engine.tasks.lora.cli:lora_app", "dse": "engine.tasks.dse.cli:dse_app",
}
"""Every top-level command: its name and "module:attribute", a typer command function or a typer group."""
READS_RUNS = {"eval", "compare", "fuse"}  # may read a task's run format: import the task packages (not their CLIs)
TASK_PIPELINES = {"pipeline", "experiment", "serve"}  # may name a task's default pipeline: every task's CLI registers it
HELP = ("Dense multimodal retrieval for shared tasks: build FAISS collections, search, write submission files, "
        "evaluate runs with the official metrics.")


class LazyGroup(TyperGroup):
    """The root group: a command's module is imported the first time the command is looked up."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, name: str) -> Any:
        if name not in self.commands and name in COMMANDS:
            self.commands[name] = load_command(name)
        return self.commands.get(name)


def load_command(name: str) -> Any:
    """The click command of top-level command `name`, its options checked first (`engine.io.options`) and its
    on/off flags shown without a value."""
    if name in READS_RUNS:
        for task in TASKS:  # each registers the run format it defines
            importlib.import_module(task)
    if name in TASK_PIPELINES:
        _shared_groups()  # each task's CLI registers its default pipeline
    target = _target(name)
    holder = typer.Typer(add_completion=False)
    holder.callback()(lambda: None)  # a group, so one command is not collapsed into the root
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    check_options_first(holder)
    command = typer.main.get_command(holder).commands[name]
    show_flags_as_flags(command)
    return command


def validate_group() -> typer.Typer:
    """`engine validate`: evaluation's `run` and every task's submission format."""
    return _shared_groups()[0]


def convert_group() -> typer.Typer:
    """`engine convert`: every task's benchmark files to TREC qrels, runs and groups."""
    return _shared_groups()[1]


def _shared_groups() -> tuple[typer.Typer, typer.Typer]:
    from engine.commands import eval as eval_cli
    groups = eval_cli.register(typer.Typer())
    for task in TASKS:
        importlib.import_module(f"{task}.cli").register(typer.Typer(), *groups)
    return groups


def root_command() -> LazyGroup:
    """The `engine` click group, no command loaded yet."""
    app = typer.Typer(cls=LazyGroup, no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                      help=HELP)
    app.callback()(_root_options)
    return typer.main.get_command(app)


def build_app() -> typer.Typer:
    """The whole app as one typer app, every command loaded (tests drive it with `typer.testing.CliRunner`)."""
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False, help=HELP)
    app.callback()(_root_options)
    for name in COMMANDS:
        target = _target(name)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    check_options_first(app)
    return app


def _target(name: str) -> Any:
    """The typer command function or group that `COMMANDS` names for `name`, its module imported."""
    module, attribute = COMMANDS[name].split(":")
    target = getattr(importlib.import_module(module), attribute)
    return target() if module == "engine.cli" else target  # a group this module assembles (also run as __main__)


def check_options_first(app: typer.Typer, path: str = "") -> None:
    """Every command checks its numeric options (against the ranges its declarations carry) and output paths
    (`engine.io.options`) before its work."""
    import functools
    from engine.io.options import check_options, ranges_of
    for info in app.registered_commands:
        command = f"{path} {info.name or info.callback.__name__}".strip()
        if getattr(info.callback, "__wrapped__", None) is not None:
            continue

        def checked(*args, __f=info.callback, __name=command, __ranges=ranges_of(info.callback), **kwargs) -> None:
            __f(*args, **check_options(__name, kwargs, __ranges))  # nothing returned: main() exits 0
        info.callback = functools.wraps(info.callback)(checked)
    for group in app.registered_groups:
        check_options_first(group.typer_instance, f"{path} {group.name}".strip())


def _show_version(value: bool) -> None:
    if value:
        from engine import __version__
        typer.echo(f"engine {__version__}")
        raise typer.Exit()


def _root_options(version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                                        help="Print the engine's version and exit.")] = False
                  ) -> None:
    """Dense multimodal retrieval for shared tasks: build FAISS collections, search, write submission files,
    evaluate runs with the official metrics."""


def show_flags_as_flags(command: Any) -> None:
    """On/off options show no value in --help (typer writes `<bool>` after them, as if they took one)."""
    def flag(param):
        if param is not None and getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        return param

    for param in getattr(command, "params", []):
        flag(param)
    help_option = command.get_help_option
    command.get_help_option = lambda ctx: flag(help_option(ctx))
    for sub in getattr(command, "commands", {}).values():
        show_flags_as_flags(sub)


def flag_names(command: Any, argv: Sequence[str]) -> Callable[[str], str]:
    """Option name → its flag in the command `argv` invokes (`batch_size` → `--batch-size`), for messages."""
    for word in argv:
        sub = command.get_command(None, word) if hasattr(command, "get_command") else None
        if sub is None:
            break
        command = sub
    flags = {p.name: max(p.opts, key=len) for p in getattr(command, "params", []) if getattr(p, "opts", None)}
    return lambda name: flags.get(name, "--" + name.replace("_", "-"))


def main() -> None:
    """Console-script entry: user errors become one red line and exit code 2, never a traceback."""
    from engine.progress import error_line, one_line_errors, quiet_libraries, set_quiet
    quiet_libraries()
    from engine.core.cluster import bare_ray_flag
    argv = sys.argv[1:] = bare_ray_flag(sys.argv[1:])
    command = root_command()
    try:
        with one_line_errors():
            from engine.errors import check_arguments
            check_arguments(argv)
            set_option_names(flag_names(command, argv))
            try:
                sys.exit(command(standalone_mode=False) or 0)  # commands return None; click's Exit returns its code
            except typer.TyperException as exc:  # click's own refusals (a word for a number, a missing option)
                if type(exc).__name__ == "NoArgsIsHelpError" or not hasattr(exc, "format_message"):
                    exc.show()  # `engine eventa` alone: the group's help
                    sys.exit(exc.exit_code)
                ctx = getattr(exc, "ctx", None)
                where = f" (`{ctx.command_path} --help` lists the options)" if ctx is not None else ""
                error_line(exc.format_message() + where)
                sys.exit(exc.exit_code)
            except typer.Abort:
                raise KeyboardInterrupt from None
    finally:
        set_option_names(str)
        set_quiet(False)  # a command's --quiet ends with it (in-process callers run several)


def __getattr__(name: str) -> typer.Typer:
    """`engine.cli.app`: the whole app, every task included (for tests, docs and `python cli.py`)."""
    if name == "app":
        app = globals()["app"] = build_app()
        return app
    raise AttributeError(f"module 'engine.cli' has no attribute {name!r}")


if __name__ == "__main__":
    main()
