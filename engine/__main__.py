"""The `engine` console script and `python -m engine`: a plain `engine search` line runs from its cached
argument shape without typer (engine.cached_args); every other line goes to `engine.cli.main`."""
from __future__ import annotations

import gc
import sys


def main() -> None:
    gc.disable()  # start-up makes objects that live until exit: no cycle collections while they are made
    from engine.cached_args import cached_call
    try:
        "\0".join(sys.argv[1:]).encode("utf-8")
        call = cached_call(sys.argv[1:])
    except UnicodeEncodeError:
        call = None  # a word that is not UTF-8: the full command line names it in one line
    if call is None:
        from engine.cli import main as typer_main
        typer_main()  # collections back on (start-up frozen) before its command runs
        return
    from engine.progress import quiet_libraries
    quiet_libraries()
    gc.freeze()  # what start-up made is not scanned again while the query runs with collections on
    gc.enable()
    call()


if __name__ == "__main__":
    main()
