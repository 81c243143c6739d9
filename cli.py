"""The design card's entry point, kept as a shim: `python cli.py …` runs the `engine` command
(the console script itself points at `engine.__main__:main`)."""
from engine.__main__ import main
from engine.cli import app

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
