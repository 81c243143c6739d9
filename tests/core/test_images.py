"""Robust image reading: real-world oddities become RGB, broken files are skipped and reported."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from engine.core.images import ImageReadError, find_images, load_image


def _save(img: Image.Image, path, **kw):
    img.save(path, **kw)
    return path


def test_exif_orientation_is_applied(tmp_path):
    img = Image.new("RGB", (40, 20), (255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise on display
    path = _save(img, tmp_path / "rot.jpg", exif=exif.tobytes())
    out = load_image(path)
    assert out.size == (20, 40)
    assert out.mode == "RGB"


@pytest.mark.parametrize("mode", ["L", "1", "P", "CMYK", "LA", "RGBA", "I;16", "F"])
def test_modes_become_rgb(tmp_path, mode):
    base = Image.fromarray((np.arange(64 * 48) % 251).reshape(48, 64).astype(np.uint8))
    if mode == "I;16":
        img = Image.fromarray((np.arange(64 * 48).reshape(48, 64) * 20).astype(np.uint16))
        suffix = ".png"
    elif mode == "F":
        img = Image.fromarray(np.linspace(-1, 1, 64 * 48, dtype=np.float32).reshape(48, 64))
        suffix = ".tif"
    else:
        img = base.convert(mode)
        suffix = ".jpg" if mode == "CMYK" else ".png"
    path = _save(img, tmp_path / f"img{suffix}")
    out = load_image(path)
    assert out.mode == "RGB" and out.size == (64, 48)
    arr = np.asarray(out)
    assert arr.max() > arr.min()  # content survived the conversion


def test_transparent_pixels_become_white(tmp_path):
    img = Image.new("RGBA", (8, 8), (0, 0, 0, 0))
    out = load_image(_save(img, tmp_path / "clear.png"))
    assert np.asarray(out).min() == 255


def test_broken_files_raise_with_reason(tmp_path):
    (tmp_path / "notes.jpg").write_text("this is not an image")
    good = _save(Image.new("RGB", (64, 64), (10, 200, 30)), tmp_path / "good.jpg")
    data = good.read_bytes()
    (tmp_path / "truncated.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageReadError, match="not an image"):
        load_image(tmp_path / "notes.jpg")
    with pytest.raises(ImageReadError, match="truncated"):
        load_image(tmp_path / "truncated.jpg")
    with pytest.raises(ImageReadError, match="not found"):
        load_image(tmp_path / "missing.jpg")


def test_find_images_is_recursive_sorted_and_skips_hidden(tmp_path):
    (tmp_path / "b" / "c").mkdir(parents=True)
    (tmp_path / ".cache").mkdir()
    for p in ("z.png", "b/a.JPG", "b/c/d.webp", ".cache/x.png", "b/readme.txt"):
        (tmp_path / p).write_bytes(b"x")
    assert [p.relative_to(tmp_path).as_posix() for p in find_images(tmp_path)] == ["b/a.JPG", "b/c/d.webp", "z.png"]


def test_encoding_skips_and_lists_broken_files(tmp_path, conse_encoder, sample_photos):
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    paths = [str(sample_photos["chelsea"]), str(tmp_path / "bad.png"), str(sample_photos["coffee"])]
    res = conse_encoder.encode_images(paths, batch_size=2, workers=2)
    assert res.ok == [0, 2]
    assert [pos for pos, _ in res.failed] == [1]
    assert res.embeddings.shape == (2, conse_encoder.dim)
