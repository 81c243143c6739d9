"""A service batch of queries of mixed token lengths runs in length groups (onnx_text.length_groups): every
row once, never more padded tokens than one pass, and each text embedded as it would be alone."""
from __future__ import annotations

import numpy as np


def test_length_groups_cover_every_row_once_and_pay_off():
    from engine.core.encoders.onnx_text import CALL_TOKENS, length_groups
    rng = np.random.default_rng(0)
    for n in (1, 2, 8, 32, 200):
        lengths = rng.integers(5, 15, n)
        groups = length_groups(lengths)
        assert sorted(int(r) for rows, _ in groups for r in rows) == list(range(n))
        assert all(width == lengths[rows].max() for rows, width in groups)
        cost = sum(len(rows) * width + CALL_TOKENS for rows, width in groups)
        assert cost <= n * lengths.max() + CALL_TOKENS  # never worse than one padded pass
    assert len(length_groups(np.array([7, 7, 8]))) == 1  # similar lengths: one pass


def test_a_batch_of_mixed_lengths_embeds_as_each_text_alone():
    from engine.core.encoders.registry import load_text_query_encoder
    enc = load_text_query_encoder("sbert:all-MiniLM-L6-v2")
    texts = ["a dog", "a plate of pasta on a busy road with a sailing boat", "two cats in the rain", "x",
             "an old man next to a window with a child", "a train"]
    together = enc.encode_texts(texts, batch_size=len(texts))
    alone = np.concatenate([enc.encode_texts([t], batch_size=1) for t in texts])
    assert np.abs(together - alone).max() < 1e-5
