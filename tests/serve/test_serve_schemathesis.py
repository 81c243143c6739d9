"""Schemathesis over /openapi.json against a live server: every operation (`/search/batch` included), cases
from the schema and cases that break it, each response checked against what the schema documents (status
codes, content types, bodies) and never a 5xx. Slow: a fixed seed and a bounded number of examples.

`positive_data_acceptance` is left out: a request valid by the schema may still be refused for what the
schema cannot say per collection (a vector of the wrong dimension, a text for an image-only collection, an
unknown item id); those refusals are documented 4xx."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from schemathesis.checks import positive_data_acceptance

from engine.serve.options import ServeOptions
from engine.serve.server import running

EXAMPLES = 25


@pytest.mark.slow
def test_every_operation_answers_as_its_schema_says(served_root):
    import httpx
    from schemathesis import GenerationMode
    with running(ServeOptions(root=served_root)) as url:
        schema = schemathesis.openapi.from_dict(httpx.get(url + "/openapi.json").json())
        seen = []
        for result in schema.get_all_operations():
            operation = result.ok()
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck))
                @given(case=operation.as_strategy(generation_mode=mode))
                def check(case):
                    response = case.call_and_validate(base_url=url, excluded_checks=[positive_data_acceptance])
                    seen.append((operation.path, response.status_code))
                try:
                    check()
                except Unsatisfiable:  # nothing to break in an operation without parameters or body
                    assert mode is GenerationMode.NEGATIVE
        paths = {p for p, _ in seen}
        assert {"/search", "/search/batch", "/collections/{collection}", "/items/{collection}/{item_id}"} <= paths
        assert not [s for _, s in seen if s >= 500]
        from collections import Counter
        print(sorted(Counter(seen).items()))  # the tally (pytest -s)
