"""The `engine` command: assembles the core's and evaluation's commands and each task's, and turns errors
into one red line. The console script points here; the repository's top-level `cli.py` is a shim."""
from __future__ import annotations

import sys
from typing import Callable

import typer

from engine.core import cli as core_cli
from engine.errors import EngineError, set_option_names
from engine.eval import cli as eval_cli
from engine.tasks.dse import cli as dse_cli
from engine.tasks.eventa import cli as eventa_cli
from engine.tasks.lora import cli as lora_cli
from engine.tasks.model_ranking import cli as model_ranking_cli

TASKS = (eventa_cli, model_ranking_cli, lora_cli, dse_cli)

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                  help="Dense multimodal retrieval for shared tasks: build FAISS collections, search, "
                       "write submission files, evaluate runs with the official metrics.")
core_cli.register(app)
validate_app, convert_app = eval_cli.register(app)
for task in TASKS:
    task.register(app, validate_app, convert_app)


def flag_names(argv: list[str]) -> Callable[[str], str]:
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
    set_option_names(flag_names(sys.argv[1:]))
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


if __name__ == "__main__":
    main()
