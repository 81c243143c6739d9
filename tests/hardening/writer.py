"""`python tests/hardening/writer.py ARGS…` = `engine ARGS…` with the fake encoder (FAKE_ENCODER_DELAY seconds
per batch), for the kill, concurrency and full-disk campaigns, which need a process of their own."""
import atexit
import os
import resource
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from hardening import fake

fake.install()
if os.environ.get("FAKE_ENCODER_REPORT_RSS"):  # benchmarks/hostile_inputs.py keeps each input's peak memory
    atexit.register(lambda: print(f"PEAK_RSS_KIB={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}",
                                  file=sys.stderr))
import engine.cli

sys.argv = ["engine", *sys.argv[1:]]
engine.cli.main()
