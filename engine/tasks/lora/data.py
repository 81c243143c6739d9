"""The NTCIR-19 ModelRetrieval B files, read as the organizers ship them.

    models.csv                      id, model_name, trigger_words, … (one row per LoRA)
    train.csv                       image_id, split, model_id (the LoRA), content_image_id, best_seed
    test_image_ids_from_tree.txt    test-<content>-<n>, one per line; the image is `<id>.png`
    images/                         train-<content>-<lora>.png and test-<content>-<n>.png

Ids are compared as the organizers mean them ('0007' and '7' name the same LoRA or content image) but kept
as written: a LoRA is written out by the id its file gives it ('0007' stays '0007'), so a run matches qrels
that spell the ids the same way. The content image of a test image comes from its id, which is what content
removal needs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import EngineError, opt, preview, where
from engine.io.ids import check_unique
from engine.io.tables import pick_column, read_rows, read_text_lines

_CONTENT_IN_ID = re.compile(r"^(?:test|train)-0*(\d+)-\d+", re.IGNORECASE)
_PROMPT_NOISE = re.compile(r"\[[^\]]*\]|\b(?:lora|loras|sdxl|sd1\.5|sd\s?1\.5|flux|xl|pony|v\d+(?:\.\d+)*)\b",
                           re.IGNORECASE)


@dataclass(frozen=True)
class Lora:
    id: str   # as written in models.csv (or train.csv without one); keyed by norm_id
    name: str = ""
    trigger_words: str = ""

    @property
    def prompt(self) -> str:
        """Name and trigger words without version tags ("XL", "[FLUX+SDXL]"), for the text encoder."""
        text = ", ".join(t for t in (self.name, self.trigger_words) if t) or self.id
        clean = re.sub(r"\(\s*\)", " ", _PROMPT_NOISE.sub(" ", text))
        clean = re.sub(r"\s*-?\s*,", ",", re.sub(r"\s+", " ", clean))
        return clean.strip(" ,-") or text


@dataclass(frozen=True)
class TrainImage:
    image_id: str
    lora: str
    content: str
    line: int
    lora_as_written: str = field(default="", compare=False)  # as this line spells it ('0007'); `lora`: norm_id


def norm_id(value: object) -> str:
    """'0007' and '7' name the same LoRA or content image."""
    text = str(value if value is not None else "").strip()
    return (text.lstrip("0") or "0") if text.isascii() and text.isdigit() else text


def lora_order(lora_id: str) -> tuple:
    """Numeric ids in number order, then the others by name."""
    if lora_id.isascii() and lora_id.isdigit():  # by number, however long: length, then digits
        digits = lora_id.lstrip("0") or "0"
        return (0, len(digits), digits)
    return (1, 0, lora_id)


def read_models(path: str | Path) -> dict[str, Lora]:
    """LoRAs by id from models.csv (`id`, `model_name`, `trigger_words`)."""
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no LoRAs in file")
    cols = rows[0].data.keys()
    id_col = pick_column(path, cols, None, ("id", "lora_id", "model_id"), "LoRA id")
    name_col = next((c for c in ("model_name", "name") if c in cols), None)
    words_col = "trigger_words" if "trigger_words" in cols else None
    written = [_cell(row.data, id_col) for row in rows]
    ids = [norm_id(w) for w in written]
    for lora_id, row in zip(ids, rows):
        if not lora_id:
            raise EngineError(f"{where(path, row.line)}: empty LoRA id")
    check_unique(ids, "LoRA id", path, [row.line for row in rows])
    return {lora_id: Lora(w, _cell(row.data, name_col), _cell(row.data, words_col))
            for lora_id, w, row in zip(ids, written, rows)}


def _cell(data: dict, column: str | None) -> str:
    return str(data.get(column) or "").strip() if column else ""


def read_train(path: str | Path, loras: dict[str, Lora] | None = None) -> list[TrainImage]:
    """Labelled images from train.csv (`image_id`, `model_id`, `content_image_id`); with `loras`, an id
    models.csv does not list is an error naming the line."""
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no training images in file")
    cols = rows[0].data.keys()
    img_col = pick_column(path, cols, None, ("image_id", "image", "file"), "image id")
    lora_col = pick_column(path, cols, None, ("model_id", "lora_id", "lora"), "LoRA id")
    content_col = next((c for c in ("content_image_id", "content_id", "content") if c in cols), None)
    out: list[TrainImage] = []
    for row in rows:
        image_id = _cell(row.data, img_col)
        written = _cell(row.data, lora_col)
        lora = norm_id(written)
        if not image_id or not lora:
            raise EngineError(f"{where(path, row.line)}: empty image id or LoRA id")
        if loras is not None and lora not in loras:
            raise EngineError(f"{where(path, row.line)}: unknown LoRA id {lora!r} for image {image_id!r}; "
                              f"the models file lists {len(loras)} LoRAs ({preview(list(loras))}): "
                              f"fix the id or pass the matching models file ({opt('models')})")
        content = (norm_id(row.data.get(content_col)) if content_col else "") or content_of(image_id) or ""
        out.append(TrainImage(image_id, lora, content, row.line, written))
    check_unique([im.image_id for im in out], "image id", path, [im.line for im in out])
    return out


def loras_of(images: list[TrainImage]) -> dict[str, Lora]:
    """The LoRAs train.csv names, in id order, when no models.csv is given (each by its first spelling)."""
    written: dict[str, str] = {}
    for im in images:
        written.setdefault(im.lora, im.lora_as_written or im.lora)
    return {lora_id: Lora(written[lora_id]) for lora_id in sorted(written, key=lora_order)}


def content_of(image_id: str) -> str | None:
    """The content image an id names (`test-<content>-<n>`, `train-<content>-<lora>`), else None."""
    m = _CONTENT_IN_ID.match(Path(image_id).name)
    return m.group(1) if m else None


def resolve_image(folder: Path, image_id: str) -> Path | None:
    """`folder/image_id`, or with an image suffix added (test ids come without one)."""
    from engine.core.images import IMAGE_SUFFIXES  # PIL: imported when images are read, not with the CLI
    direct = folder / image_id
    if direct.is_file():
        return direct
    suffixes = sorted(IMAGE_SUFFIXES, key=lambda s: (s != ".png", s))  # the layout's own first; the set has no order
    return next((p for suffix in suffixes if (p := folder / f"{image_id}{suffix}").is_file()), None)


def check_image_folder(images: str | Path) -> Path:
    images = Path(images)
    if not images.is_dir():
        raise EngineError(f"{images}: no such folder ({opt('images')})")
    return images


def find_query_images(queries: str | Path, images: str | Path | None = None) -> list[tuple[str, Path | None]]:
    """(query id, image path or None when missing) from a folder of images or a list of ids/paths.

    In a list, each line is an id resolved in `images` (default: the list's folder and its `images/`)
    or a path; the id of an image file is its name without the suffix."""
    from engine.core.images import IMAGE_SUFFIXES, find_images
    queries = Path(queries)
    if queries.is_dir():
        found = find_images(queries)
        if not found:
            raise EngineError(f"{queries}: no images in folder")
        return [(p.stem, p) for p in found]
    folders = [check_image_folder(images)] if images else [queries.parent, queries.parent / "images"]
    out: list[tuple[str, Path | None]] = []
    lines: list[int] = []
    for n, line in enumerate(read_text_lines(queries), 1):
        entry = line.strip()
        if not entry or entry.startswith("#") or (n == 1 and entry.lower() in ("image_id", "id")):
            continue
        given = Path(entry)
        path = given if given.suffix.lower() in IMAGE_SUFFIXES and given.is_file() else None
        qid = given.stem if path is not None else entry
        if path is None:
            path = next((p for f in folders if (p := resolve_image(f, entry)) is not None), None)
        out.append((qid, path))
        lines.append(n)
    if not out:
        raise EngineError(f"{queries}: no query ids in file")
    check_unique([qid for qid, _ in out], "query id", queries, lines)
    return out
