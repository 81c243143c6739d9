"""`engine build NAME --vectors PATH`: one .npy or a folder of shards equals `Collection.from_vectors` on the
same data; IVF filled on disk equals the in-memory IVF; a killed build resumes; bad inputs are one line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from engine.core.collection import Collection

N, DIM = 3000, 24


@pytest.fixture()
def data(tmp_path):
    """The same vectors as one float32 file and as three shards (the middle one float16, clip-retrieval's
    naming, numbered past 9 so name order is numeric), with ids and metadata."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, DIM)).astype(np.float32)
    x[1000:2000] = x[1000:2000].astype(np.float16).astype(np.float32)  # what the float16 shard holds
    np.save(tmp_path / "one.npy", x)
    shards = tmp_path / "img_emb"
    shards.mkdir()
    for n, (lo, hi) in zip((2, 9, 10), ((0, 1000), (1000, 2000), (2000, N))):
        np.save(shards / f"img_emb_{n}.npy", x[lo:hi].astype(np.float16 if n == 9 else np.float32))
    (tmp_path / "ids.txt").write_text("".join(f"doc{i}\n" for i in range(N)))
    (tmp_path / "meta.jsonl").write_text("".join(json.dumps({"caption": f"c{i}"}) + "\n" for i in range(N)))
    return tmp_path, x


def _same(a: Collection, b: Collection, x: np.ndarray) -> None:
    assert a.ids == b.ids
    np.testing.assert_array_equal(np.asarray(a.embeddings), np.asarray(b.embeddings))
    sa, ia = a.search_vectors(x[:30], 10)
    sb, ib = b.search_vectors(x[:30], 10)
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_allclose(sa, sb, atol=1e-6)


@pytest.mark.parametrize("source", ["one.npy", "img_emb"])
def test_vectors_equal_from_vectors(run_cli, data, source, monkeypatch, capsys):
    tmp, x = data
    root = tmp / "idx"
    code, _, err = run_cli("build", "v", "--vectors", tmp / source, "--ids", tmp / "ids.txt",
                           "--meta", tmp / "meta.jsonl", "--root", root)
    assert code == 0, err
    ids = [f"doc{i}" for i in range(N)]
    ref = Collection.from_vectors("ref", ids, x, None, "vectors", root=root,
                                  meta=[{"caption": f"c{i}"} for i in range(N)])
    col = Collection.open("v", root)
    _same(col, ref, x)
    assert col.items_at([5])[0] == {"id": "doc5", "caption": "c5"}
    assert col.manifest["kind"] == "vectors" and col.manifest["encoder"] is None
    s, i = col.search_vectors(x[:5], 3)
    import faiss  # raw FAISS over the normalized vectors is the reference
    norm = x / np.linalg.norm(x, axis=1, keepdims=True)
    flat = faiss.IndexFlatIP(DIM)
    flat.add(norm)
    np.testing.assert_array_equal(i, flat.search(norm[:5], 3)[1])
    col.verify()


def test_row_numbers_and_encoder(run_cli, data, monkeypatch, capsys):
    tmp, x = data
    code, _, err = run_cli("build", "v", "--vectors", tmp / "one.npy", "--encoder", "minilm",
                           "--root", tmp / "idx", "-q")
    assert code == 2 and "24-d vectors, but --encoder minilm embeds queries in 384 dimensions" in err, err
    np.save(tmp / "wide.npy", np.random.default_rng(1).standard_normal((50, 384)).astype(np.float32))
    code, _, err = run_cli("build", "v", "--vectors", tmp / "wide.npy", "--encoder", "minilm",
                           "--root", tmp / "idx", "-q")
    assert code == 0, err
    col = Collection.open("v", tmp / "idx")
    assert col.ids[:3] == ["0", "1", "2"] and len(col) == 50
    assert col.manifest["encoder"] == "minilm" and col.kind == "text"
    assert col.search(text="a query", k=3)


def test_ivf_on_disk_equals_in_memory(data):
    tmp, x = data
    mem = Collection.from_vector_files("mem", tmp / "one.npy", root=tmp / "idx", index="IVF16,Flat")
    disk = Collection.from_vector_files("disk", tmp / "one.npy", root=tmp / "idx", index="IVF16,Flat",
                                        memory_budget="10k")
    assert type(disk.index).__name__ == "OnDiskIVF" and (disk.file("index") / "lists.ivfdata").is_file()
    for nprobe in (1, 4):
        from engine.core.storage.index.faiss_index import SearchKnobs
        knobs = SearchKnobs(nprobe=nprobe)
        sm, im = mem.search_vectors(x[:40], 10, knobs)
        sd, id_ = disk.search_vectors(x[:40], 10, knobs)
        np.testing.assert_array_equal(im, id_)
        np.testing.assert_allclose(sm, sd, atol=1e-6)
    assert disk.manifest["recall_at_10"] == pytest.approx(mem.manifest["recall_at_10"])
    assert 0.9 <= disk.manifest["recall_at_10"] <= 1.0
    disk.verify()


@pytest.mark.parametrize("max_kb", [1, 60, 10**6])
def test_search_released_bounds_mapped_lists(data, monkeypatch, max_kb):
    """The on-disk IVF's recall search maps at most `max_bytes` of lists at once (a larger list alone), reads
    each probed list once, and returns what one FAISS search over the whole index returns."""
    from engine.core.storage.index import ondisk
    tmp, x = data
    disk = Collection.from_vector_files("disk", tmp / "one.npy", root=tmp / "idx", index="IVF16,Flat",
                                        memory_budget="10k")
    index = disk.index
    queries = x[:50] / np.linalg.norm(x[:50], axis=1, keepdims=True)
    want_s, want_i = index.search(queries, 10)
    ivf = ondisk.faiss_ivf(index.index)
    sizes = np.array([ivf.invlists.list_size(i) for i in range(ivf.nlist)]) * (ivf.code_size + 8)
    groups = []
    real_groups = ondisk.list_groups
    monkeypatch.setattr(ondisk, "list_groups", lambda *a: groups.extend(real_groups(*a)) or groups)
    released = []
    real_release = ondisk.OnDiskIVF.release
    monkeypatch.setattr(ondisk.OnDiskIVF, "release", lambda self: released.append(1) or real_release(self))
    got_s, got_i = index.search_released(queries, 10, max_bytes=max_kb * 1024)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, atol=1e-6)
    flat = np.concatenate(groups)
    assert len(flat) == len(set(flat.tolist())) and len(released) == len(groups)  # each list once, released
    assert all(len(g) == 1 or sizes[g].sum() <= max_kb * 1024 for g in groups)
    lists = [len(g) for g in groups]
    assert {1: max(lists) == 1, 60: len(groups) > 1 and max(lists) > 1, 10**6: len(groups) == 1}[max_kb]


def test_interrupted_build_resumes(data, monkeypatch):
    """A build that dies after some blocks keeps them; the same build again writes only the rest."""
    from engine.core.storage.builder.options import BuildReport
    from engine.core.storage.store import npy_rows
    tmp, x = data
    real, calls = npy_rows.NpyFile.write, []

    def dying(self, lo, rows):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(lo)
        return real(self, lo, rows)
    monkeypatch.setattr(npy_rows.NpyFile, "write", dying)
    with pytest.raises(KeyboardInterrupt):
        Collection.from_vector_files("v", tmp / "one.npy", root=tmp / "idx", chunk_size=500)
    assert (tmp / "idx" / "v" / ".partial" / "blocks.bin").read_bytes() == b"\1\1\1\1\0\0"
    monkeypatch.setattr(npy_rows.NpyFile, "write", real)
    report = BuildReport()
    col = Collection.from_vector_files("v", tmp / "one.npy", root=tmp / "idx", chunk_size=500, report=report)
    assert (report.resumed, report.encoded) == (2000, 1000)
    ref = Collection.from_vectors("ref", [str(i) for i in range(N)], x, None, "vectors", root=tmp / "idx")
    _same(col, ref, x)
    assert not (tmp / "idx" / "v" / ".partial").exists()


def test_kill_9_then_resume(tmp_path):
    """A real `kill -9` in the middle of the normalized copy; run again, the build resumes and is whole."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200_000, 32)).astype(np.float32)
    np.save(tmp_path / "big.npy", x)
    cmd = [sys.executable, "-m", "engine.cli", "build", "v", "--vectors", str(tmp_path / "big.npy"),
           "--root", str(tmp_path / "idx"), "--chunk-size", "500", "-q"]
    cmd = [sys.executable, "-c", "import sys; from engine.cli import main; sys.argv[0]='engine'; main()", *cmd[3:]]
    marks = tmp_path / "idx" / "v" / ".partial" / "blocks.bin"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if marks.is_file() and 20 < marks.read_bytes().count(1) < 380:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip("the build finished before it could be killed (a fast machine)")
    done = marks.read_bytes().count(1)
    r = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"resumed: {done * 500}" in r.stderr.replace(",", "")
    col = Collection.open("v", tmp_path / "idx")
    norm = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(col.embeddings), norm, atol=1e-6)
    col.verify()


def test_parquet_meta(run_cli, data, monkeypatch, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa
    tmp, x = data
    meta = tmp / "metadata"
    meta.mkdir()
    for n, (lo, hi) in zip((2, 9, 10), ((0, 1000), (1000, 2000), (2000, N))):
        pq.write_table(pa.table({"image_path": [f"p{i}.jpg" for i in range(lo, hi)], "id": list(range(lo, hi))}),
                       meta / f"metadata_{n}.parquet")
    code, _, err = run_cli("build", "v", "--vectors", tmp / "img_emb", "--meta", meta,
                           "--root", tmp / "idx", "-q")
    assert code == 0, err
    col = Collection.open("v", tmp / "idx")
    assert col.items_at([2500])[0] == {"id": "2500", "image_path": "p2500.jpg", "meta_id": 2500}


def test_bad_inputs_are_one_line(run_cli, data, monkeypatch, capsys):
    tmp, x = data
    np.save(tmp / "ints.npy", np.zeros((10, 4), np.int64))
    ragged = tmp / "ragged"
    ragged.mkdir()
    np.save(ragged / "a.npy", np.zeros((5, 8), np.float32))
    np.save(ragged / "b.npy", np.zeros((5, 9), np.float32))
    (tmp / "short_ids.txt").write_text("a\nb\n")
    (tmp / "dup_ids.txt").write_text("".join(f"d{i % 10}\n" for i in range(N)))
    (tmp / "short_meta.jsonl").write_text('{"a": 1}\n')
    (tmp / "bad.npy").write_bytes(b"not numpy at all")
    cases = [
        (["--vectors", tmp / "ints.npy"], "ints.npy: vectors must be float32 or float16, not int64"),
        (["--vectors", ragged], "b.npy: 9-d vectors, but"),
        (["--vectors", tmp / "nowhere.npy"], "nowhere.npy: no such file"),
        (["--vectors", tmp / "bad.npy"], "bad.npy: not a .npy array file"),
        (["--vectors", tmp / "ids.txt"], "ids.txt: --vectors must be .npy"),
        (["--vectors", tmp / "one.npy", "--ids", tmp / "short_ids.txt"], "short_ids.txt: 2 ids for 3000 vectors"),
        (["--vectors", tmp / "one.npy", "--ids", tmp / "dup_ids.txt"], "dup_ids.txt:11: duplicate id 'd0'"),
        (["--vectors", tmp / "one.npy", "--meta", tmp / "short_meta.jsonl"], "short_meta.jsonl: 1 metadata rows"),
        (["--vectors", tmp / "one.npy", "--model", "minilm"], "--model does not go with --vectors"),
        (["--vectors", tmp / "one.npy", "--add"], "--add does not go with --vectors"),
        (["--vectors", tmp / "one.npy", "--encoder", "nosuch:model"], "unknown model spec 'nosuch:model'"),
        (["--vectors", tmp / "one.npy", "--index", "IVF16,Flat", "--memory-budget", "lots"], "--memory-budget"),
        (["--vectors", tmp / "one.npy", "--chunk-size", "0"], "--chunk-size must be a whole number of at least 1"),
        (["--texts", tmp / "meta.jsonl", "--ids", tmp / "ids.txt"], "--ids, --meta and --encoder go with --vectors"),
    ]
    for args, expected in cases:
        code, out, err = run_cli("build", "bad", *args, "--root", tmp / "idx", "-q")
        assert code != 0 and expected in err, (args, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp / "idx" / "bad").exists() or not (tmp / "idx" / "bad" / "manifest.json").exists()


@pytest.mark.slow
def test_vectors_on_ray_with_shards(ray_local, data):
    tmp, x = data
    ref = Collection.from_vectors("ref", [str(i) for i in range(N)], x, None, "vectors", root=tmp / "idx",
                                  index="IVF16,Flat")
    col = Collection.from_vector_files("v", tmp / "img_emb", root=tmp / "idx", index="IVF16,Flat", shards=3,
                                       ray="local")
    assert col.manifest["shards"] == 3 and type(col.index).__name__ == "ShardedIndex"
    _same(col, ref, x)
