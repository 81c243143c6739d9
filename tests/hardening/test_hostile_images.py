"""Hostile images through the one reader every build and image query uses (`engine.core.images.load_image`):
each becomes an upright RGB image or an `ImageReadError` with its reason, within bounded time and memory;
a folder with a symlink loop is listed once."""
from __future__ import annotations

import io
import os
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from engine.core.images import ImageReadError, find_images, load_image


def png_claiming(path, width, height):
    """A valid 1×1 PNG whose header claims `width`×`height`: a decompression bomb in a few bytes."""
    Image.new("RGB", (1, 1)).save(path)
    data = bytearray(path.read_bytes())
    at = data.index(b"IHDR")
    data[at + 4:at + 12] = struct.pack(">II", width, height)
    data[at + 17:at + 21] = struct.pack(">I", zlib.crc32(bytes(data[at:at + 17])))
    path.write_bytes(bytes(data))
    return path


def _jpeg_with_orientation(path, orientation):
    img = Image.new("RGB", (40, 20), "blue")
    exif = Image.Exif()
    exif[0x0112] = orientation
    img.save(path, exif=exif.tobytes())


def make(kind: str, path):
    """Write the hostile image `kind` at `path` (its extension may lie); returns the path."""
    if kind == "zero-byte":
        path.write_bytes(b"")
    elif kind == "truncated":
        buf = io.BytesIO()
        Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
        path.write_bytes(buf.getvalue()[:400])
    elif kind == "wrong-extension":
        Image.new("RGB", (30, 20), "green").save(path, "PNG")  # named .jpg
    elif kind == "not-an-image":
        path.write_text("hello, I am text")
    elif kind == "aspect-60000x1":
        Image.new("L", (60000, 1)).save(path, "PNG")
    elif kind == "aspect-1x60000":
        Image.new("L", (1, 60000)).save(path, "PNG")
    elif kind == "bomb-png-100k":
        png_claiming(path, 100_000, 100_000)
    elif kind == "bomb-png-20k-zeros":  # a real 20000×20000 PNG of zeros: 400 MP in ~400 KB
        Image.new("1", (20000, 20000)).save(path, "PNG")
    elif kind == "animated-gif":
        frames = [Image.new("P", (20, 20), i) for i in range(5)]
        frames[0].save(path, "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    elif kind == "cmyk-jpeg":
        Image.new("CMYK", (20, 20), (0, 255, 255, 0)).save(path, "JPEG")
    elif kind == "16-bit-png":
        Image.fromarray(np.full((20, 20), 60000, dtype=np.uint16)).save(path, "PNG")
    elif kind == "palette-transparency":
        img = Image.new("P", (20, 20), 1)
        img.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
        img.save(path, "PNG", transparency=1)
    elif kind.startswith("exif-"):
        _jpeg_with_orientation(path, int(kind.split("-")[1]))
    elif kind == "empty-dims-header":
        png_claiming(path, 0, 10)
    else:
        raise ValueError(kind)
    return path


SUFFIX = {"wrong-extension": ".jpg", "cmyk-jpeg": ".jpg", "truncated": ".jpg", "animated-gif": ".gif",
          "not-an-image": ".png", "zero-byte": ".png"}
EXPECT = {  # kind → (size of the RGB image, or the reason's words)
    "zero-byte": "not an image", "truncated": "corrupt or truncated", "wrong-extension": (30, 20),
    "not-an-image": "not an image", "aspect-60000x1": "max_image_aspect", "aspect-1x60000": "max_image_aspect",
    "bomb-png-100k": "max_image_pixels", "bomb-png-20k-zeros": "max_image_pixels", "animated-gif": (20, 20),
    "cmyk-jpeg": (20, 20), "16-bit-png": (20, 20), "palette-transparency": (20, 20), "exif-1": (40, 20),
    "exif-3": (40, 20), "exif-6": (20, 40), "exif-8": (20, 40), "empty-dims-header": "not an image",
}
KINDS = list(EXPECT)


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_image(tmp_path, kind):
    path = make(kind, tmp_path / f"img{SUFFIX.get(kind, '.png')}")
    want = EXPECT[kind]
    if isinstance(want, tuple):
        img = load_image(path)
        assert img.mode == "RGB" and img.size == want
    else:
        with pytest.raises(ImageReadError, match=want):
            load_image(path)


def test_transparency_becomes_white_and_16_bit_keeps_its_range(tmp_path):
    pal = load_image(make("palette-transparency", tmp_path / "p.png"))
    assert pal.getpixel((0, 0)) == (255, 255, 255)
    deep = load_image(make("16-bit-png", tmp_path / "d.png"))
    assert deep.getpixel((0, 0))[0] == 255


def test_symlink_loop_and_dangling_link_in_a_folder(tmp_path):
    folder = tmp_path / "imgs"
    (folder / "sub").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(folder / "sub" / "a.png")
    os.symlink(folder, folder / "sub" / "loop")        # a folder that contains itself
    os.symlink(folder / "nowhere.png", folder / "dangling.png")
    os.symlink(folder / "self.png", folder / "self.png")  # a link to itself: ELOOP
    assert [p.relative_to(folder).as_posix() for p in find_images(folder)] == ["sub/a.png"]
    with pytest.raises(ImageReadError):
        load_image(folder / "self.png")
