"""The `engine` command: assembles the core's and evaluation's commands and each task's, and turns errors
into one red line. The console script points here; the repository's top-level `cli.py` is a shim.

A core command (`engine search …`) assembles only the core and evaluation: the tasks' modules are imported
when a command may need them, which keeps a query's start-up free of every task's options and models.
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable, Sequence

import typer

from engine.errors import EngineError, set_option_names

TASKS = ("engine.tasks.eventa", "engine.tasks.model_ranking", "engine.tasks.lora", "engine.tasks.dse")
CORE_ONLY = {"build", "search", "info", "list", "bench", "demo", "models", "metrics", "eval", "compare", "fuse",
             "serve"}
READS_RUNS = {"eval", "compare", "fuse"}  # may read a task's run format: import the task packages (not their CLIs)


def build_app(tasks: Sequence[str] = TASKS) -> typer.Typer:
    """The app with the core and evaluation commands and those of `tasks` (package names)."""
    from engine.core import cli as core_cli
    from engine.eval import cli as eval_cli
    from engine.serve import cli as serve_cli
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                      help="Dense multimodal retrieval for shared tasks: build FAISS collections, search, "
                           "write submission files, evaluate runs with the official metrics.")
    core_cli.register(app)
    validate, convert = eval_cli.register(app)
    serve_cli.register(app)
    for task in tasks:
        importlib.import_module(f"{task}.cli").register(app, validate, convert)
    return app


def tasks_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The task packages a command line may need: none for a core command (`eval` only imports the task
    packages themselves, which register the run formats they define), all for anything else."""
    if argv and argv[0] in CORE_ONLY:
        if argv[0] in READS_RUNS:
            for task in TASKS:
                importlib.import_module(task)
        return ()
    return TASKS


def flag_names(app: typer.Typer, argv: Sequence[str]) -> Callable[[str], str]:
    """Option name → its flag in the command `argv` invokes (`batch_size` → `--batch-size`), for messages."""
    command = typer.main.get_command(app)
    for word in argv:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command = sub
    flags = {p.name: max(p.opts, key=len) for p in getattr(command, "params", []) if getattr(p, "opts", None)}
    return lambda name: flags.get(name, "--" + name.replace("_", "-"))


def main() -> None:
    """Console-script entry: user errors become one red line and exit code 2, never a traceback."""
    from engine.core.cli import bare_ray_flag
    argv = sys.argv[1:] = bare_ray_flag(sys.argv[1:])
    app = build_app(tasks_for(argv))
    set_option_names(flag_names(app, argv))
    try:
        app()
    except EngineError as exc:
        from engine.progress import console
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True, markup=True)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        set_option_names(str)


def __getattr__(name: str) -> typer.Typer:
    """`engine.cli.app`: the whole app, every task included (for tests, docs and `python cli.py`)."""
    if name == "app":
        app = globals()["app"] = build_app()
        return app
    raise AttributeError(f"module 'engine.cli' has no attribute {name!r}")


if __name__ == "__main__":
    main()
