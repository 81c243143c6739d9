"""Hostile images through the one reader every build and image query uses (`engine.core.images.load_image`):
each becomes an upright RGB image or an `ImageReadError` with its reason, within bounded time and memory;
a folder with a symlink loop is listed once."""
from __future__ import annotations

import os

import pytest
from PIL import Image

from engine.core.images import ImageReadError, find_images, load_image
from fixtures.hostile_images import SUFFIX, make


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
