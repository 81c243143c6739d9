"""The collection store: named arrays, JSON documents and folders beside the vectors, all checksummed and
versioned; generations; manifests of the previous format; damage found."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.core.storage.store import generations
from engine.core.collection import MANIFEST, Collection
from engine.errors import EngineError


def _vectors(n: int = 6, dim: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def _folder_writer(text: str) -> generations.FileWriter:
    def write(path):
        (path / "a.txt").write_text(text)
        (path / "sub").mkdir()
        (path / "sub" / "b.txt").write_text(text * 2)
    return generations.FileWriter("", write)


def test_named_arrays_documents_and_folders_round_trip(tmp_path):
    vecs, extra_arr = _vectors(), np.arange(12, dtype=np.float16).reshape(6, 2)
    col = Collection.from_vectors("c", [f"i{n}" for n in range(6)], vecs, None, "text", root=tmp_path,
                                  arrays={"scores": extra_arr}, files={"notes": _folder_writer("hi")},
                                  extra={"task": "demo", "k": 3})
    assert col.manifest["format"] == generations.FORMAT and col.extra == {"task": "demo", "k": 3}
    assert sorted(col.stored) == ["notes", "scores"]
    assert np.array_equal(col.array("scores"), extra_arr) and col.array("scores").dtype == np.float16
    assert (col.file("notes") / "sub" / "b.txt").read_text() == "hihi"
    files = col.manifest["files"]
    assert "notes-000001/sub/b.txt" in files and "scores-000001.npy" in files
    again = Collection.open("c", tmp_path, verify=True)  # every byte verified
    scores, rows = again.search_vectors(vecs[2] / np.linalg.norm(vecs[2]), k=1)
    assert rows[0][0] == 2 and scores[0][0] == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(EngineError, match="search it with vectors"):
        again.search(text="anything")


def test_attach_adds_a_generation_and_keeps_untouched_files(tmp_path):
    col = Collection.from_vectors("c", ["a", "b", "c"], _vectors(3), None, "text", root=tmp_path,
                                  arrays={"first": np.ones(3)})
    before = dict(col.manifest["roles"])
    col = col.attach(arrays={"second": np.zeros(2)}, documents={"map": {"a": [1, 2]}}, extra={"x": 1})
    assert col.manifest["generation"] == 2 and col.extra == {"x": 1}
    for role in ("embeddings", "items", "index", "first"):
        assert col.manifest["roles"][role] == before[role]  # not rewritten
    assert col.document("map") == {"a": [1, 2]} and col.array("second").tolist() == [0, 0]
    col = col.attach(arrays={"first": np.full(3, 7.0)})  # replacing a role drops its old file
    assert col.array("first").tolist() == [7, 7, 7] and not (col.path / before["first"]).exists()
    Collection.open("c", tmp_path).verify()
    names = sorted(p.name for p in col.path.iterdir())
    assert names == sorted([MANIFEST, *col.manifest["roles"].values()])


def test_damage_inside_a_stored_folder_is_found(tmp_path):
    col = Collection.from_vectors("c", ["a", "b"], _vectors(2), None, "text", root=tmp_path,
                                  files={"notes": _folder_writer("hi")})
    (col.file("notes") / "sub" / "b.txt").write_text("hoho")  # same size: open's structural check passes
    opened = Collection.open("c", tmp_path)
    with pytest.raises(EngineError, match=r"b.txt does not match its checksum.*rebuild collection 'c'"):
        opened.verify()
    with pytest.raises(EngineError, match=r"b.txt does not match its checksum"):
        Collection.open("c", tmp_path, verify=True)
    (col.file("notes") / "sub" / "b.txt").write_text("changed")  # another size: found on open
    with pytest.raises(EngineError, match=r"b.txt is 7 bytes, .*manifest.json says 4 \(changed or damaged\)"):
        Collection.open("c", tmp_path)


def test_role_names_and_unknown_roles_are_checked(tmp_path):
    with pytest.raises(EngineError, match="must be lower-case"):
        Collection.from_vectors("c", ["a"], _vectors(1), None, "text", root=tmp_path, arrays={"Bad-Name": np.ones(1)})
    with pytest.raises(EngineError, match="not one of embeddings"):
        Collection.from_vectors("c", ["a"], _vectors(1), None, "text", root=tmp_path, arrays={"items": np.ones(1)})
    col = Collection.from_vectors("c", ["a"], _vectors(1), None, "text", root=tmp_path)
    with pytest.raises(EngineError, match="stores no 'probe'"):
        col.array("probe")


def test_previous_format_opens_and_newer_format_is_refused(tmp_path):
    col = Collection.from_vectors("c", ["a", "b"], _vectors(2), "sbert:all-MiniLM-L6-v2", "text", root=tmp_path)
    manifest = json.loads((col.path / MANIFEST).read_text())
    old = {k: v for k, v in manifest.items() if k != "format"}  # engine 0.1 wrote no format number
    (col.path / MANIFEST).write_text(json.dumps(old))
    reopened = Collection.open("c", tmp_path)
    assert reopened.info()["format"] == 1 and reopened.ids == ["a", "b"]
    (col.path / MANIFEST).write_text(json.dumps({**manifest, "format": generations.FORMAT + 1}))
    with pytest.raises(EngineError, match=f"format {generations.FORMAT + 1} was written by a newer engine"):
        Collection.open("c", tmp_path)


def test_manifest_without_files_is_not_trusted(tmp_path):
    col = Collection.from_vectors("c", ["a"], _vectors(1), None, "text", root=tmp_path)
    manifest = json.loads((col.path / MANIFEST).read_text())
    del manifest["files"]
    (col.path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(EngineError, match="lists no files to verify"):
        Collection.open("c", tmp_path)
