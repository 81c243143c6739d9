"""The limits: documented (docs/limits.md is their table), adjustable by environment, and refused when nonsense."""
from __future__ import annotations

import re

import pytest

from engine.errors import EngineError
from engine.io.limits import LIMITS, limit, markdown


def test_docs_table_is_current(repo):
    text = (repo / "docs" / "limits.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- limits:begin -->\n(.*?)\n<!-- limits:end -->", text, re.DOTALL)
    assert m and m.group(1) == markdown(), "docs/limits.md is stale: replace its table with `python -m engine.io.limits`"


def test_limits_are_adjustable_and_checked(monkeypatch):
    for lim in LIMITS.values():
        assert lim.env == "ENGINE_" + lim.name.upper() and limit(lim.name) == lim.default
    monkeypatch.setenv("ENGINE_MAX_GRADE", "1000")
    assert limit("max_grade") == 1000
    for bad in ("lots", "-5", "0"):
        monkeypatch.setenv("ENGINE_MAX_GRADE", bad)
        with pytest.raises(EngineError, match="ENGINE_MAX_GRADE"):
            limit("max_grade")
