"""Deletes, `--add --update` and `--sync` equal a fresh build of the items that remain (ids, vectors, index
results, metadata columns, BM25); `engine verify` passes after each; a kill during a delete leaves the
previous generation whole, and the delete run again finishes it."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine.core.storage.builder.update import compact, delete_ids
from engine.core.collection import Collection
from engine.core.ranking.hybrid import filter_mask, search_rows

REPO = Path(__file__).resolve().parents[2]


def _vectors(n: int, d: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


def _same(a: Collection, b: Collection, queries: np.ndarray, where: str | None = None) -> None:
    """Two collections hold the same items (ids, vectors, metadata) and answer alike."""
    assert a.ids == b.ids and len(a) == len(b)
    np.testing.assert_array_equal(np.asarray(a.embeddings), np.asarray(b.embeddings))
    assert a.items == b.items
    ha, hb = a.hits(*a.search_vectors(queries, 10)), b.hits(*b.search_vectors(queries, 10))
    assert [[(h.id, round(h.score, 5)) for h in x] for x in ha] == [[(h.id, round(h.score, 5)) for h in x] for x in hb]
    if where:
        assert filter_mask(a, where).tolist() == filter_mask(b, where).tolist()


@pytest.mark.parametrize("index", ["Flat", "IVF8,Flat", "HNSW16", "SQ8"])
def test_delete_equals_a_fresh_build(tmp_path, index):
    n = 800
    vec = _vectors(n)
    ids = [f"d{i}" for i in range(n)]
    meta = [{"year": 2000 + i % 20, "split": "ab"[i % 2]} for i in range(n)]
    Collection.from_vectors("c", ids, vec, None, "text", root=tmp_path, index=index, meta=meta)
    gone = set(ids[::10]) | {"d1", "d2", "d3"}
    assert delete_ids("c", sorted(gone), root=tmp_path) == len(gone)
    keep = [i for i, x in enumerate(ids) if x not in gone]
    fresh = Collection.from_vectors("f", [ids[i] for i in keep], vec[keep], None, "text", root=tmp_path,
                                    index="Flat", meta=[meta[i] for i in keep])
    queries = np.asarray(fresh.embeddings[:20])
    marked = Collection.open("c", tmp_path, verify=True)  # rows marked: every file kept, the tombstones added
    assert len(marked) == n and marked.live_count == len(keep) and marked.info()["count"] == len(keep)
    assert [marked.ids[r] for r in marked.live_rows()] == fresh.ids
    if index == "Flat" or index.startswith("IVF"):
        from engine.core.storage.index.faiss_index import SearchKnobs
        knobs = SearchKnobs(nprobe=8) if index.startswith("IVF") else None
        for k in (1, 10, len(keep), n):
            got = marked.hits(*marked.search_vectors(queries, k, knobs))
            want = fresh.hits(*fresh.search_vectors(queries, k))
            assert [[(h.id, round(h.score, 5)) for h in x] for x in got] == \
                [[(h.id, round(h.score, 5)) for h in x] for x in want]
    for where in ("year < 2005", 'year >= 2010 and split == "a"'):
        got = [marked.ids[r] for r in np.flatnonzero(filter_mask(marked, where))]
        assert got == [fresh.ids[r] for r in np.flatnonzero(filter_mask(fresh, where))]
        hits = marked.hits(*search_rows(marked, 10, vectors=queries[:3], where=where))
        assert [[h.id for h in x] for x in hits] == \
            [[h.id for h in x] for x in fresh.hits(*search_rows(fresh, 10, vectors=queries[:3], where=where))]
    assert delete_ids("c", sorted(gone), root=tmp_path) == 0  # run again: nothing left to do
    assert compact("c", root=tmp_path) == len(gone)
    after = Collection.open("c", tmp_path, verify=True)
    if index.startswith("IVF"):
        from engine.core.storage.index.faiss_index import SearchKnobs
        ha = after.hits(*after.search_vectors(queries, 10, SearchKnobs(nprobe=8)))
        assert [[h.id for h in x] for x in ha] == [[h.id for h in x] for x in fresh.hits(*fresh.search_vectors(queries, 10))]
    elif index == "Flat":
        _same(after, fresh, queries, 'year >= 2010 and split == "a"')
    assert after.ids == fresh.ids and after.items == fresh.items
    np.testing.assert_array_equal(np.asarray(after.embeddings), np.asarray(fresh.embeddings))
    assert after.index.ntotal == len(keep)
    assert filter_mask(after, "year < 2005").tolist() == filter_mask(fresh, "year < 2005").tolist()
    assert compact("c", root=tmp_path) == 0 and delete_ids("c", sorted(gone), root=tmp_path) == 0


def _csv(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("id,text\n" + "".join(f"{i},{t}\n" for i, t in rows))
    return path


def test_update_and_delete_of_a_text_collection_with_bm25(run_cli, tmp_path, monkeypatch, capsys):
    base = [(f"d{i}", f"document {i} about topic {i % 5} with word w{i}") for i in range(30)]
    _csv(tmp_path / "a.csv", base)
    root = tmp_path / "i"
    Collection.build("c", texts=tmp_path / "a.csv", root=root, model="minilm", bm25=True)
    changes = [("d3", "a new text for three: zebra"), ("d40", "brand new forty: zebra crossing")]
    code, _, err = run_cli("build", "c", "--texts", _csv(tmp_path / "b.csv", changes),
                           "--add", "--update", "--root", root, "-q")
    assert code == 0, err
    (tmp_path / "gone.txt").write_text("d7\nd8\nnot-there\n")
    code, _, err = run_cli("delete", "c", "--ids", tmp_path / "gone.txt", "--root", root, "-q")
    assert code == 0 and "not-there" in err
    code, _, err = run_cli("verify", "c", "--root", root, "-q")
    assert code == 0, err
    marked = Collection.open("c", root)
    assert marked.live_count == 29 and len(marked) == 31
    for q in ("document 7 about topic 2 with word w7", "w8"):  # the deleted rows' own words: never a hit
        for mode in ("bm25", "dense", "hybrid"):
            for where in (None, 'text != "none"'):  # unfiltered, and a filter every row matches
                ids = {h.id for h in marked.search(text=q, k=40, mode=mode, where=where)}
                assert not ids & {"d7", "d8"} and (mode != "dense" or len(ids) == 29), (q, mode, where)
    code, _, err = run_cli("compact", "c", "--root", root, "-q")
    assert code == 0, err
    final = {i: t for i, t in base if i not in ("d7", "d8")}
    final.update(dict(changes))
    fresh = Collection.build("f", texts=_csv(tmp_path / "all.csv", sorted(final.items())), root=root, model="minilm",
                             bm25=True)
    col = Collection.open("c", root)
    assert sorted(col.ids) == sorted(fresh.ids)
    row = {i: n for n, i in enumerate(col.ids)}
    frow = {i: n for n, i in enumerate(fresh.ids)}
    for i in final:
        np.testing.assert_allclose(col.embeddings[row[i]], fresh.embeddings[frow[i]], atol=1e-5)
    for q in ("zebra", "topic 3 word w12", "document"):
        for mode in ("bm25", "dense", "hybrid"):
            got = {h.id: round(h.score, 4) for h in col.search(text=q, k=40, mode=mode)}
            want = {h.id: round(h.score, 4) for h in fresh.search(text=q, k=40, mode=mode)}
            assert got == want, (q, mode)


@pytest.mark.slow
def test_sync_equals_a_fresh_build_of_the_folder(run_cli, tmp_path, sample_photos, monkeypatch, capsys):
    photos = sorted(sample_photos.values())[:4]
    folder = tmp_path / "photos"
    folder.mkdir()
    for p in photos[:3]:
        shutil.copy(p, folder / p.name)
    root = tmp_path / "i"
    Collection.build("imgs", images=folder, root=root, model="conse")
    (folder / photos[0].name).unlink()                          # vanished
    shutil.copy(photos[3], folder / photos[3].name)             # new
    shutil.copy(photos[3], folder / photos[1].name)             # changed: other bytes
    os.utime(folder / photos[1].name, ns=(time.time_ns() + 10**9,) * 2)
    code, _, err = run_cli("build", "imgs", "--images", folder, "--sync", "--root", root)
    assert code == 0, err
    assert "1 new, 1 changed, 1 vanished, 1 unchanged" in err
    col = Collection.open("imgs", root, verify=True)
    fresh = Collection.build("fresh", images=folder, root=root, model="conse")
    assert sorted(col.ids) == sorted(fresh.ids)
    for i in fresh.ids:
        np.testing.assert_allclose(col.embeddings[col.ids.index(i)], fresh.embeddings[fresh.ids.index(i)], atol=1e-5)
    assert col.document("image_files") == fresh.document("image_files")
    code, _, err = run_cli("build", "imgs", "--images", folder, "--sync", "--root", root)
    assert code == 0 and "0 new, 0 changed, 0 vanished, 3 unchanged" in err


def test_bad_options_are_one_line(run_cli, tmp_path, monkeypatch, capsys):
    Collection.from_vectors("c", ["a", "b"], _vectors(2), None, "text", root=tmp_path)
    capsys.readouterr()  # the set-up's own status lines are not the command's output
    cases = [(["build", "c", "--texts", "x.csv", "--update"], "--update replaces items"),
             (["build", "c", "--texts", "x.csv", "--sync", "--add"], "--sync adds, drops"),
             (["delete", "c", "--ids", tmp_path / "none.txt"], "none.txt"),
             (["delete", "nope", "--ids", _csv(tmp_path / "ids.csv", [("a", "x")])], "no collection 'nope'")]
    for args, msg in cases:
        code, _, err = run_cli(*args, "--root", tmp_path)
        assert code != 0 and msg in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_a_kill_during_a_delete_leaves_the_previous_generation_whole(tmp_path):
    n = 300_000
    vec = _vectors(n, 32)
    ids = [f"d{i}" for i in range(n)]
    Collection.from_vectors("c", ids, vec, None, "text", root=tmp_path)
    before = Collection.open("c", tmp_path)
    gen, old_ids = before.manifest["generation"], before.ids
    (tmp_path / "gone.txt").write_text("".join(f"d{i}\n" for i in range(0, n, 10)))
    args = [sys.executable, "-m", "engine.cli", "delete", "c", "--ids", str(tmp_path / "gone.txt"), "--root",
            str(tmp_path), "-q", "--compact-at", "0"]  # the long path: the rest rewritten (marks: the test above)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    import shutil
    rehearsal = tmp_path / "rehearsal"   # how long the whole delete takes here: the kills land inside it
    shutil.copytree(tmp_path / "c", rehearsal / "c")
    t0 = time.perf_counter()
    assert subprocess.run([*args[:8], str(rehearsal), *args[9:]], env=env).returncode == 0
    took = time.perf_counter() - t0
    outcomes = set()
    for delay in (0.5 * took, 0.8 * took, 0.95 * took, 1.5 * took):
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        col = Collection.open("c", tmp_path, verify=True)  # whole: every byte matches, old or new
        if col.manifest["generation"] == gen:
            assert col.ids == old_ids
            outcomes.add("old")
        else:
            assert len(col) == n - n // 10
            outcomes.add("new")
            break
    assert subprocess.run(args, env=env).returncode == 0
    col = Collection.open("c", tmp_path, verify=True)
    assert len(col) == n - n // 10 and col.ids == [i for k, i in enumerate(old_ids) if k % 10]
    assert "old" in outcomes


class _Killed(BaseException):
    """What a kill looks like to the code that was running: it stops at that point, nothing after it runs."""


@pytest.mark.parametrize("compact_at", [0.25, 0.0])  # rows marked; the rest rewritten
def test_a_delete_stopped_at_any_step_leaves_a_whole_generation(tmp_path, monkeypatch, compact_at):
    """The delete stopped before each file operation in turn (rename, fsync, unlink, every write of a role):
    the collection then opens, every byte matches its checksums, and it is the old generation or the new one
    whole; running the delete again finishes it."""
    n = 400
    ids = [f"d{i}" for i in range(n)]
    Collection.from_vectors("c", ids, _vectors(n), None, "text", root=tmp_path, meta=[{"g": i % 7} for i in range(n)])
    gone = ids[::10]
    queries = _vectors(5, seed=3)
    want_rows = np.asarray([i for i in range(n) if i % 10])
    steps = {"replace": os.replace, "fsync": os.fsync, "unlink": os.unlink}
    outcomes = []
    for stop_at in range(1, 60):
        calls = [0]

        def counted(name):
            real = steps[name]

            def step(*args, **kwargs):
                calls[0] += 1
                if calls[0] == stop_at:
                    raise _Killed(name)
                return real(*args, **kwargs)
            return step
        with monkeypatch.context() as m:
            for name in steps:
                m.setattr(os, name, counted(name))
            try:
                delete_ids("c", gone, root=tmp_path, compact_at=compact_at)
                finished = True
            except _Killed:
                finished = False
        col = Collection.open("c", tmp_path, verify=True)
        live = [col.ids[r] for r in col.live_rows()]
        assert live in (ids, [ids[i] for i in want_rows]), stop_at
        hits = [[h.id for h in x] for x in col.hits(*col.search_vectors(queries, 10))]
        outcomes.append("new" if live != ids else "old")
        assert all(h not in gone for x in hits for h in x) or live == ids
        if finished:
            break
    assert "old" in outcomes and outcomes[-1] == "new" and finished
    assert delete_ids("c", gone, root=tmp_path, compact_at=compact_at) == 0


def test_a_delete_finds_ids_with_quotes_escapes_and_other_scripts(tmp_path):
    ids = ['plain', 'with "quote"', 'back\\slash', 'tab\there', '東京', 'é', 'x' * 300]
    Collection.from_vectors("c", ids, _vectors(len(ids)), None, "text", root=tmp_path)
    assert delete_ids("c", ids[1:6] + ["absent"], root=tmp_path) == 5
    col = Collection.open("c", tmp_path, verify=True)
    assert [col.ids[r] for r in col.live_rows()] == [ids[0], ids[6]]


def test_add_after_a_delete_writes_the_live_rows_and_may_bring_an_id_back(tmp_path):
    base = [(f"d{i}", f"document {i} about topic {i}") for i in range(4)]
    root = tmp_path / "i"
    Collection.build("c", texts=_csv(tmp_path / "a.csv", base), root=root, model="minilm")
    assert delete_ids("c", ["d1"], root=root) == 1
    Collection.build("c", texts=_csv(tmp_path / "b.csv", [("d1", "document 1 is back"), ("d9", "a new one")]),
                     root=root, add=True)
    col = Collection.open("c", root, verify=True)
    assert col.ids == ["d0", "d2", "d3", "d1", "d9"] and col.live_mask() is None and "deleted" not in col.manifest
    hits = col.search(text="document 1 is back", k=5, mode="dense")
    assert hits[0].id == "d1" and len(hits) == 5


def test_a_delete_reads_only_the_rows_it_deletes_through_the_id_index(tmp_path, monkeypatch):
    """Every commit writes the id → row index; a delete then reads the items rows of its own ids and no other
    (no scan of the stored ids), and an id that shares its hash with another is told apart by its row."""
    from engine.core.storage.store import generations, id_index
    n = 300
    ids = [f"d{i}" for i in range(n)] + ['q"uote', "日本"]
    Collection.from_vectors("c", ids, _vectors(len(ids)), None, "text", root=tmp_path,
                            meta=[{"g": i % 7} for i in range(len(ids))])
    col = Collection.open("c", tmp_path, verify=True)
    index = np.asarray(col.array(id_index.ROLE))
    assert sorted(index[1].tolist()) == list(range(len(ids)))
    assert index[0].tolist() == sorted(index[0].tolist())
    assert index[0][np.argsort(index[1])].tolist() == id_hashes_of(ids)

    read: list[int] = []
    real = generations.raw_lines
    gone = ["d3", "d150", 'q"uote', "日本", "absent"]
    with monkeypatch.context() as m:
        m.setattr(generations, "raw_lines", lambda path, offsets, rows: read.extend(rows) or real(path, offsets, rows))
        heads = generations.line_heads
        m.setattr(id_index, "line_heads", lambda path, offsets, rows, width: read.extend(rows.tolist())
                  or heads(path, offsets, rows, width))
        m.setattr(id_index, "_raw_ids", lambda old: pytest.fail("the ids were scanned"))
        assert delete_ids("c", gone, root=tmp_path) == 4
    assert sorted(read) == [3, 150, n, n + 1]
    col = Collection.open("c", tmp_path, verify=True)
    assert [col.ids[r] for r in col.deleted_rows] == ["d3", "d150", 'q"uote', "日本"]

    # every id on one of four hashes: each lookup reads the candidates and keeps only its own rows
    monkeypatch.setattr(id_index, "id_hashes", lambda ids: np.array([len(str(i)) % 4 for i in ids], np.int64))
    Collection.from_vectors("k", ids, _vectors(len(ids)), None, "text", root=tmp_path)
    assert delete_ids("k", ["d7", "d42", "nope"], root=tmp_path) == 2
    col = Collection.open("k", tmp_path, verify=True)
    assert [col.ids[r] for r in col.deleted_rows] == ["d7", "d42"]
    compact("k", root=tmp_path)
    col = Collection.open("k", tmp_path, verify=True)
    assert "d7" not in col.ids and len(col) == len(ids) - 2
    rows, found = id_index.find_rows(col, ["d43", "d8"])
    assert rows.tolist() == [col.ids.index("d8"), col.ids.index("d43")] and found == ["d8", "d43"]


def id_hashes_of(ids: list[str]) -> list[int]:
    import hashlib
    return [int.from_bytes(hashlib.blake2b(i.encode(), digest_size=8).digest(), "little", signed=True) for i in ids]


def test_a_collection_without_the_id_index_deletes_by_scanning_and_verifies(tmp_path):
    """Collections written before the role: `verify` accepts them, a delete finds its rows by the scan, and
    the compaction writes the role; a damaged index is named by `verify`."""
    from engine.core.storage.store import generations
    from engine.core.storage.store.id_index import ROLE
    from engine.errors import EngineError
    n = 200
    ids = [f"d{i}" for i in range(n)]
    Collection.from_vectors("c", ids, _vectors(n), None, "text", root=tmp_path)
    old = Collection.open("c", tmp_path)
    manifest = {k: v for k, v in old.manifest.items() if k not in ("roles", "files")}
    generations.commit(old.path, manifest, {}, keep={r: f for r, f in old.manifest["roles"].items() if r != ROLE})
    col = Collection.open("c", tmp_path, verify=True)
    assert ROLE not in col.manifest["roles"]
    assert delete_ids("c", ["d5", "d9"], root=tmp_path) == 2
    col = Collection.open("c", tmp_path, verify=True)
    assert [col.ids[r] for r in col.deleted_rows] == ["d5", "d9"] and ROLE not in col.manifest["roles"]
    compact("c", root=tmp_path)
    col = Collection.open("c", tmp_path, verify=True)
    assert ROLE in col.manifest["roles"] and len(col) == n - 2
    assert delete_ids("c", ["d6"], root=tmp_path) == 1

    # an index whose rows were swapped passes the structural check, not `verify`
    col = Collection.open("c", tmp_path)
    bad = np.asarray(col.array(ROLE)).copy()
    bad[1, [0, 1]] = bad[1, [1, 0]]
    manifest = {k: v for k, v in col.manifest.items() if k not in ("roles", "files")}
    generations.commit(col.path, manifest, {ROLE: generations.npy(bad)},
                       keep={r: f for r, f in col.manifest["roles"].items() if r != ROLE})
    with pytest.raises(EngineError, match="id_index"):
        Collection.open("c", tmp_path, verify=True)
