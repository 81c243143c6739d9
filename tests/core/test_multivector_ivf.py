"""The multi-vector index's token-level inverted file (PLAID's candidate generation): its recall of the exact
MaxSim top 10 on a structured token set, checked against brute-force MaxSim written here in numpy; indexes
built before it existed keep opening; its settings' ranges refused in one line."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.core.storage.index.multivector import IVF_ARRAYS, META_FILE, FdeSettings, MultiVectorIndex
from engine.errors import EngineError

DIM = 64


def structured_sets(n_docs: int = 3000, n_queries: int = 40, seed: int = 0):
    """Token vectors with the structure of a trained late-interaction model's: a Zipf-drawn vocabulary of fixed
    unit vectors ("words"), each occurrence moved by context noise of half its length; queries are runs of 3–5
    words of random documents, with their own noise."""
    rng = np.random.default_rng(seed)
    vocab = rng.standard_normal((600, DIM)).astype(np.float32)
    vocab /= np.linalg.norm(vocab, axis=1, keepdims=True)
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    p /= p.sum()

    def vectors(words: np.ndarray) -> np.ndarray:
        v = vocab[words] + 0.5 * rng.standard_normal((len(words), DIM)).astype(np.float32) / np.sqrt(DIM)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    words = [rng.choice(len(vocab), size=int(rng.integers(6, 17)), p=p) for _ in range(n_docs)]
    docs = [vectors(w) for w in words]
    queries = []
    for d in rng.integers(0, n_docs, size=n_queries):
        start = int(rng.integers(0, len(words[d]) - 5))
        queries.append(vectors(words[d][start:start + int(rng.integers(3, 6))]))
    return docs, queries


def brute_maxsim(query: np.ndarray, docs) -> np.ndarray:
    """MaxSim over every document, one document at a time: Σ over query tokens of the best document token."""
    return np.array([(query @ d.T).max(axis=1).sum() for d in docs])


@pytest.fixture(scope="module")
def structured(tmp_path_factory):
    docs, queries = structured_sets()
    index = MultiVectorIndex.build(docs, [f"d{i}" for i in range(len(docs))], "multivector:x",
                                   settings=FdeSettings(reps=2, bits=2, proj=4))
    folder = tmp_path_factory.mktemp("mv")
    index.write_into(folder)
    return docs, queries, MultiVectorIndex.load(folder), folder


def test_centroid_candidates_reach_the_stated_recall_and_rank_exactly(structured):
    """Each query token's 8 nearest centroids and the 300 rows (of 3,000) of best centroid MaxSim hold at least
    0.95 of the exact top 10 on average; what they return is in exact MaxSim order with exact scores."""
    docs, queries, index, _ = structured
    assert index.meta["ivf"]["centroids"] == 512  # the power of two at or below 4·√tokens (~33,000 tokens)
    recalls = []
    for q in queries:
        exact = brute_maxsim(q, docs)
        want = set(np.argsort(-exact, kind="stable")[:10].tolist())
        rows, scores = index.search(q, 10, 300, via="centroids", nprobe=8)
        recalls.append(len(want & set(rows.tolist())) / 10)
        np.testing.assert_allclose(scores, exact[rows], rtol=2e-3, atol=2e-3)  # float16 tokens
        assert list(scores) == sorted(scores, reverse=True)
    assert np.mean(recalls) >= 0.95, recalls
    fde = [len(set(index.search(q, 10, 300, via="fde")[0].tolist())
               & set(np.argsort(-brute_maxsim(q, docs), kind="stable")[:10].tolist())) / 10 for q in queries]
    assert np.mean(recalls) > np.mean(fde)  # the coarse 32-d encodings propose fewer of them at the same budget


def test_centroid_candidates_are_the_rows_in_the_probed_lists(structured):
    """With room for all of them, the candidates are exactly the rows owning a token whose nearest centroid is
    among each query token's nprobe nearest (the lists written out here from the codes)."""
    docs, queries, index, _ = structured
    centroids = np.asarray(index.ivf["centroids"])
    codes = np.asarray(index.ivf["codes"])
    owner = np.repeat(np.arange(len(docs)), [len(d) for d in docs])
    for q in queries[:8]:
        probed = np.argsort(-(q @ centroids.T), axis=1, kind="stable")[:, :3]
        want = set(owner[np.isin(codes, probed)].tolist())
        assert set(index.centroid_candidates(q, 3, len(docs)).tolist()) == want
    live = np.ones(len(docs), dtype=bool)
    live[::2] = False
    assert not (set(index.centroid_candidates(queries[0], 3, len(docs), live).tolist()) & set(range(0, len(docs), 2)))


def test_an_index_without_the_inverted_file_keeps_opening(structured, tmp_path):
    """An index written before the inverted file existed (no `ivf` in its JSON, no arrays) loads and searches by
    token scan; asking it for centroids is one line."""
    docs, queries, index, folder = structured
    old = tmp_path / "old"
    old.mkdir()
    for f in folder.iterdir():
        if f.stem not in IVF_ARRAYS:
            (old / f.name).write_bytes(f.read_bytes())
    meta = json.loads((old / META_FILE).read_text())
    meta.pop("ivf")
    (old / META_FILE).write_text(json.dumps(meta))
    loaded = MultiVectorIndex.load(old)
    assert loaded.ivf is None
    rows, _ = loaded.search(queries[0], 5, 64, via="tokens")
    assert list(rows) == list(index.search(queries[0], 5, 64, via="tokens")[0])
    with pytest.raises(EngineError, match="no inverted file") as err:
        loaded.search(queries[0], 5, 64, via="centroids")
    assert "\n" not in str(err.value)


def test_a_damaged_inverted_file_is_refused(structured, tmp_path):
    _, _, _, folder = structured
    for f in folder.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    np.save(tmp_path / "codes.npy", np.zeros(3, dtype=np.int32))
    with pytest.raises(EngineError, match="inverted file's lengths disagree"):
        MultiVectorIndex.load(tmp_path)


def test_centroids_option_sets_the_count():
    docs, _ = structured_sets(n_docs=200, n_queries=1)
    index = MultiVectorIndex.build(docs, [str(i) for i in range(len(docs))], "multivector:x", centroids=16)
    assert index.meta["ivf"]["centroids"] == 16 and len(index.ivf["centroids"]) == 16
    assert int(np.asarray(index.ivf["codes"]).max()) < 16
