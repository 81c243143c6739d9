"""Long texts through short-window encoders: split into sentences, encode each, pool.

News captions run to ~116 words (median) while CLIP's text tower reads 77 tokens and MiniLM 256
word pieces; encoding the whole text silently drops its end. Sentences (long ones cut into word
windows that fit) are encoded one by one and pooled, either into one vector (`mean`: the
re-normalized mean, FAISS-friendly) or at scoring time (`max`: a document scores its best
sentence match). `full` encodes the text as one string and lets the model truncate it. `auto` encodes a
text that fits the window whole (as `full`, nothing is cut) and one that does not sentence by sentence,
scored by its best sentence (as `max`): it differs from truncation only where truncation drops words.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.core.encoders.base import l2_normalize
from engine.errors import EngineError

POOLINGS = ("mean", "max", "full", "auto")
# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) before a space and an
# upper-case letter, digit or opening quote; "Dr. Smith" and "U.S. officials" split wrongly, which
# only costs a shorter sentence.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'”’)\]]))\s+(?=[\"'“‘(\[]?[A-Z0-9])")
WORDS_PER_TOKEN = 1.4  # word pieces per English word, rounded up: window sizes are set in words


def words_for(encoder) -> int:
    """How many words fit an encoder's text window (50 when it does not say)."""
    limit = int(getattr(encoder, "info", {}).get("max_seq_length") or 0)
    return max(8, int((limit - 2) / WORDS_PER_TOKEN)) if limit else 50


def split_sentences(text: str, max_words: int = 50) -> list[str]:
    """Sentences of `text`; one longer than `max_words` is cut into consecutive windows of that size."""
    if max_words < 1:
        raise EngineError(f"max_words must be at least 1, not {max_words}")
    out: list[str] = []
    for block in re.split(r"\n\s*\n|\n", text or ""):
        for sentence in _SENTENCE_END.split(block.strip()):
            words = sentence.split()
            for start in range(0, len(words), max_words):
                out.append(" ".join(words[start:start + max_words]))
    return [s for s in out if s]


def pack_passages(text: str, max_words: int = 150, prefix: str = "") -> list[str]:
    """Whole sentences packed into passages of at most `max_words` words, each led by `prefix` (a title)."""
    budget = max(8, max_words - len(prefix.split()))
    passages, current, size = [], [], 0
    for sentence in split_sentences(text, budget):
        n = len(sentence.split())
        if current and size + n > budget:
            passages.append(" ".join(current))
            current, size = [], 0
        current.append(sentence)
        size += n
    if current:
        passages.append(" ".join(current))
    if not passages:
        passages = [""]
    return [f"{prefix}\n{p}".strip() if prefix else p for p in passages]


@dataclass
class SentenceVectors:
    """Per-sentence vectors of a batch of texts: row i belongs to text `owner[i]`."""
    vectors: np.ndarray
    owner: np.ndarray
    n_texts: int

    def pooled(self) -> np.ndarray:
        """One L2-normalized mean vector per text."""
        sums = np.zeros((self.n_texts, self.vectors.shape[1]), dtype=np.float64)
        np.add.at(sums, self.owner, self.vectors)
        return l2_normalize(sums)

    def rows_of(self, text_index: int) -> np.ndarray:
        return self.vectors[self.owner == text_index]


def encode_sentences(encoder, texts: Sequence[str], max_words: int | None = None,
                     batch_size: int = 64) -> SentenceVectors:
    """Encode every sentence of every text in one batched pass (a text with no words gets one empty sentence)."""
    max_words = max_words or words_for(encoder)
    sentences, owner = [], []
    for i, text in enumerate(texts):
        parts = split_sentences(text, max_words) or [""]
        sentences += parts
        owner += [i] * len(parts)
    vectors = encoder.encode_texts(sentences, batch_size=batch_size)
    return SentenceVectors(vectors, np.asarray(owner, dtype=np.int64), len(texts))


def fits(encoder, text: str) -> bool:
    """Whether the encoder reads all of `text` (its word count within the window `words_for` estimates)."""
    return len((text or "").split()) <= words_for(encoder)


def encode_queries(encoder, texts: Sequence[str], pooling: str = "mean", batch_size: int = 64) -> SentenceVectors:
    """Query vectors for a pooling: `full` gives one (possibly truncated) vector per text, `mean` and `max`
    one per sentence (pool them with `.pooled()` for `mean`, score the best row for `max`), `auto` one per
    text that `fits` and one per sentence of the others (scored by the best row)."""
    if pooling not in POOLINGS:
        raise EngineError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
    if pooling == "full":
        vectors = encoder.encode_texts(list(texts), batch_size=batch_size)
        return SentenceVectors(vectors, np.arange(len(texts), dtype=np.int64), len(texts))
    if pooling == "auto":
        return _encode_auto(encoder, texts, batch_size)
    return encode_sentences(encoder, texts, batch_size=batch_size)


def _encode_auto(encoder, texts: Sequence[str], batch_size: int) -> SentenceVectors:
    """Whole vectors of the texts that fit, sentence vectors of the others, in one batched pass."""
    max_words = words_for(encoder)
    parts, owner = [], []
    for i, text in enumerate(texts):
        pieces = [text] if fits(encoder, text) else (split_sentences(text, max_words) or [""])
        parts += pieces
        owner += [i] * len(pieces)
    vectors = encoder.encode_texts(parts, batch_size=batch_size)
    return SentenceVectors(vectors, np.asarray(owner, dtype=np.int64), len(texts))


def similarity(sv: SentenceVectors, text_index: int, docs: np.ndarray, pooling: str) -> np.ndarray:
    """Cosine of one text against doc vectors (rows): best row for `max` and `auto`, the pooled vector for
    `mean`, the one vector for `full`."""
    rows = sv.rows_of(text_index)
    if len(docs) == 0:
        return np.zeros(0, dtype=np.float32)
    sims = np.asarray(docs, dtype=np.float32) @ rows.T
    if pooling in ("max", "auto"):
        return sims.max(axis=1)
    if pooling == "full":
        return sims[:, 0]
    mean = rows.mean(axis=0)
    mean /= max(float(np.linalg.norm(mean)), 1e-12)
    return np.asarray(docs, dtype=np.float32) @ mean
