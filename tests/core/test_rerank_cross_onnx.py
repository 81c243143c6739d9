"""`cross:` on onnxruntime on a CPU: the export's logits equal sentence-transformers' `CrossEncoder.predict`
(identity activation) and give the same order, pairs truncated as the tokenizer does; a process that finds the
export scores without importing torch; `ENGINE_ONNX=0` keeps torch."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
QUERY = "a dog playing on the beach"
DOCS = ["a puppy at the seaside", "tax law reform", "x", "long " * 300, "dogs running in the sand by the sea",
        "Émigré café, naïve résumé", "a cat indoors", "the history of the Roman empire"]


def reference(folder, query, docs) -> np.ndarray:
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import CrossEncoder
    ce = CrossEncoder(str(folder), device="cpu")
    return np.asarray(ce.predict([(query, d) for d in docs], batch_size=32, activation_fn=torch.nn.Identity()),
                      dtype=np.float64)


@pytest.fixture()
def onnx_ready():
    from engine.core.encoders.onnx_text import available
    if not available():
        pytest.skip("onnxruntime is not installed")


@pytest.mark.parametrize("fixture", ["tiny_cross", "tiny_cross_large"])
def test_onnx_cross_encoder_order_equals_sentence_transformers(fixture, request, onnx_ready):
    from engine.core.ranking.rerankers.spec import load_reranker
    folder = request.getfixturevalue(fixture)
    reranker = load_reranker(f"cross:{folder}")
    assert reranker.info["runtime"] == "onnx"
    got = reranker.score(QUERY, DOCS)
    want = reference(folder, QUERY, DOCS)
    assert np.ptp(want) > 0
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)
    assert list(np.argsort(-got, kind="stable")) == list(np.argsort(-want, kind="stable"))


def test_a_process_with_the_export_scores_without_torch(tiny_cross, onnx_ready, tmp_path):
    from engine.core.ranking.rerankers.spec import load_reranker
    load_reranker(f"cross:{tiny_cross}")  # exported into this session's cache
    code = ("import sys\nfrom engine.core.ranking.rerankers.spec import load_reranker\n"
            f"r = load_reranker('cross:{tiny_cross}')\nprint(r.info['runtime'], r.score('a dog', ['a puppy', 'tax']).shape)\n"
            "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout.split("\n")
    assert out[0] == "onnx (2,)" and out[1] == "[]", out
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO), "ENGINE_ONNX": "0"}).stdout.split("\n")
    assert off[0] == "torch (2,)" and "torch" in off[1], off
