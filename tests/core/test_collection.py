"""Collections on disk: build, search, resume, --add, integrity and the errors users meet."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from engine.core.storage.builder.options import BuildReport
from engine.core.collection import MANIFEST, PARTIAL, Collection
from engine.core.encoders.base import Encoder
from engine.errors import EngineError

DOCS = [
    ("d1", "How to bake sourdough bread at home", "cooking"),
    ("d2", "Training a neural network on images", "ml"),
    ("d3", "The history of the Roman empire", "history"),
    ("d4", "Best hiking trails in the Alps", "travel"),
    ("d5", "Grilling vegetables on a barbecue", "cooking"),
    ("d6", "Gradient descent and backpropagation explained", "ml"),
    ("d7", "Medieval castles of Europe", "history"),
]


def write_csv(path, rows=DOCS):
    lines = ["id,text,topic"] + [f'{i},"{t}",{g}' for i, t, g in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def docs_csv(tmp_path):
    return write_csv(tmp_path / "docs.csv")


def test_text_collection_build_search_and_manifest(tmp_path, docs_csv):
    col = Collection.build("docs", texts=docs_csv, root=tmp_path / "idx")
    assert len(col) == 7 and col.kind == "text" and col.dim == 384
    hits = col.search(text="deep learning backprop", k=3)
    assert hits[0].id == "d6" and [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].meta["topic"] == "ml"
    assert hits[0].score >= hits[1].score >= hits[2].score
    m = json.loads((tmp_path / "idx" / "docs" / MANIFEST).read_text())
    for key in ("encoder", "dim", "metric", "count", "index_factory", "engine_version", "files", "created"):
        assert key in m
    assert m["encoder"] == "sbert:all-MiniLM-L6-v2" and m["count"] == 7 and m["text_fields"] == ["text"]
    emb = np.load(tmp_path / "idx" / "docs" / m["roles"]["embeddings"])
    assert emb.dtype == np.float32 and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert not (tmp_path / "idx" / "docs" / PARTIAL).exists()


def test_jsonl_source_with_several_fields(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps({"doc_id": i, "title": t, "tags": [g, "x"]}) for i, t, g in DOCS) + "\n")
    col = Collection.build("j", texts=path, root=tmp_path, id_column="doc_id", fields=["title", "tags"])
    assert col.manifest["text_fields"] == ["title", "tags"]
    assert col.search(text="castles in the middle ages", k=1)[0].id == "d7"


def test_existing_collection_needs_add_or_force(tmp_path, docs_csv):
    Collection.build("docs", texts=docs_csv, root=tmp_path)
    with pytest.raises(EngineError, match="already exists.*use add to append.* or force to rebuild"):
        Collection.build("docs", texts=docs_csv, root=tmp_path)
    col = Collection.build("docs", texts=docs_csv, root=tmp_path, force=True)
    assert col.manifest["generation"] == 2
    assert sorted(p.name for p in col.path.iterdir()) == [
        "columns-000002", "embeddings-000002.npy", "id_index-000002.npy", "index-000002.faiss", "item_offsets-000002.npy",
        "items-000002.jsonl", MANIFEST]


def _counting(monkeypatch, fail_after: int | None = None):
    """Count calls to text encoding (and optionally die like a killed process after N of them)."""
    calls = {"n": 0}
    real = Encoder.encode_texts

    def wrapped(self, texts, batch_size=64):
        if fail_after is not None and calls["n"] >= fail_after:
            raise KeyboardInterrupt
        calls["n"] += 1
        return real(self, texts, batch_size)

    monkeypatch.setattr(Encoder, "encode_texts", wrapped)
    return calls


def test_interrupted_build_resumes_without_reencoding(tmp_path, docs_csv, monkeypatch):
    calls = _counting(monkeypatch, fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        Collection.build("docs", texts=docs_csv, root=tmp_path, chunk_size=2)
    assert not (tmp_path / "docs" / MANIFEST).exists()  # no half-written collection
    assert len(list((tmp_path / "docs" / PARTIAL).glob("chunk-*.npz"))) == 2
    with pytest.raises(EngineError, match="interrupted build"):
        Collection.open("docs", tmp_path)
    monkeypatch.undo()
    calls = _counting(monkeypatch)
    report = BuildReport()
    col = Collection.build("docs", texts=docs_csv, root=tmp_path, chunk_size=2, report=report)
    assert calls["n"] == 2  # chunks 3 and 4 of 4
    assert report.resumed == 4 and report.encoded == 3
    monkeypatch.undo()
    fresh = Collection.build("fresh", texts=docs_csv, root=tmp_path, chunk_size=2)
    assert np.allclose(np.asarray(col.embeddings), np.asarray(fresh.embeddings), atol=1e-6)
    assert col.ids == fresh.ids


def test_add_appends_without_reencoding_old_items(tmp_path, monkeypatch):
    first = write_csv(tmp_path / "a.csv", DOCS[:4])
    col = Collection.build("docs", texts=first, root=tmp_path)
    old = np.asarray(col.embeddings).copy()
    second = write_csv(tmp_path / "b.csv", DOCS[2:])  # d3, d4 already there
    seen: list[str] = []
    real = Encoder.encode_texts
    monkeypatch.setattr(Encoder, "encode_texts", lambda self, t, batch_size=64: (seen.extend(t), real(self, t, batch_size))[1])
    report = BuildReport()
    col = Collection.build("docs", texts=second, root=tmp_path, add=True, report=report)
    assert report.skipped_existing == 2
    assert len(seen) == 3 and not any("Roman" in t or "Alps" in t for t in seen)
    assert col.ids == ["d1", "d2", "d3", "d4", "d5", "d6", "d7"]
    assert np.array_equal(np.asarray(col.embeddings)[:4], old)
    monkeypatch.undo()
    assert col.search(text="barbecue grill", k=1)[0].id == "d5"
    assert Collection.open("docs", tmp_path).manifest["generation"] == 2


def test_add_refuses_other_modality_and_model(tmp_path, docs_csv, sample_photos):
    Collection.build("docs", texts=docs_csv, root=tmp_path)
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.open(sample_photos["coffee"]).save(folder / "coffee.png")
    with pytest.raises(EngineError, match="holds texts"):
        Collection.build("docs", images=folder, root=tmp_path, add=True)
    with pytest.raises(EngineError, match="same model"):
        Collection.build("docs", texts=docs_csv, root=tmp_path, add=True, model="conse")


def test_checksum_mismatch_and_unknown_collection(tmp_path, docs_csv):
    col = Collection.build("docs", texts=docs_csv, root=tmp_path)
    with pytest.raises(EngineError, match="no collection 'nope'.*known: docs"):
        Collection.open("nope", tmp_path)
    items = col.path / col.manifest["roles"]["items"]
    items.write_text(items.read_text().replace("d1", "dX"))
    Collection.open("docs", tmp_path)  # same size: open reads no bytes
    with pytest.raises(EngineError, match=r"does not match its checksum.*rebuild collection 'docs' \(force\)"):
        Collection.open("docs", tmp_path).verify()


def test_wrong_query_modality(tmp_path, docs_csv, sample_photos):
    col = Collection.build("docs", texts=docs_csv, root=tmp_path)
    with pytest.raises(EngineError, match="takes text queries only"):
        col.search(image=str(sample_photos["chelsea"]))


def test_image_collection_skips_corrupt_files_and_lists_them(tmp_path, sample_photos):
    folder = tmp_path / "photos"
    (folder / "animals").mkdir(parents=True)
    for name in ("chelsea", "coffee", "rocket", "motorcycle_left"):
        sub = folder / "animals" if name == "chelsea" else folder
        Image.open(sample_photos[name]).convert("RGB").save(sub / f"{name}.jpg")
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    report = BuildReport()
    col = Collection.build("photos", images=folder, root=tmp_path, report=report, batch_size=2)
    assert len(col) == 4 and sorted(col.ids) == ["animals/chelsea", "coffee", "motorcycle_left", "rocket"]
    assert [f["id"] for f in report.failed] == ["broken"]
    assert col.manifest["skipped"][0]["id"] == "broken"
    assert col.search(text="a cat", k=1)[0].id == "animals/chelsea"
    assert col.search(image=str(sample_photos["rocket"]), k=1)[0].id == "rocket"


def test_image_table_source_and_missing_column(tmp_path, sample_photos):
    table = tmp_path / "images.csv"
    table.write_text("image_id,path\ncat," + str(sample_photos["chelsea"]) + "\ncup," + str(sample_photos["coffee"]) + "\n")
    col = Collection.build("t", images=table, root=tmp_path)
    assert col.search(text="a cup of coffee", k=1)[0].id == "cup"
    bad = tmp_path / "bad.csv"
    bad.write_text("image_id,location\ncat,x.png\n")
    with pytest.raises(EngineError, match="cannot tell which column holds the image path"):
        Collection.build("u", images=bad, root=tmp_path)


def test_duplicate_ids_name_the_line(tmp_path):
    path = write_csv(tmp_path / "dup.csv", DOCS[:2] + [("d1", "again", "x")])
    with pytest.raises(EngineError, match=r"dup.csv:4: duplicate id 'd1' \(first at line 2\)"):
        Collection.build("dup", texts=path, root=tmp_path)


def test_approximate_index_reports_recall_and_small_collections_are_refused(tmp_path, docs_csv):
    col = Collection.build("h", texts=docs_csv, root=tmp_path, index="HNSW32")
    assert col.manifest["recall_at_10"] == pytest.approx(1.0)
    assert col.search(text="sourdough", k=1)[0].id == "d1"
    with pytest.raises(EngineError, match="needs at least 1024 vectors"):
        Collection.build("ivf", texts=docs_csv, root=tmp_path, index="IVF1024,Flat")
    with pytest.raises(EngineError, match="FAISS cannot make index"):
        Collection.build("bad", texts=docs_csv, root=tmp_path, index="NotAnIndex")


def test_search_to_run_writes_valid_trec(tmp_path, docs_csv):
    from engine.io.runs import read_run
    col = Collection.build("docs", texts=docs_csv, root=tmp_path)
    out = tmp_path / "run.txt"
    col.search_to_run([("q1", "bread baking"), ("q2", "roman history")], out, k=5, run_id="test")
    lines = [line.split() for line in out.read_text().splitlines()]
    assert len(lines) == 10 and {l[5] for l in lines} == {"test"}
    for qid in ("q1", "q2"):
        scores = [float(l[4]) for l in lines if l[0] == qid]
        assert all(a > b for a, b in zip(scores, scores[1:]))
    assert [l[2] for l in lines if l[0] == "q1"][0] == "d1"
    run = read_run(out)
    assert set(run) == {"q1", "q2"}
