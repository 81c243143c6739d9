"""A streamed build, `--add` or `--sync` in which a whole chunk's images are unreadable: the chunk is skipped
and listed like any unreadable image (it used to crash writing an empty block), and a build with no readable
image at all is one line."""
from __future__ import annotations

import pytest
from PIL import Image

from engine.core.collection import Collection
from engine.errors import EngineError


def photos(folder, good=("a", "c"), bad=("b",)):
    folder.mkdir(exist_ok=True)
    for n, name in enumerate(good):
        Image.new("RGB", (40, 30), (40 * n, 90, 200)).save(folder / f"{name}.png")
    for name in bad:
        (folder / f"{name}.png").write_bytes(b"not an image")
    return folder


def test_chunks_of_only_unreadable_images_are_skipped(tmp_path, fake_encoder):
    col = Collection.build("c", images=photos(tmp_path / "imgs"), root=tmp_path / "idx", chunk_size=1)
    assert col.ids == ["a", "c"] and [s["id"] for s in col.manifest["skipped"]] == ["b"]
    col = Collection.build("c", images=photos(tmp_path / "bad", good=(), bad=("x", "y")), root=tmp_path / "idx",
                           add=True, chunk_size=1)
    assert col.ids == ["a", "c"]
    col.verify()


def test_sync_after_an_image_turns_unreadable_keeps_working(tmp_path, fake_encoder):
    folder = photos(tmp_path / "imgs", good=("a", "c", "d"), bad=())
    Collection.build("c", images=folder, root=tmp_path / "idx", chunk_size=1)
    (folder / "c.png").write_bytes(b"now damaged")
    for _ in range(2):
        col = Collection.build("c", images=folder, root=tmp_path / "idx", sync=True, chunk_size=1)
        assert "a" in col.ids and "d" in col.ids
        col.verify()


def test_a_build_with_no_readable_image_is_one_line(tmp_path, fake_encoder):
    for chunk in (1, 1000):
        with pytest.raises(EngineError, match="bad could be encoded; nothing to index") as exc:
            Collection.build("c", images=photos(tmp_path / "bad", good=(), bad=("x", "y")), root=tmp_path / "idx",
                             chunk_size=chunk)
        assert "\n" not in str(exc.value)
