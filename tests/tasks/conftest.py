"""Fixtures the task tests share."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fixtures.dse_synthetic import generate, write_corpus


@pytest.fixture(scope="session")
def dse_corpus(tmp_path_factory):
    """A generated DSEBench corpus (150 records, 20 cases) and the root of its index `synth`, built once by
    `engine dse build`: (the corpus files, the root)."""
    from engine.cli import app
    out = tmp_path_factory.mktemp("dsecorpus")
    paths = write_corpus(generate(n_records=150, n_cases=20, n_train_cases=3, multi_example=0.3, seed=11), out)
    root = out / "indexes"
    result = CliRunner().invoke(app, ["dse", "build", "--datasets", str(paths["datasets"]), "--name", "synth",
                                      "--root", str(root), "--quiet"])
    assert result.exit_code == 0, result.output
    return paths, root
