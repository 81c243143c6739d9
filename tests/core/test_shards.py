"""Sharded and on-disk indexes give raw FAISS's one-index results; sharded collections round-trip; no Ray needed."""
from __future__ import annotations

import json
import sys

import faiss
import numpy as np
import pytest

from engine.core.cluster import bare_ray_flag
from engine.core.collection import Collection
from engine.core.encoders.base import l2_normalize
from engine.core.storage.index.ondisk import LISTS_FILE, build_ivf_on_disk
from engine.core.storage.index.shards import ShardedIndex, build_sharded, merge_top_k, search_on_ray, split_rows
from engine.errors import EngineError


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(0)
    return l2_normalize(rng.standard_normal((3000, 32))), l2_normalize(rng.standard_normal((40, 32)))


def one_index(x: np.ndarray, factory: str):
    """The reference: one raw FAISS index over all rows, trained on all of them, nprobe as the engine sets it."""
    index = faiss.index_factory(x.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    if "IVF" in factory:
        faiss.extract_index_ivf(index).nprobe = 8
    return index


def assert_same_hits(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    """Equal score lists, and the same ids above the k-th score (at the cut, equal PQ codes may swap)."""
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
    assert np.array_equal(got[1], want[1]) or all(
        set(a[d > d[-1] + 1e-6]) == set(b[d > d[-1] + 1e-6]) for d, a, b in zip(want[0], got[1], want[1]))


@pytest.mark.parametrize("factory", ["Flat", "SQ8", "IVF8,Flat", "IVF8,PQ4x4"])
def test_sharded_search_equals_one_index(vectors, factory):
    x, q = vectors
    sharded = build_sharded(x, factory, 3, on_ray=False)
    assert sharded.rows == [1000, 1000, 1000] and sharded.ntotal == 3000
    assert_same_hits(sharded.search(q, 10), one_index(x, factory).search(q, 10))


def test_merge_top_k_pads_and_breaks_ties_by_row():
    a = (np.array([[0.9, 0.5]], np.float32), np.array([[1, 0]]))
    b = (np.array([[0.5, -3e38]], np.float32), np.array([[0, -1]]))
    scores, rows = merge_top_k([a, b], [0, 2], 4)
    assert rows.tolist() == [[1, 0, 2, -1]] and scores[0, :3].tolist() == pytest.approx([0.9, 0.5, 0.5])
    assert split_rows(10, 3) == [(0, 3), (3, 7), (7, 10)]


def test_ivf_merged_on_disk_equals_one_index_and_is_mapped(vectors, tmp_path):
    x, q = vectors
    parts = [x[:1200], x[1200:2000], x[2000:]]
    np.save(tmp_path / "part2.npy", parts[2])  # a shard may also be a .npy file the worker maps
    ondisk = build_ivf_on_disk([parts[0], parts[1], tmp_path / "part2.npy"], "IVF8,Flat", tmp_path / "ivf",
                               on_ray=False)
    assert ondisk.ntotal == 3000 and not list((tmp_path / "ivf").glob("shard-*"))
    d_one, i_one = one_index(x, "IVF8,Flat").search(q, 10)
    d_od, i_od = ondisk.search(q, 10)
    assert np.array_equal(i_od, i_one)
    np.testing.assert_allclose(d_od, d_one, rtol=1e-6, atol=1e-6)
    invlists = faiss.extract_index_ivf(ondisk.index).invlists
    assert isinstance(faiss.downcast_InvertedLists(invlists), faiss.OnDiskInvertedLists)
    assert ondisk.memory_bytes() < (tmp_path / "ivf" / LISTS_FILE).stat().st_size / 10


def test_sharded_collection_round_trip_and_add(tmp_path):
    path = tmp_path / "docs.csv"
    words = ["river", "bread", "castle", "neural", "ocean", "violin", "desert", "garden"]
    path.write_text("id,text\n" + "".join(f"d{i},{words[i % 8]} {words[(i * 3) % 8]} {i}\n" for i in range(40)))
    col = Collection.build("sh", texts=path, root=tmp_path, shards=3)
    col = Collection.open("sh", tmp_path)
    assert isinstance(col.index, ShardedIndex) and col.index.rows == [13, 14, 13] and col.manifest["shards"] == 3
    layout = json.loads((col.file("index") / "index.json").read_text())
    assert layout == {"layout": "shards", "rows": [13, 14, 13]}
    emb = np.asarray(col.embeddings)
    d_one, i_one = one_index(emb, "Flat").search(emb[:5], 7)
    d_sh, i_sh = col.search_vectors(emb[:5], 7)
    assert np.array_equal(i_sh, i_one) and col.search(text="castle river 2", k=1)[0].id == "d2"
    more = tmp_path / "more.csv"
    more.write_text("id,text\nd40,violin garden\nd41,ocean desert\n")
    col = Collection.build("sh", texts=more, root=tmp_path, add=True)
    assert Collection.open("sh", tmp_path).index.rows == [14, 14, 14] and col.ids[-1] == "d41"
    flat = Collection.from_vectors("flat", ["a"], np.ones((1, 4)), None, "text", root=tmp_path)
    with pytest.raises(EngineError, match="not sharded.*shards N"):
        search_on_ray(flat)


def test_ray_is_needed_only_when_asked(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)
    from engine.core.cluster import import_ray
    with pytest.raises(EngineError, match="ray is not installed.*engine\\[ray\\]"):
        import_ray()
    with pytest.raises(EngineError, match="ray is not installed"):
        Collection.build("x", items=[], kind="text", root=tmp_path, ray="local")


def test_bare_ray_flag_means_local():
    assert bare_ray_flag(["build", "x", "--ray"]) == ["build", "x", "--ray", "local"]
    assert bare_ray_flag(["build", "--ray", "x", "--texts", "t"])[:4] == ["build", "--ray", "local", "x"]
    assert bare_ray_flag(["build", "x", "--ray", "auto"]) == ["build", "x", "--ray", "auto"]
    assert bare_ray_flag(["build", "x", "--ray", "ray://head:10001", "-q"])[3] == "ray://head:10001"
