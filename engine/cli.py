"""The `engine` command: assembles the core's and evaluation's commands and each task's, and turns errors
into one red line. The console script points here; the repository's top-level `cli.py` is a shim.

A core command (`engine search …`) assembles only the core and evaluation: the tasks' modules are imported
when a command may need them, which keeps a query's start-up free of every task's options and models.
"""
from __future__ import annotations

import gc
import importlib
import sys
from typing import Annotated, Callable, Sequence

import typer

from engine.errors import set_option_names

TASKS = ("engine.tasks.eventa", "engine.tasks.model_ranking", "engine.tasks.lora", "engine.tasks.dse")
CORE_ONLY = {"build", "search", "delete", "compact", "info", "verify", "list", "bench", "demo", "models", "metrics", "eval", "compare",
             "fuse", "serve", "rerank", "adapt"}
READS_RUNS = {"eval", "compare", "fuse"}  # may read a task's run format: import the task packages (not their CLIs)


def build_app(tasks: Sequence[str] = TASKS, only: str | None = None) -> typer.Typer:
    """The app with the core and evaluation commands and those of `tasks` (package names); with `only`, a
    core command's name, that command alone (a query's start-up assembles no other command's options)."""
    from engine.core import cli as core_cli
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                      help="Dense multimodal retrieval for shared tasks: build FAISS collections, search, "
                           "write submission files, evaluate runs with the official metrics.")
    app.callback()(_root_options)
    if only in core_cli.COMMANDS:
        app.command(only)(core_cli.COMMANDS[only])
        check_options_first(app)
        return app
    from engine.eval import cli as eval_cli
    from engine.serve import cli as serve_cli
    core_cli.register(app)
    from engine.core.adapters import cli as adapt_cli
    from engine.core.rerankers import cli as rerank_cli
    from engine.core.pipeline import cli as pipeline_cli
    rerank_cli.register(app)
    adapt_cli.register(app)
    pipeline_cli.register(app)
    validate, convert = eval_cli.register(app)
    serve_cli.register(app)
    for task in tasks:
        importlib.import_module(f"{task}.cli").register(app, validate, convert)
    check_options_first(app)
    return app


def check_options_first(app: typer.Typer, path: str = "") -> None:
    """Every command checks its numeric options and output paths (`engine.io.options`) before its work."""
    import functools
    from engine.io.options import check_options
    for info in app.registered_commands:
        command = f"{path} {info.name or info.callback.__name__}".strip()
        if getattr(info.callback, "__wrapped__", None) is not None:
            continue

        def checked(*args, __f=info.callback, __name=command, **kwargs) -> None:
            __f(*args, **check_options(__name, kwargs))  # nothing returned: main() exits 0
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


def show_flags_as_flags(command) -> None:
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


def tasks_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The task packages a command line may need: none for a core command (`eval` only imports the task
    packages themselves, which register the run formats they define), all for anything else."""
    if argv and argv[0] in CORE_ONLY:
        if argv[0] in READS_RUNS:
            for task in TASKS:
                importlib.import_module(task)
        return ()
    return TASKS


def flag_names(app: typer.Typer | typer.main.TyperGroup, argv: Sequence[str]) -> Callable[[str], str]:
    """Option name → its flag in the command `argv` invokes (`batch_size` → `--batch-size`), for messages."""
    command = typer.main.get_command(app) if isinstance(app, typer.Typer) else app
    for word in argv:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command = sub
    flags = {p.name: max(p.opts, key=len) for p in getattr(command, "params", []) if getattr(p, "opts", None)}
    return lambda name: flags.get(name, "--" + name.replace("_", "-"))


def main() -> None:
    """Console-script entry: user errors become one red line and exit code 2, never a traceback."""
    gc.disable()  # the command's modules and its click tree: objects that live for the whole run
    from engine.progress import quiet_libraries
    quiet_libraries()
    try:
        from engine.core.cli import bare_ray_flag
        argv = sys.argv[1:] = bare_ray_flag(sys.argv[1:])
        command = typer.main.get_command(build_app(tasks_for(argv), only=argv[0] if argv else None))
        show_flags_as_flags(command)
        set_option_names(flag_names(command, argv))
        if argv and argv[0] in getattr(command, "commands", {}):
            from engine.cached_args import save_shape
            save_shape(argv[0], command.commands[argv[0]])  # the next plain `engine search` skips typer
    finally:  # what start-up made is not scanned again while the command runs with collections on: ≈ 15 ms
        gc.freeze()  # of a cold query's 0.4 s went to collections that found nothing to free
        gc.enable()
    from engine.progress import error_line, one_line_errors
    try:
        with one_line_errors():
            from engine.errors import check_arguments
            check_arguments(argv)
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
        gc.unfreeze()  # a caller that goes on (a test, a script calling main) collects as before


def __getattr__(name: str) -> typer.Typer:
    """`engine.cli.app`: the whole app, every task included (for tests, docs and `python cli.py`)."""
    if name == "app":
        app = globals()["app"] = build_app()
        return app
    raise AttributeError(f"module 'engine.cli' has no attribute {name!r}")


if __name__ == "__main__":
    main()
