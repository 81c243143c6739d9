"""Generate a style-transfer retrieval set in exactly the NTCIR-19 ModelRetrieval B layout.

Real photos (a folder such as ../shared/data/coco-mini/images, or scikit-image's sample photos)
× a family of deterministic, parametrized style transforms standing in for the LoRAs. Every style
is applied to every photo; train and test share no photo (content image), as in NTCIR-B.

    out/models.csv                     id,model_name,model_id,model_version_id,version_name,civitai_url,trigger_words
    out/content-images.csv             image_id,image_url
    out/train.csv                      image_id,split,model_id,content_image_id,best_seed
    out/test_image_ids_from_tree.txt   test-<content>-<n>, one per line (no LoRA in the id)
    out/images/*.png                   train-<content>-<lora>.png and test-<content>-<n>.png
    out/test-qrels.txt                 the hidden answers, TREC qrels `test-id 0 lora-id 1` (not in NTCIR's layout)

    python benchmarks/make_style_set.py OUT [--photos DIR|skimage] [--styles 32] [--contents 24] [--size 256]
"""
from __future__ import annotations

import argparse
import csv
import io
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image, ImageFilter, ImageOps

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.io.atomic import atomic_open  # noqa: E402

COCO_MINI = ROOT.parent / "shared" / "data" / "coco-mini" / "images"
SKIMAGE_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field",
                  "retina", "camera", "moon", "coins", "clock", "colorwheel")
MODEL_COLUMNS = ["id", "model_name", "model_id", "model_version_id", "version_name", "civitai_url", "trigger_words"]
TRAIN_COLUMNS = ["image_id", "split", "model_id", "content_image_id", "best_seed"]
CONTENT_COLUMNS = ["image_id", "image_url"]
TEST_IDS = "test_image_ids_from_tree.txt"

Op = Callable[[np.ndarray, np.random.Generator], np.ndarray]  # float RGB in [0, 1], (H, W, 3)


# ---------------------------------------------------------------- transforms (float RGB arrays in [0, 1])

def _pil(x: np.ndarray) -> Image.Image:
    return Image.fromarray((np.clip(x, 0, 1) * 255 + 0.5).astype(np.uint8), "RGB")


def _arr(img: Image.Image) -> np.ndarray:
    return np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0


def _gray(x: np.ndarray) -> np.ndarray:
    return x @ np.array([0.299, 0.587, 0.114], np.float32)


def grade(gain=(1, 1, 1), gamma=(1, 1, 1), lift=(0, 0, 0)) -> Op:
    """Colour grading: per-channel lift, gain and gamma."""
    g, gm, lf = (np.array(v, np.float32) for v in (gain, gamma, lift))
    return lambda x, rng: np.clip(lf + (1 - lf) * np.clip(x * g, 0, 1) ** gm, 0, 1)


def matrix(m: Sequence[Sequence[float]]) -> Op:
    mm = np.array(m, np.float32).T
    return lambda x, rng: np.clip(x @ mm, 0, 1)


SEPIA = [[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]]


def saturate(f: float) -> Op:
    return lambda x, rng: np.clip(_gray(x)[..., None] + f * (x - _gray(x)[..., None]), 0, 1)


def contrast(f: float) -> Op:
    return lambda x, rng: np.clip(0.5 + f * (x - 0.5), 0, 1)


def posterize(bits: int) -> Op:
    return lambda x, rng: _arr(ImageOps.posterize(_pil(x), bits))


def quantize(colours: int) -> Op:
    return lambda x, rng: _arr(_pil(x).quantize(colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE))


def edges(thick: int = 1) -> Op:
    """Sketch: inverted edge map of the luminance."""
    def op(x, rng):
        e = _pil(x).convert("L").filter(ImageFilter.FIND_EDGES)
        if thick > 1:
            e = e.filter(ImageFilter.MaxFilter(thick))
        e = ImageOps.autocontrast(ImageOps.invert(e), cutoff=2)
        return _arr(e.convert("RGB"))
    return op


def pencil(radius: float = 6.0) -> Op:
    """Colour-dodge of the grey image with its blurred negative: the classic pencil sketch."""
    def op(x, rng):
        g = _gray(x)
        blur = _arr(_pil(np.repeat(1 - g[..., None], 3, 2)).filter(ImageFilter.GaussianBlur(radius)))[..., 0]
        s = np.clip(g / np.maximum(1 - blur, 1e-3), 0, 1)
        return np.repeat(s[..., None], 3, 2)
    return op


def halftone(cell: int, colour: bool = False) -> Op:
    """Dots on a grid whose radius grows with darkness (per channel when `colour`)."""
    def op(x, rng):
        h, w, _ = x.shape
        yy, xx = np.mgrid[0:h, 0:w]
        cy, cx = (yy % cell) - (cell - 1) / 2, (xx % cell) - (cell - 1) / 2
        dist = np.sqrt(cy ** 2 + cx ** 2) / (cell / np.sqrt(2))
        small = _pil(x).resize((max(1, w // cell), max(1, h // cell)), Image.Resampling.BOX)
        mean = _arr(small.resize((w // cell * cell or w, h // cell * cell or h), Image.Resampling.NEAREST))
        mean = np.pad(mean, ((0, h - mean.shape[0]), (0, w - mean.shape[1]), (0, 0)), mode="edge")
        if colour:
            return (dist[..., None] > np.sqrt(1 - mean)).astype(np.float32)
        return np.repeat((dist > np.sqrt(1 - _gray(mean)))[..., None], 3, 2).astype(np.float32)
    return op


def pixelate(block: int) -> Op:
    def op(x, rng):
        img = _pil(x)
        small = img.resize((max(1, img.width // block), max(1, img.height // block)), Image.Resampling.BOX)
        return _arr(small.resize(img.size, Image.Resampling.NEAREST))
    return op


def mode_filter(size: int) -> Op:
    """Oil-paint look: each pixel takes its neighbourhood's most frequent value."""
    return lambda x, rng: _arr(_pil(x).filter(ImageFilter.ModeFilter(size)))


def median(size: int) -> Op:
    return lambda x, rng: _arr(_pil(x).filter(ImageFilter.MedianFilter(size)))


def blur(radius: float) -> Op:
    return lambda x, rng: _arr(_pil(x).filter(ImageFilter.GaussianBlur(radius)))


def grain(sigma: float, mono: bool = True) -> Op:
    def op(x, rng):
        shape = x.shape[:2] + ((1,) if mono else (3,))
        return np.clip(x + rng.normal(0, sigma, shape).astype(np.float32), 0, 1)
    return op


def vignette(strength: float) -> Op:
    def op(x, rng):
        h, w, _ = x.shape
        yy, xx = np.mgrid[-1:1:complex(0, h), -1:1:complex(0, w)]
        mask = 1 - strength * np.clip((xx ** 2 + yy ** 2) / 2, 0, 1) ** 0.8
        return x * mask[..., None].astype(np.float32)
    return op


def duotone(dark: Sequence[int], light: Sequence[int]) -> Op:
    d, li = np.array(dark, np.float32) / 255, np.array(light, np.float32) / 255
    return lambda x, rng: d + _gray(x)[..., None] * (li - d)


def solarize(threshold: float) -> Op:
    return lambda x, rng: np.where(x > threshold, 1 - x, x)


def invert() -> Op:
    return lambda x, rng: 1 - x


def emboss() -> Op:
    return lambda x, rng: _arr(_pil(x).filter(ImageFilter.EMBOSS))


def hue_shift(degrees: float) -> Op:
    def op(x, rng):
        hsv = np.asarray(_pil(x).convert("HSV")).copy()
        hsv[..., 0] = (hsv[..., 0].astype(np.int32) + int(degrees / 360 * 255)) % 256
        return _arr(Image.fromarray(hsv, "HSV"))
    return op


def threshold(level: float) -> Op:
    return lambda x, rng: np.repeat((_gray(x) > level)[..., None], 3, 2).astype(np.float32)


def scanlines(period: int, depth: float = 0.5) -> Op:
    def op(x, rng):
        rows = (np.arange(x.shape[0]) % period) < period // 2
        return x * np.where(rows, 1.0, 1 - depth)[:, None, None].astype(np.float32)
    return op


def chromatic(shift: int) -> Op:
    def op(x, rng):
        out = x.copy()
        out[..., 0] = np.roll(x[..., 0], shift, axis=1)
        out[..., 2] = np.roll(x[..., 2], -shift, axis=1)
        return out
    return op


def swap_channels(order: Sequence[int]) -> Op:
    return lambda x, rng: x[..., list(order)]


def cartoon(colours: int) -> Op:
    """Flat colours with dark outlines."""
    q, e = quantize(colours), edges(3)
    return lambda x, rng: q(median(5)(x, rng), rng) * e(x, rng)


@dataclass(frozen=True)
class Style:
    slug: str
    name: str
    trigger_words: str
    ops: tuple[Op, ...]

    def apply(self, img: Image.Image, seed: int) -> Image.Image:
        rng = np.random.default_rng(seed)
        x = _arr(img)
        for op in self.ops:
            x = np.asarray(op(x, rng), np.float32)
        return _pil(x)


def S(slug: str, name: str, words: str, *ops: Op) -> Style:
    return Style(slug, name, words, tuple(ops))


STYLES: tuple[Style, ...] = (
    S("sepia", "Sepia Memories", "sepia, old photograph", matrix(SEPIA), vignette(0.4)),
    S("teal-orange", "Teal and Orange Cinematic", "cinematic, teal and orange",
      grade((1.15, 1.0, 0.8), (0.9, 1.0, 1.1), (0.0, 0.04, 0.1)), contrast(1.2)),
    S("nordic", "Cold Nordic Grade", "cold, icy blue tones", grade((0.8, 0.95, 1.2), (1.1, 1.0, 0.9)), saturate(0.7)),
    S("sunset", "Warm Sunset Film", "warm, golden hour", grade((1.2, 1.05, 0.75), (0.9, 1.0, 1.2))),
    S("bleach", "Bleach Bypass", "desaturated, high contrast", saturate(0.35), contrast(1.5)),
    S("pop-poster", "Pop Art Posterize", "pop art, posterized", saturate(1.8), posterize(2)),
    S("poster3", "Screenprint Poster", "screen print, flat colours", posterize(3), contrast(1.1)),
    S("pencil", "Pencil Sketch", "pencil drawing, graphite sketch", pencil(6)),
    S("ink", "Ink Line Art", "line art, ink drawing", edges(1)),
    S("halftone", "Newspaper Halftone", "halftone, newsprint", halftone(6)),
    S("halftone-cmy", "Colour Halftone Comic", "comic dots, colour halftone", halftone(8, colour=True)),
    S("pixel8", "Pixel Art", "pixel art, 8-bit", pixelate(8), posterize(3)),
    S("mosaic", "Mosaic Tiles", "mosaic, large tiles", pixelate(16)),
    S("oil", "Oil Painting", "oil painting, thick brush strokes", mode_filter(7), saturate(1.3)),
    S("gouache", "Gouache", "gouache, flat paint", mode_filter(5), quantize(12)),
    S("noir", "Film Noir Grain", "film noir, black and white, grain", saturate(0.0), contrast(1.4), grain(0.08)),
    S("colour-grain", "Grainy Colour Film", "35mm film, grain", grade((1.1, 1.0, 0.9)), grain(0.06, mono=False)),
    S("vignette", "Dark Vignette Portrait", "dramatic vignette", vignette(0.85), contrast(1.1)),
    S("duo-bp", "Duotone Blue Pink", "duotone, blue and pink", duotone((30, 20, 110), (255, 120, 190))),
    S("duo-gy", "Duotone Green Yellow", "duotone, green and yellow", duotone((10, 60, 30), (240, 240, 90))),
    S("duo-po", "Duotone Purple Orange", "duotone, purple and orange", duotone((60, 10, 80), (255, 170, 60))),
    S("solarize", "Solarized Print", "solarized, darkroom", solarize(0.5)),
    S("negative", "Photo Negative", "negative film, inverted colours", invert()),
    S("dreamy", "Dreamy Soft Focus", "soft focus, dreamy haze", blur(3), grade(lift=(0.12, 0.1, 0.14)),
      saturate(0.8)),
    S("emboss", "Emboss Relief", "embossed, metal relief", emboss()),
    S("psychedelic", "Psychedelic Hue", "psychedelic, vivid colours", hue_shift(120), saturate(1.8)),
    S("alien", "Alien Hue Shift", "alien planet colours", hue_shift(240)),
    S("stark", "Stark Black and White", "two-tone, stencil", threshold(0.45)),
    S("crt", "CRT Scanlines", "retro monitor, scanlines", scanlines(4), chromatic(2)),
    S("glitch", "Chromatic Glitch", "glitch art, chromatic aberration", chromatic(6), saturate(1.4)),
    S("cartoon", "Cartoon Cel Shading", "cartoon, cel shading", cartoon(8)),
    S("cyanotype", "Cyanotype", "cyanotype, blueprint", duotone((10, 40, 90), (225, 235, 245))),
    S("infrared", "Infrared Film", "infrared photography", swap_channels((1, 0, 2)), contrast(1.2)),
    S("polaroid", "Faded Polaroid", "faded instant photo", saturate(0.7), grade((1.05, 1.0, 0.9), lift=(0.15, 0.12, 0.1))),
    S("lomo", "Lomography", "lomo, saturated, vignette", saturate(1.6), contrast(1.3), vignette(0.9)),
    S("matrix", "Green Code", "green monochrome", matrix([[0.1, 0.2, 0.05], [0.3, 0.7, 0.2], [0.1, 0.2, 0.05]])),
    S("pastel", "Pastel Dream", "pastel colours", posterize(4), grade(lift=(0.3, 0.28, 0.32)), saturate(0.9)),
    S("nightvision", "Night Vision", "night vision, green scope",
      duotone((0, 20, 0), (120, 255, 120)), grain(0.07), vignette(0.7)),
    S("charcoal", "Charcoal Drawing", "charcoal, smudged", pencil(3), contrast(1.6), grain(0.05)),
    S("watercolour", "Watercolour Wash", "watercolour, wet wash", median(7), quantize(16), grade(lift=(0.1, 0.1, 0.1))),
)


# ---------------------------------------------------------------- photos

def square(img: Image.Image, size: int) -> Image.Image:
    return ImageOps.fit(img.convert("RGB"), (size, size), Image.Resampling.BICUBIC)


def load_photos(source: str | Path, count: int) -> list[tuple[str, Image.Image]]:
    """(url-ish name, RGB image) of the first `count` photos of a folder, or of scikit-image's samples."""
    if str(source) == "skimage":
        import skimage.data
        out = []
        for name in SKIMAGE_PHOTOS[:count]:
            arr = getattr(skimage.data, name)()
            img = Image.fromarray(arr).convert("RGB")
            out.append((f"skimage:{name}", img))
        return out
    from engine.core.images import find_images, load_image
    paths = find_images(source)[:count]
    return [(str(p), load_image(p)) for p in paths]


def jitter(img: Image.Image, rng: np.random.Generator, amount: float) -> Image.Image:
    """What differs between two generations from one content image: framing, exposure, saturation.

    Without it every stylization of a photo starts from identical pixels and subtracting the content
    mean would be unrealistically exact."""
    if amount <= 0:
        return img
    w, h = img.size
    scale = 1 - amount * rng.uniform(0, 0.2)
    cw, ch = int(w * scale), int(h * scale)
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    out = img.crop((x0, y0, x0 + cw, y0 + ch)).resize((w, h), Image.Resampling.BICUBIC)
    if rng.random() < 0.5 * amount:
        out = ImageOps.mirror(out)
    x = _arr(out) * (1 + amount * rng.uniform(-0.15, 0.15))
    x = saturate(1 + amount * rng.uniform(-0.2, 0.2))(x, rng)
    return _pil(x)


def _seed(*parts: object) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


def _write_png(path: Path, img: Image.Image) -> None:
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)
    with atomic_open(path, "wb") as fh:
        fh.write(buf.getvalue())


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with atomic_open(path) as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def make_style_set(out: str | Path, photos: str | Path = "skimage", n_styles: int = 32, n_contents: int = 24,
                   size: int = 256, test_fraction: float = 0.25, seed: int = 0, jitter_amount: float = 1.0) -> dict:
    """Write the set; returns counts. Deterministic for given arguments (the same PNGs every time)."""
    out = Path(out)
    if not 1 <= n_styles <= len(STYLES):
        raise SystemExit(f"--styles must be 1..{len(STYLES)}")
    sources = load_photos(photos, n_contents)
    if len(sources) < 2:
        raise SystemExit(f"{photos}: need at least two photos, found {len(sources)}")
    styles = STYLES[:n_styles]
    rng = np.random.default_rng(seed)
    n_test = min(len(sources) - 1, max(1, round(len(sources) * test_fraction)))
    test_contents = set((rng.permutation(len(sources))[:n_test] + 1).tolist())
    (out / "images").mkdir(parents=True, exist_ok=True)
    _write_csv(out / "models.csv", MODEL_COLUMNS, [
        {"id": m, "model_name": s.name, "model_id": 900000 + m, "model_version_id": 910000 + m,
         "version_name": "synthetic", "civitai_url": f"synthetic://style/{s.slug}", "trigger_words": s.trigger_words}
        for m, s in enumerate(styles, 1)])
    _write_csv(out / "content-images.csv", CONTENT_COLUMNS,
               [{"image_id": c, "image_url": url} for c, (url, _) in enumerate(sources, 1)])
    train_rows, test_ids, qrels = [], [], []
    test_numbers = iter(rng.permutation(np.arange(1, len(test_contents) * len(styles) * 4 + 1)).tolist())
    for c, (_, photo) in enumerate(sources, 1):
        base = square(photo, size)
        for m, style in enumerate(styles, 1):
            best_seed = _seed(style.slug, c) % 16
            rng_img = np.random.default_rng(_seed(style.slug, c, seed))
            img = style.apply(jitter(base, rng_img, jitter_amount), _seed(style.slug, c, seed, best_seed))
            if c in test_contents:
                image_id = f"test-{c:04d}-{next(test_numbers):04d}"
                test_ids.append(image_id)
                qrels.append(f"{image_id} 0 {m} 1")
                _write_png(out / "images" / f"{image_id}.png", img)
            else:
                image_id = f"train-{c:04d}-{m:04d}.png"
                train_rows.append({"image_id": image_id, "split": "train", "model_id": m, "content_image_id": c,
                                   "best_seed": best_seed})
                _write_png(out / "images" / image_id, img)
    train_rows.sort(key=lambda r: (r["model_id"], r["content_image_id"]))  # NTCIR's order: by LoRA, then content
    _write_csv(out / "train.csv", TRAIN_COLUMNS, train_rows)
    with atomic_open(out / TEST_IDS) as fh:
        fh.writelines(f"{t}\n" for t in sorted(test_ids))
    with atomic_open(out / "test-qrels.txt") as fh:
        fh.writelines(f"{q}\n" for q in sorted(qrels))
    return {"styles": len(styles), "contents": len(sources), "train_images": len(train_rows),
            "test_images": len(test_ids), "test_contents": sorted(test_contents)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="output folder (created)")
    ap.add_argument("--photos", default=str(COCO_MINI) if COCO_MINI.is_dir() else "skimage",
                    help="folder of photos, or `skimage` for scikit-image's sample photos (default: coco-mini if present)")
    ap.add_argument("--styles", type=int, default=32, help=f"number of styles (LoRAs), at most {len(STYLES)}")
    ap.add_argument("--contents", type=int, default=24, help="number of content photos")
    ap.add_argument("--size", type=int, default=256, help="square image side in pixels")
    ap.add_argument("--test-fraction", type=float, default=0.25, help="share of content photos held out for test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jitter", type=float, default=1.0, help="per-image crop/flip/exposure variation (0: none)")
    args = ap.parse_args(argv)
    counts = make_style_set(args.out, args.photos, args.styles, args.contents, args.size, args.test_fraction,
                            args.seed, args.jitter)
    print(counts)


if __name__ == "__main__":
    main()
