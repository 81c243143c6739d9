"""The `engine` console script and `python -m engine`: `engine.cli.main`, whose commands load lazily."""
from engine.cli import main

if __name__ == "__main__":
    main()
