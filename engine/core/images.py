"""Robust image reading and a decode pipeline that overlaps with the model's forward pass.

Real image folders hold rotated phone photos, CMYK JPEGs, 16-bit PNGs, palettes with
transparency and the odd truncated or mislabeled file: all become RGB or are skipped
and listed, and the build goes on.
"""
from __future__ import annotations

import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from engine.errors import EngineError
from engine.io.limits import limit, over



class ImageModel(Protocol):
    """What the decode pipeline needs of an encoder (`engine.core.encoders.base.Encoder` is one): the
    pipeline sits below the encoders and never imports them."""
    dim: int
    preprocess: Callable[[Image.Image], Any] | None

    def encode_image_batch(self, batch: Any) -> np.ndarray: ...

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".jfif"}
ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated file is an error we report, not grey pixels
Image.MAX_IMAGE_PIXELS = None  # our own limit (engine.io.limits) applies, with its error and its variable


class ImageReadError(Exception):
    pass


def _to_rgb(img: Image.Image) -> Image.Image:
    if img.mode == "RGB":
        return img
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        arr = np.asarray(img, dtype=np.float64)
        hi = arr.max() if arr.size else 0
        arr = (arr / (hi if hi > 255 else 255.0) * 255.0) if hi > 0 else arr
        return Image.fromarray(arr.clip(0, 255).astype(np.uint8), "L").convert("RGB")
    if img.mode == "F":
        arr = np.asarray(img, dtype=np.float64)
        lo, hi = float(arr.min()), float(arr.max())
        arr = (arr - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(arr)
        return Image.fromarray(arr.astype(np.uint8), "L").convert("RGB")
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return img.convert("RGB")  # L, 1, P, CMYK, YCbCr, LAB, HSV


def check_image_size(img: Image.Image) -> None:
    """Refuse, from the header alone, what would take gigabytes to decode or to resize: too many pixels
    (a JPEG is first asked to decode at a fraction of its size with `draft`), or an extreme aspect ratio
    (resizing a 60000×1 image by its short side makes billions of pixels)."""
    w, h = img.size
    if w < 1 or h < 1:
        raise ImageReadError(f"empty image ({w}×{h})")
    most = limit("max_image_pixels")
    if w * h > most and img.format == "JPEG":
        scale = int(np.ceil(np.sqrt(w * h / most)))
        img.draft(img.mode, (w // scale, h // scale))
        w, h = img.size
    if w * h > most:
        raise ImageReadError(str(over("max_image_pixels", f"{w}×{h} = {w * h:,} pixels")))
    if max(w, h) / min(w, h) > limit("max_image_aspect"):
        raise ImageReadError(str(over("max_image_aspect", f"aspect ratio {max(w, h) / min(w, h):,.0f}:1 ({w}×{h})")))


def load_image(path: str | Path) -> Image.Image:
    """An RGB image upright per its EXIF orientation; raises ImageReadError with the reason. Size limits are
    checked on the header, before any pixel is decoded (`check_image_size`)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as img:
                check_image_size(img)
                img.load()
                img = ImageOps.exif_transpose(img) or img
                return _to_rgb(img)
    except FileNotFoundError:
        raise ImageReadError("file not found") from None
    except IsADirectoryError:
        raise ImageReadError("is a folder, not an image") from None
    except UnidentifiedImageError:
        raise ImageReadError("not an image (unrecognised format)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageReadError(f"corrupt or truncated ({exc})") from None


def find_images(folder: str | Path) -> list[Path]:
    """Image files under `folder`, recursively, in a stable order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise EngineError(f"{folder}: no such folder")
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


@dataclass
class ImageBatchResult:
    embeddings: np.ndarray  # rows for the images that were read
    ok: list[int]  # their positions in the input
    failed: list[tuple[int, str]] = field(default_factory=list)  # (position, reason)


def _prepare(encoder: "ImageModel", path: str):
    try:
        return encoder.preprocess(load_image(path)), None
    except ImageReadError as exc:
        return None, str(exc)
    except Exception as exc:  # a decoder bug on one odd file must not end a long build
        return None, f"unreadable ({type(exc).__name__}: {exc})"


def pixels_of(prepared: Any) -> int:
    """The pixels a prepared image puts into a forward pass: width × height of a PIL image (a model whose own
    processor sizes it: a VLM embedder's grows with it), of the last two axes of a tensor or array."""
    if isinstance(prepared, Image.Image):
        return int(prepared.width) * int(prepared.height)
    shape = getattr(prepared, "shape", ())
    return int(shape[-1]) * int(shape[-2]) if len(shape) >= 2 else 1


def iter_image_batches(encoder: "ImageModel", paths: Sequence[str], batch_size: int, workers: int,
                       max_pixels: int | None = None) -> Iterator[tuple[list[int], list, list[tuple[int, str]]]]:
    """Yield (positions, tensors, failures) per batch; decoding runs `workers` threads ahead of the caller. A
    batch holds at most `batch_size` images and, with `max_pixels`, is cut before the image that would take its
    pixels (`pixels_of`) above that budget (an image larger than the budget goes alone)."""
    if encoder.preprocess is None:
        encoder.encode_image_batch(None)  # raises the modality error
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        pending: deque = deque()
        ahead = batch_size * (2 + max(1, workers))
        it = iter(enumerate(paths))

        def fill() -> None:
            while len(pending) < ahead:
                try:
                    i, p = next(it)
                except StopIteration:
                    return
                pending.append((i, pool.submit(_prepare, encoder, str(p))))

        fill()
        while pending:
            pos, tensors, failed = [], [], []
            pixels = 0
            while pending and len(pos) + len(failed) < batch_size:
                i, fut = pending[0]
                tensor, err = fut.result()
                if err is None and tensors and max_pixels is not None and pixels + pixels_of(tensor) > max_pixels:
                    break  # the next batch begins with it
                pending.popleft()
                if err is None:
                    pixels += pixels_of(tensor)
                    pos.append(i)
                    tensors.append(tensor)
                else:
                    failed.append((i, err))
            fill()
            yield pos, tensors, failed


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
ALLOCATOR_BYTES = 1 << 30
"""glibc keeps freed blocks up to this size instead of returning them to the kernel (benchmarks/image_pipeline.py
measures the difference): a forward pass's activation buffers are tens of MB, above glibc's default 128 kB–32 MB
mmap threshold, so each batch otherwise maps, faults in and unmaps them again."""
_allocator = {"tuned": False}


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process (ENGINE_MALLOC=0 leaves them; other C
    libraries are left alone). True when the setting took."""
    import ctypes
    import ctypes.util
    import os
    if _allocator["tuned"] or os.environ.get("ENGINE_MALLOC", "1") == "0":
        return _allocator["tuned"]
    _allocator["tuned"] = True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    size = ALLOCATOR_BYTES
    while size >= 1 << 25 and not mallopt(_M_MMAP_THRESHOLD, size):  # glibc caps the value: halve until taken
        size //= 2
    return bool(mallopt(_M_TRIM_THRESHOLD, ALLOCATOR_BYTES))


def stack(tensors: Sequence[Any]) -> Any:
    """One batch of preprocessed images: numpy arrays (ONNX encoders) stack with numpy, tensors with torch;
    PIL images (models whose own processor sizes them) stay a list."""
    if isinstance(tensors[0], Image.Image):
        return list(tensors)
    if isinstance(tensors[0], np.ndarray):
        return np.stack(tensors)
    import torch
    return torch.stack(list(tensors))


def encode_image_files(encoder: "ImageModel", paths: Sequence[str], batch_size: int = 32,
                       workers: int = 2, max_pixels: int | None = None) -> ImageBatchResult:
    """The images' embeddings in batches of at most `batch_size` images and `max_pixels` pixels
    (`iter_image_batches`); unreadable files are skipped and reported."""
    keep_freed_memory()
    chunks, ok, failed = [], [], []
    for pos, tensors, bad in iter_image_batches(encoder, paths, batch_size, workers, max_pixels):
        failed.extend(bad)
        if tensors:
            chunks.append(encoder.encode_image_batch(stack(tensors)))
            ok.extend(pos)
    emb = np.concatenate(chunks) if chunks else np.zeros((0, encoder.dim), np.float32)
    return ImageBatchResult(emb, ok, failed)
