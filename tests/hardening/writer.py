"""`python tests/hardening/writer.py ARGS…` = `engine ARGS…` with the fake encoder (FAKE_ENCODER_DELAY seconds
per batch), for the kill, concurrency and full-disk campaigns, which need a process of their own."""
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from hardening import fake  # noqa: E402

fake.install()
import engine.cli  # noqa: E402

sys.argv = ["engine", *sys.argv[1:]]
engine.cli.main()
