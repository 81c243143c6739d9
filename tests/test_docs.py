"""Tables in the docs are generated from the registries they describe: a stale one fails here with the
command that prints the fresh table."""
from __future__ import annotations

import re

import pytest

from conftest import REPO
from engine.core.encoders.registry import model_table
from engine.display import format_table
from engine.eval.metrics import metric_table
from engine.eval.profiles import PROFILES


def block(path, name: str) -> str:
    text = (REPO / path).read_text(encoding="utf-8")
    m = re.search(rf"<!-- {name}:begin[^\n]*-->\n(.*?)\n<!-- {name}:end -->", text, re.S)
    assert m, f"{path} has no {name} block"
    return m.group(1)


@pytest.mark.parametrize("path,name,table,command", [
    ("README.md", "models", lambda: model_table(), "engine models --markdown"),
    ("docs/eval.md", "metrics", lambda: metric_table(), "engine metrics --markdown"),
    ("docs/eval.md", "profiles", lambda: (["profile", "metrics", "rules"],
                                         [[f"`{p.name}`", f"`{p.metrics}`", p.help] for p in PROFILES.values()]),
     "engine metrics --markdown"),
])
def test_generated_tables_are_current(path, name, table, command):
    assert block(path, name) == format_table(*table(), markdown=True, left=3), \
        f"the {name} table in {path} is stale: replace it with the output of `{command}`"
