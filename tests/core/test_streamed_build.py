"""Builds from --texts/--images stream their items (engine.core.storage.builder.item_source): the collection equals the one
built from the same items as a list, whatever the chunking; the checks a list got still hold."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from engine.core.storage.builder.item_source import ItemSource, chunk_items, kept_items, open_source
from engine.core.storage.builder.options import BuildReport
from engine.core.collection import Collection
from engine.core.sources import image_items, text_items, text_pairs
from engine.errors import EngineError


def write_table(path, n: int, dup: int | None = None):
    rows = [f"d{i},text number {i} about {'cats' if i % 2 else 'dogs'},{i % 3}" for i in range(n)]
    rows[4] = "d4,,1"  # empty text: skipped with a warning, as before
    if dup is not None:
        rows[dup] = f"d1,again {dup},0"
    path.write_text("id,text,group\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("chunk_size", [1, 3, 64])
def test_streamed_text_build_equals_the_list_build(tmp_path, fake_encoder, chunk_size):
    table = write_table(tmp_path / "docs.csv", 11)
    col = Collection.build("s", texts=table, root=tmp_path, model="fake", chunk_size=chunk_size)
    items, fields = text_items(table)  # what a build held as a list before it streamed
    assert col.ids == [it.id for it in items] and "d4" not in col.ids
    assert col.items == [{"id": it.id, **it.meta} for it in items]
    listed = Collection.build("l", items=items, kind="text", root=tmp_path, model="fake", chunk_size=chunk_size)
    assert listed.ids == col.ids
    np.testing.assert_array_equal(np.asarray(col.embeddings), np.asarray(listed.embeddings))
    assert col.manifest["text_fields"] == fields == ["text"] and col.manifest["count"] == 10
    hits = col.search(text="cats", k=20, where="group == 2")  # the metadata columns gathered as rows streamed
    assert sorted(h.id for h in hits) == sorted(it.id for it in items if it.meta["group"] == "2")


def test_streamed_build_refuses_a_repeated_id_naming_its_lines(tmp_path, fake_encoder):
    table = write_table(tmp_path / "docs.csv", 9, dup=6)
    with pytest.raises(EngineError) as streamed:
        Collection.build("s", texts=table, root=tmp_path, model="fake")
    with pytest.raises(EngineError) as listed:
        text_items(table)
    assert str(streamed.value) == str(listed.value)
    assert "duplicate id 'd1'" in str(streamed.value) and str(streamed.value).endswith("docs.csv:8: duplicate id 'd1' (first at line 3); ids must be unique")


def test_id_policy_on_a_streamed_build(tmp_path, fake_encoder):
    table = tmp_path / "docs.csv"
    table.write_text("id,text\nd 1,one\nd2,two\nd 3,three\n")
    with pytest.raises(EngineError, match="2 id"):
        Collection.build("s", texts=table, root=tmp_path, model="fake")
    col = Collection.build("s", texts=table, root=tmp_path, model="fake", id_policy="replace", chunk_size=2)
    assert col.ids == ["d_1", "d2", "d_3"]
    table.write_text("id,text\nd 1,one\nd_1,two\n")
    with pytest.raises(EngineError, match=r"duplicate id \(after replacing white space\) 'd_1'"):
        Collection.build("t", texts=table, root=tmp_path, model="fake", id_policy="replace")


def test_streamed_image_build_lists_unreadable_files(tmp_path, fake_encoder):
    folder = tmp_path / "imgs"
    (folder / "sub").mkdir(parents=True)
    for i in range(5):
        Image.new("RGB", (8, 8), (40 * i, 10, 200)).save(folder / ("sub" if i % 2 else ".") / f"i{i}.png")
    (folder / "broken.png").write_bytes(b"not an image")
    report = BuildReport()
    col = Collection.build("im", images=folder, root=tmp_path, model="fake-image", chunk_size=2, report=report)
    listed = [it for it in image_items(folder) if it.id != "broken"]
    assert col.ids == [it.id for it in listed]
    assert [s["id"] for s in col.manifest["skipped"]] == ["broken"] == [f["id"] for f in report.failed]
    assert col.items == [{"id": it.id, **it.meta} for it in listed]


def test_chunks_of_a_source_equal_slices_of_the_list(tmp_path):
    table = write_table(tmp_path / "docs.csv", 23)
    read, _ = text_pairs(table)
    source = open_source(str(table), read, "strict")
    items, _ = text_items(table)
    assert isinstance(source, ItemSource) and len(source) == len(items) == 22
    bounds = [(lo, min(22, lo + 5)) for lo in range(0, 22, 5)]
    assert list(chunk_items(source, bounds, [3, 1, 4])) == list(chunk_items(items, bounds, [1, 3, 4]))
    kept = np.array([0, 5, 6, 21])
    assert list(kept_items(source, kept)) == [(int(n), items[n]) for n in kept]


@pytest.mark.slow
def test_cli_ray_build_of_a_streamed_table_equals_the_local_build(run_cli, ray_local, tmp_path, monkeypatch, capsys):
    """`engine build --texts --ray local` (chunks put in the object store as the table is read) = a local build."""
    table = tmp_path / "docs.csv"
    rows = [f"d {i},text {i} about {'cats' if i % 3 else 'dogs'},{i % 2}" for i in range(40)]
    rows[7] = "d 7,,0"
    table.write_text("id,text,group\n" + "\n".join(rows) + "\n")
    common = ["--texts", table, "--root", tmp_path, "--chunk-size", "8", "--id-policy", "replace"]
    assert run_cli("build", "r", *common, "--ray", "local")[0] == 0
    assert run_cli("build", "l", *common)[0] == 0
    dist, local = Collection.open("r", tmp_path), Collection.open("l", tmp_path)
    assert dist.ids == local.ids == [f"d_{i}" for i in range(40) if i != 7]
    assert dist.items == local.items
    np.testing.assert_allclose(np.asarray(dist.embeddings), np.asarray(local.embeddings), atol=1e-5)
