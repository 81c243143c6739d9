"""A Flat collection writes each vector once: its index file is a header over the embeddings role, so a
collection of vectors takes little more than its inputs on disk, and it searches exactly as raw FAISS does.
Collections written before (a whole Flat index file) keep opening and searching alike; a compaction upgrades
them."""
from __future__ import annotations

from pathlib import Path

import pytest

import numpy as np

from engine.core.collection import Collection
from engine.errors import EngineError
from engine.core.storage.builder.update import compact, delete_ids
from engine.core.storage.index.faiss_index import FlatFile
from engine.core.storage.store import generations
from engine.core.storage.store.structure import VECTORS_IN


def _unit(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _raw_flat(vectors: np.ndarray, queries: np.ndarray, k: int):
    import faiss
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors))
    return index.search(np.ascontiguousarray(queries), k)


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _write_old_layout(col) -> None:
    """The collection again as the previous writer laid it out: the Flat index file holding every row."""
    manifest = {k: v for k, v in col.manifest.items() if k not in ("roles", "files", VECTORS_IN)}
    emb = np.asarray(col.embeddings)
    generations.commit(col.path, manifest, {"index": generations.FileWriter(".faiss", FlatFile(emb).write)},
                       keep={r: f for r, f in col.manifest["roles"].items() if r != "index"})


def test_a_vectors_collection_is_about_the_size_of_its_inputs(tmp_path):
    n, d = 4000, 64
    vec = _unit(n, d)
    ids = [f"doc-{i:06d}" for i in range(n)]
    np.save(tmp_path / "vectors.npy", vec)
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    inputs = (tmp_path / "vectors.npy").stat().st_size + (tmp_path / "ids.txt").stat().st_size
    col = Collection.from_vectors("c", ids, vec, None, "text", root=tmp_path / "store", index="Flat")
    assert col.manifest[VECTORS_IN] == "embeddings"
    assert col.file("index").stat().st_size < 100  # a header: the rows are the embeddings role's
    assert _folder_bytes(col.path) <= 1.15 * inputs, (_folder_bytes(col.path), inputs)
    queries = _unit(25, d, seed=1)
    opened = Collection.open("c", tmp_path / "store", verify=True)
    stored = np.asarray(opened.embeddings)  # the inputs as stored (L2-normalized once more)
    np.testing.assert_allclose(stored, vec, atol=1e-6)
    for k in (1, 10, n):
        scores, rows = opened.search_vectors(queries, k)
        want_scores, want_rows = _raw_flat(stored, queries, k)
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_array_equal(scores, want_scores)


def test_an_old_layout_collection_opens_searches_alike_and_a_compaction_upgrades_it(tmp_path):
    n, d = 600, 32
    vec = _unit(n, d)
    ids = [f"d{i}" for i in range(n)]
    meta = [{"year": 2000 + i % 7} for i in range(n)]
    col = Collection.from_vectors("c", ids, vec, None, "text", root=tmp_path, index="Flat", meta=meta)
    _write_old_layout(col)
    old = Collection.open("c", tmp_path, verify=True)
    assert VECTORS_IN not in old.manifest
    assert old.file("index").stat().st_size >= n * d * 4  # every row inside the index file, as before
    queries = _unit(20, d, seed=2)
    want_scores, want_rows = _raw_flat(np.asarray(old.embeddings), queries, 10)
    scores, rows = old.search_vectors(queries, 10)
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(scores, want_scores)

    gone = ids[::9]
    assert delete_ids("c", gone, root=tmp_path) == len(gone)
    assert compact("c", root=tmp_path) == len(gone)
    after = Collection.open("c", tmp_path, verify=True)
    assert after.manifest[VECTORS_IN] == "embeddings" and after.file("index").stat().st_size < 100
    keep = [i for i, x in enumerate(ids) if x not in set(gone)]
    fresh = Collection.from_vectors("f", [ids[i] for i in keep], vec[keep], None, "text", root=tmp_path,
                                    index="Flat", meta=[meta[i] for i in keep])
    assert after.ids == fresh.ids and after.items == fresh.items
    np.testing.assert_array_equal(np.asarray(after.embeddings), np.asarray(fresh.embeddings))
    got, want = after.search_vectors(queries, 10), _raw_flat(np.asarray(fresh.embeddings), queries, 10)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


def test_an_index_header_that_disagrees_with_the_count_is_refused(tmp_path):
    """The header still carries the count and width that opening checks against the manifest."""
    from engine.errors import EngineError
    col = Collection.from_vectors("c", [f"d{i}" for i in range(50)], _unit(50, 8), None, "text", root=tmp_path)
    manifest = {k: v for k, v in col.manifest.items() if k not in ("roles", "files")}
    generations.commit(col.path, manifest,
                       {"index": generations.FileWriter(".faiss", FlatFile(_unit(49, 8)).write_header)},
                       keep={r: f for r, f in col.manifest["roles"].items() if r != "index"})
    with pytest.raises(EngineError, match="49 vectors"):
        Collection.open("c", tmp_path)


def test_a_delete_confirms_its_candidates_in_bulk_for_every_form_of_id(tmp_path, monkeypatch):
    """Ids that are prefixes of others, with quotes, backslashes, control characters and other scripts: the
    candidates' first bytes confirm each one, and no row is parsed unless its hash is shared."""
    from engine.core.storage.store import id_index
    ids = ["d1", "d10", "d100", 'q"uote', "back\\slash", "tab\there", "line\nbreak", "日本", "e\u0301", "\x7f"]
    ids += [f"x{i}" for i in range(200)]
    Collection.from_vectors("c", ids, _unit(len(ids), 8), None, "text", root=tmp_path)
    col = Collection.open("c", tmp_path, verify=True)
    wanted = ids[:10] + ["d1000", "absent"]
    monkeypatch.setattr(id_index, "_line_id", lambda line: pytest.fail(f"row parsed: {line!r}"))
    rows, found = id_index.find_rows(col, wanted)
    assert rows.tolist() == list(range(10)) and found == ids[:10]
    assert delete_ids("c", ["d10", "line\nbreak"], root=tmp_path) == 2
    col = Collection.open("c", tmp_path, verify=True)
    assert [col.ids[r] for r in col.deleted_rows] == ["d10", "line\nbreak"]


@pytest.mark.parametrize("keep", ["every_third", "runs", "all", "none", "last"])
def test_kept_rows_are_streamed_in_order_as_numpy_takes_them(tmp_path, keep):
    x = np.random.default_rng(3).normal(size=(1000, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rows = {"every_third": np.arange(0, 1000, 3), "runs": np.r_[5:70, 300:301, 640:1000],
            "all": np.arange(1000), "none": np.zeros(0, int), "last": np.array([999])}[keep]
    writer = generations.kept_rows_npy(tmp_path / "x.npy", rows, window=64 * 48)  # 64 rows a window
    digest = writer.write(tmp_path / "kept.npy")
    got = np.load(tmp_path / "kept.npy")
    assert got.shape == (len(rows), 12)
    np.testing.assert_array_equal(got, x[rows])
    assert digest == generations.sha256(tmp_path / "kept.npy")  # hashed while written: what the file holds
    np.save(tmp_path / "h.npy", x.astype(np.float16))
    assert generations.kept_rows_npy(tmp_path / "h.npy", rows) is None  # another dtype: gathered as before


def test_the_index_over_the_embeddings_reads_them_as_raw_faiss_holds_them(tmp_path):
    from engine.core.storage.index.faiss_index import read_flat_over
    x = _unit(700, 24, seed=4)
    q = _unit(9, 24, seed=5)
    np.save(tmp_path / "c.npy", x)
    np.save(tmp_path / "f.npy", np.asfortranarray(x))  # another layout: read block by block
    want = _raw_flat(x, q, 7)
    for name in ("c.npy", "f.npy"):
        index = read_flat_over(tmp_path / name)
        assert index.ntotal == 700 and index.d == 24
        got = index.search(q, 7)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


def test_a_truncated_embeddings_file_is_refused_by_the_streamed_compaction(tmp_path):
    x = np.random.default_rng(3).normal(size=(100, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    writer = generations.kept_rows_npy(tmp_path / "x.npy", np.arange(0, 100, 2))
    with open(tmp_path / "x.npy", "r+b") as fh:
        fh.truncate((tmp_path / "x.npy").stat().st_size - 40)
    with pytest.raises(EngineError, match="ends before its 100 rows"):
        writer.write(tmp_path / "kept.npy")


@pytest.mark.parametrize("n, d", [(0, 8), (49, 8), (200_000, 384), (3, 1536)])
def test_the_flat_header_is_the_one_faiss_writes(tmp_path, n, d):
    import faiss

    from engine.core.storage.store.structure import flat_ip_header
    index = faiss.IndexFlatIP(d)
    if n <= 1000:
        index.add(np.zeros((n, d), np.float32))
        assert flat_ip_header(n, d) == faiss.serialize_index(index).tobytes()[:45]
    else:  # the header of a large index without its rows: FAISS's with the counts filled in
        empty = bytearray(faiss.serialize_index(index).tobytes())
        empty[8:16], empty[37:45] = np.int64(n).tobytes(), np.uint64(n * d).tobytes()
        assert flat_ip_header(n, d) == bytes(empty)


def test_a_compaction_records_the_checksums_of_what_it_wrote(tmp_path):
    n = 3000
    ids = [f"d{i}" for i in range(n)]
    x = _unit(n, 16)
    Collection.from_vectors("c", ids, x, None, "text", root=tmp_path, meta=[{"g": i % 7} for i in range(n)])
    delete_ids("c", ids[::10] + ids[1000:1400], root=tmp_path, compact_at=1.0)
    stored = np.array(Collection.open("c", tmp_path).embeddings)
    compact("c", root=tmp_path)
    col = Collection.open("c", tmp_path, verify=True)  # every byte against the manifest's sha256
    keep = [i for i in range(n) if i % 10 and not 1000 <= i < 1400]
    assert col.ids == [ids[i] for i in keep]
    np.testing.assert_array_equal(np.asarray(col.embeddings), stored[keep])
    for name, record in col.manifest["files"].items():
        assert record["sha256"] == generations.sha256(col.path / name)
