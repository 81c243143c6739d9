"""Hardening campaigns: hypothesis runs few examples by default and many under `-m slow` (profile `slow`)."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=int(os.environ.get("ENGINE_FUZZ_EXAMPLES", "15")),
                          deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
settings.register_profile("slow", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile("default")


def pytest_configure(config) -> None:
    marks = config.getoption("markexpr", "") or ""
    if "slow" in marks and "not slow" not in marks:
        settings.load_profile("slow")
