"""`python tests/hardening/writer.py ARGS…` = `engine ARGS…` with the fake encoder (FAKE_ENCODER_DELAY seconds
per batch), for the kill, concurrency and full-disk campaigns, which need a process of their own."""
import atexit
import os
import resource
import sys
from pathlib import Path


def _shared_fixtures():
    """tests/conftest.py, loaded by its path: a child process has no pytest to load it."""
    import importlib.util
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # its `fixtures` package, as pytest finds it
    spec = importlib.util.spec_from_file_location("engine_tests_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_shared_fixtures().install_fake_encoder()
if os.environ.get("FAKE_ENCODER_REPORT_RSS"):  # benchmarks/hostile_inputs.py keeps each input's peak memory
    atexit.register(lambda: print(f"PEAK_RSS_KIB={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}",
                                  file=sys.stderr))
import engine.cli

sys.argv = ["engine", *sys.argv[1:]]
engine.cli.main()
