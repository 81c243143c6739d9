"""The built-in example: real photos that ship inside scikit-image's wheel, searched by text offline."""
from __future__ import annotations

from pathlib import Path

from engine.errors import EngineError, missing_extra

DEMO_PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png",
               "hubble_deep_field.jpg", "camera.png", "moon.png", "coins.png", "horse.png", "page.png",
               "brick.png", "grass.png", "gravel.png", "retina.jpg", "clock_motion.png")
DEMO_QUERIES = ("a cat", "a cup of coffee", "a rocket launching into the sky", "a motorcycle",
                "a man with a camera", "a page of printed text")


def demo_photos() -> list[Path]:
    """Bundled sample photos (no download: only files inside the installed wheel)."""
    try:
        import skimage
    except ImportError:
        raise missing_extra("scikit-image (the demo's bundled photos)", "demo") from None
    folder = Path(skimage.__file__).parent / "data"
    photos = [folder / name for name in DEMO_PHOTOS if (folder / name).is_file()]
    if not photos:
        raise EngineError(f"no sample photos in {folder}; reinstall scikit-image")
    return photos


def build_demo(name: str = "demo", root: str | Path | None = None, model: str | None = None, device: str = "auto"):
    from engine.core.collection import Collection
    from engine.core.sources import Item
    items = [Item(p.stem, str(p), {"path": p.name}) for p in demo_photos()]
    return Collection.build(name, items=items, kind="image", root=root, model=model, force=True, device=device)
