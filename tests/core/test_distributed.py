"""Builds on a local Ray (2 CPUs): equal to a local build, a killed worker's block re-run, a killed driver resumed."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from engine.core.storage.builder.options import BuildReport
from engine.core.collection import MANIFEST, PARTIAL, Collection
from engine.core.storage.index.faiss_index import build_index

WORDS = ("apple river mountain neural bread castle ocean train music forest engine garden winter "
         "market violin desert harbor glacier circuit poem").split()


def write_texts(path, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    path.write_text("id,text\n" + "".join(f"t{i:04d},{' '.join(rng.choice(WORDS, 7))}\n" for i in range(n)))
    return path


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    return write_texts(tmp_path_factory.mktemp("ray") / "docs.csv", 300)


@pytest.fixture(scope="module")
def local(texts, tmp_path_factory):
    return Collection.build("local", texts=texts, root=tmp_path_factory.mktemp("local"), chunk_size=32)


def same_collection(a: Collection, b: Collection) -> None:
    assert a.ids == b.ids and a.items == b.items
    np.testing.assert_allclose(np.asarray(a.embeddings), np.asarray(b.embeddings), atol=1e-5)
    assert a.manifest["skipped"] == b.manifest["skipped"] and a.manifest["encoder"] == b.manifest["encoder"]


def test_ray_build_equals_local_build(ray_local, texts, local, tmp_path):
    """Same ids, order, embeddings; the IVF index trained once and its shards' lists merged on disk."""
    report = BuildReport()
    col = Collection.build("dist", texts=texts, root=tmp_path, chunk_size=32, ray="local", report=report,
                           index="IVF4,Flat")
    same_collection(col, local)
    assert report.encoded == 300 and report.resumed == 0
    assert not (tmp_path / "dist" / PARTIAL).exists()
    col = Collection.open("dist", tmp_path)
    assert sorted(p.name for p in col.file("index").iterdir()) == ["index.faiss", "index.json", "lists.ivfdata"]
    emb = np.asarray(col.embeddings)
    one = build_index(emb, "IVF4,Flat")  # the same index built in one process
    assert np.array_equal(col.search_vectors(emb[:20], 10)[1], one.search(emb[:20], 10)[1])
    assert col.search(text=local.items[5]["text"], k=1)[0].id == local.ids[5]
    assert ray_local.is_initialized()  # a running Ray is used, not shut down by the build


def _encode_actor_pids() -> list[int]:
    import psutil
    pids = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if cmd.startswith("ray::") and "EncodeActor" in cmd:
            pids.append(proc.pid)
    return pids


def test_killed_worker_block_is_rerun(ray_local, texts, local, tmp_path, monkeypatch):
    """SIGKILL an encoding actor once the first chunk is back; Ray restarts it and re-runs its batch."""
    import engine.core.storage.builder.ray_encode as dist
    real = dist.encode_on_ray
    seen = {"killed": [], "after": 0}

    def killing(*args, **kwargs):
        for n, out in enumerate(real(*args, **kwargs)):
            if n == 0:
                pids = _encode_actor_pids()
                assert pids, "no encoding actor found"
                os.kill(pids[0], signal.SIGKILL)
                seen["killed"].append(pids[0])
            else:
                seen["after"] += 1
            yield out

    monkeypatch.setattr(dist, "encode_on_ray", killing)
    col = Collection.build("dist", texts=texts, root=tmp_path, chunk_size=32, batch_size=8, ray="local")
    assert seen["killed"] and seen["after"] == 9  # the other 9 chunks came back after the kill
    same_collection(col, local)


@pytest.mark.slow
def test_interrupted_driver_resumes(ray_local, texts, local, tmp_path, monkeypatch):
    """The driver dies after 3 chunks are flushed; the same build run again encodes only the rest."""
    import engine.core.storage.builder.ray_encode as dist
    real = dist.encode_on_ray

    def dying(*args, **kwargs):
        for n, out in enumerate(real(*args, **kwargs)):
            if n == 3:
                raise KeyboardInterrupt
            yield out

    monkeypatch.setattr(dist, "encode_on_ray", dying)
    with pytest.raises(KeyboardInterrupt):
        Collection.build("dist", texts=texts, root=tmp_path, chunk_size=32, ray="local")
    assert not (tmp_path / "dist" / MANIFEST).exists()
    assert len(list((tmp_path / "dist" / PARTIAL).glob("chunk-*.npz"))) == 3
    monkeypatch.undo()
    report = BuildReport()
    col = Collection.build("dist", texts=texts, root=tmp_path, chunk_size=32, ray="local", report=report)
    assert report.resumed == 96 and report.encoded == 204
    same_collection(col, local)


@pytest.mark.slow
def test_ray_image_build_skips_bad_files_as_a_local_build(ray_local, sample_photos, tmp_path):
    """Decoding in Ray tasks: unreadable files are skipped and listed in the manifest exactly as locally."""
    from PIL import Image
    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(60):
        Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(folder / f"g{i:03d}.png")
    for name, photo in list(sample_photos.items())[:4]:
        (folder / f"{name}.jpg").write_bytes(photo.read_bytes())
    (folder / "broken.jpg").write_bytes(b"not a jpeg")
    (folder / "g010.png").write_bytes((folder / "g010.png").read_bytes()[:200])  # truncated
    local = Collection.build("local", images=folder, root=tmp_path, chunk_size=16)
    dist = Collection.build("dist", images=folder, root=tmp_path, chunk_size=16, ray="local")
    same_collection(dist, local)
    assert sorted(f["id"] for f in dist.manifest["skipped"]) == ["broken", "g010"]


@pytest.mark.slow
def test_cli_build_and_sharded_search_on_ray(run_cli, texts, tmp_path, monkeypatch, capsys):
    """`engine build … --ray --shards 2` (bare --ray); `engine search --ray` fans out to one actor per shard."""
    import json

    code, _, err = run_cli("build", "c", "--texts", texts, "--root", tmp_path, "--ray",
                           "--shards", "2", "--chunk-size", "64", "-q")
    assert code == 0, err
    text = Collection.open("c", tmp_path).items[7]["text"]
    code, out, err = run_cli("search", "c", text, "--root", tmp_path, "--json", "--ray")
    assert code == 0, err
    assert json.loads(out)["hits"][0]["id"] == "t0007"
