"""Commands that compute nothing with a model never import one: `--help`, option errors, `info`, `list`,
`verify`, `eval`, `validate`, `compare`, `fuse` each run in a fresh process and leave torch, transformers,
sentence-transformers, open_clip and Ray out of `sys.modules` (each costs seconds of a user's wait)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

HEAVY = ("torch", "transformers", "sentence_transformers", "open_clip", "ray", "torchvision")
_PROBE = ("import sys, runpy\nsys.argv = ['engine', *sys.argv[1:]]\n"
          "try:\n    runpy.run_module('engine.cli', run_name='__main__')\nexcept SystemExit as exc:\n"
          "    code = exc.code\nelse:\n    code = 0\n"
          f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules), 'EXIT', code)")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A collection (vectors only, an sbert spec that is never loaded), two runs and their qrels."""
    from engine.core.collection import Collection
    root = tmp_path_factory.mktemp("lazy")
    x = np.random.default_rng(0).normal(size=(12, 8)).astype(np.float32)
    Collection.from_vectors("t", [f"d{i}" for i in range(12)], x, "sbert:all-MiniLM-L6-v2", "text", root=root)
    for name, start in (("a", 0), ("b", 4)):
        (root / name).write_text("".join(f"q{q} Q0 d{i} {r + 1} {1 / (r + 1):.3f} {name}\n" for q in (1, 2)
                                         for r, i in enumerate(range(start + q, start + q + 6))))
    (root / "qrels").write_text("q1 0 d3 1\nq1 0 d6 1\nq2 0 d4 1\n")
    return root


COMMANDS = {
    "help": ["--help"],
    "build-help": ["build", "--help"],
    "search-help": ["search", "--help"],
    "task-help": ["modelret-a", "--help"],
    "pipeline-help": ["pipeline", "--help"],
    "compact-nothing": ["compact", "t", "--root", "{root}"],
    "option-error": ["build", "t", "--texts", "x.csv", "--batch-size", "0", "--root", "{root}"],
    "search-option-error": ["search", "t", "a dog", "-k", "0", "--root", "{root}"],
    "where-error": ["search", "t", "a dog", "--where", "year =", "--root", "{root}"],
    "info": ["info", "t", "--root", "{root}"],
    "list": ["list", "--root", "{root}"],
    "verify": ["verify", "t", "--root", "{root}"],
    "eval": ["eval", "{root}/a", "{root}/qrels"],
    "validate": ["validate", "run", "{root}/a"],
    "compare": ["compare", "{root}/qrels", "{root}/a", "{root}/b"],
    "fuse": ["fuse", "{root}/a", "{root}/b", "--out", "{root}/fused"],
}
EXPECTED_EXIT = {"option-error": 2, "search-option-error": 2, "where-error": 2}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_imports_no_heavy_library(repo, files, name):
    args = [a.format(root=files) for a in COMMANDS[name]]
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(repo)}, timeout=120)
    last = out.stdout.strip().splitlines()[-1]
    assert last == f"HEAVY [] EXIT {EXPECTED_EXIT.get(name, 0)}", (last, out.stderr[-500:])
    assert "Traceback" not in out.stderr


def test_a_status_line_or_a_warning_imports_no_display_library():
    """`info` and `warn` print plain lines (a `[tag]` kept as it is); rich loads only for bars and tables."""
    probe = ("import sys\nfrom engine.progress import info, warn\ninfo('deleted 3 items from [news]')\n"
             "warn('2 ids are not in [news]')\nprint('RICH', 'rich' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "NO_COLOR": "1"})
    assert out.stdout.strip() == "RICH False"
    assert out.stderr == "deleted 3 items from [news]\nwarning: 2 ids are not in [news]\n"
