"""Building an EVENTA index, and what one looks like on disk (the index format, 2):

    indexes/NAME/images/     image collection (image–text model: conse offline, clip:ARCH:WEIGHTS, sbert:DIR)
    indexes/NAME/articles/   passage collection (sentence model; item meta `article` = article id) with,
                             attached: `bm25` (BM25 over title + content, one doc per article),
                             `article_images` ({article id: [image ids]}) and, in its `extra`, the build's
                             fields, models, counts and which image collection it goes with

The articles collection is written last and its attached parts are the commit point: a build cut short
leaves an index that says so, never a mismatched one. Format 1 (engine 0.1) kept `eventa.json` and `bm25/`
beside the two collections; such an index is rebuilt, reusing its image embeddings.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from engine.core.storage.index.bm25 import BM25Index
from engine.core.storage.builder.options import BuildOptions as CoreBuildOptions
from engine.core.collection import PARTIAL, Collection, collection_path, list_collections
from engine.core.sources import Item
from engine.core.ranking.text_pooling import pack_passages
from engine.errors import EngineError, opt, preview
from engine.io.options import Int
from engine.progress import info, warn
from engine.tasks.eventa.data import Article, Fields, read_database

FORMAT = 2
DEFAULT_NAME = "eventa"
IMAGES, ARTICLES = "images", "articles"
BM25, ARTICLE_IMAGES = "bm25", "article_images"
OLD_CONFIG, OLD_BM25 = "eventa.json", "bm25"  # format 1, beside the collections
MIN_PASSAGE_WORDS = 16
PASSAGE_WORDS = Int(MIN_PASSAGE_WORDS, 100_000)
"""Words per passage: at least the splitter's floor (`--passage-words`, `BuildOptions.check`)."""
_CORE = CoreBuildOptions()


@dataclass(frozen=True)
class BuildOptions:
    """How `engine eventa build` builds an index; the CLI's option defaults are these."""
    model: str | None = None        # image–text model: any spec that embeds images (None: conse)
    text_model: str | None = None   # sentence model of the passages (None: MiniLM)
    fields: Fields = Fields()
    passage_words: int = 150        # words per passage of whole sentences, title included
    index: str = _CORE.index        # FAISS factory string of both collections
    batch_size: int = _CORE.batch_size  # images per forward pass (passages: at least 64)
    batch_pixels: int | None = None  # images: each forward pass also cut at this many pixels (VLM embedders)
    workers: int = _CORE.workers    # image-decoding threads
    force: bool = False             # rebuild an index that exists
    device: str = _CORE.device      # where the encoders run (engine.core.encoders.device)
    ray: str | None = _CORE.ray     # encode on Ray: "local", "auto", "ray://…" (the image stage gains most)

    def check(self) -> "BuildOptions":
        from engine.core.encoders.device import check_device
        check_device(self.device)
        PASSAGE_WORDS.check("passage_words", self.passage_words, text=False)
        from engine.core.storage.builder.options import BATCH_PIXELS
        BATCH_PIXELS.check("batch_pixels", self.batch_pixels, text=False)
        from engine.core.encoders.registry import check_embeds
        if self.model is not None:
            check_embeds(self.model, "image", opt("model"))
        if self.text_model is not None:
            check_embeds(self.text_model, "text", opt("text_model"))
        return self


def eventa_path(name: str, root: str | os.PathLike | None = None) -> Path:
    return collection_path(name, root)


# ---------------------------------------------------------------- what is on disk

def image_identity(images: Collection) -> dict:
    """Which build of the image collection this is: a rebuild raises the generation (kept across `force`)."""
    return {"generation": images.manifest.get("generation"), "created": images.manifest.get("created")}


def index_state(folder: Path) -> str:
    """`complete`, `old` (format 1), `incomplete` (a build cut short or interrupted midway) or `none`."""
    if (folder / OLD_CONFIG).is_file() or (folder / OLD_BM25).is_dir():
        return "old"
    names = list_collections(folder)
    if ARTICLES not in names:
        started = IMAGES in names or any((folder / n / PARTIAL).is_dir() for n in (IMAGES, ARTICLES))
        return "incomplete" if started else "none"
    try:
        articles = Collection.open(ARTICLES, folder, verify=False)
        images = Collection.open(IMAGES, folder, verify=False)
    except EngineError:
        return "incomplete"
    if not {BM25, ARTICLE_IMAGES} <= set(articles.stored):
        return "old" if articles.manifest.get("format", 1) == 1 else "incomplete"
    if articles.extra.get("image_collection") != image_identity(images):
        return "incomplete"
    return "complete"


def open_collections(name: str, root: str | os.PathLike | None = None) -> tuple[Path, Collection, Collection]:
    """The folder, image collection and article collection of a finished index; anything else is one error
    line that says what is there and how to rebuild it."""
    folder = eventa_path(name, root)
    state = index_state(folder)
    if state == "none":
        raise EngineError(f"no EVENTA index {name!r} in {folder.parent}/; build it first (`engine eventa build` "
                          f"with {opt('database')} and {opt('images')})")
    if state == "old":
        raise EngineError(f"{folder} is an EVENTA index of format 1 (the old one); rebuild it with "
                          f"`engine eventa build` on the same database and images ({opt('force')}): its image "
                          "embeddings are reused")
    if state == "incomplete":
        raise EngineError(f"EVENTA index {name!r} in {folder} is incomplete (a build was cut short); run the same "
                          "`engine eventa build` again: the parts it finished are kept")
    return folder, Collection.open(IMAGES, folder), Collection.open(ARTICLES, folder)


# ---------------------------------------------------------------- building

def build_eventa(database: str | os.PathLike, images: str | os.PathLike, name: str = DEFAULT_NAME,
                 root: str | os.PathLike | None = None, options: BuildOptions = BuildOptions()) -> dict:
    """Build the image collection, then the article-passage collection with BM25 and the article → image map;
    returns the settings and counts stored with it."""
    from engine.core.sources import image_items

    o = options
    folder = eventa_path(name, root)
    state = index_state(folder)
    if state in ("complete", "old") and not o.force:
        raise EngineError(f"EVENTA index {name!r} already exists in {folder}; rebuild it with {opt('force')}")
    o.check()
    articles = read_database(database, o.fields)
    img_items = image_items(images)
    (folder / OLD_CONFIG).unlink(missing_ok=True)  # format 1 leftovers: the new index replaces them
    shutil.rmtree(folder / OLD_BM25, ignore_errors=True)
    in_folder = {it.id for it in img_items}
    referenced = {img for a in articles for img in a.images}
    missing = sorted(referenced - in_folder)
    if missing:
        warn(f"{len(missing)} of {len(referenced)} image ids of {database} have no file in {images} "
             f"(they cannot be ranked): {preview(missing)}")
    if referenced and not referenced & in_folder:
        raise EngineError(f"no image id of {database} matches a file name in {images} (ids there look like "
                          f"{preview(sorted(in_folder), 3)}; the database names {preview(sorted(referenced), 3)})")
    orphans = len(in_folder - referenced)
    if orphans:
        info(f"{orphans} images in {images} belong to no article: only the global text→image search finds them")

    from engine.core.cluster import ray_or_here
    from engine.core.encoders.device import set_device
    set_device(o.device)
    with ray_or_here(o.ray):  # one Ray session for both stages
        return _build(folder, name, o, SourcesRead(database, images, articles, img_items, in_folder, missing,
                                                   orphans))


@dataclass(frozen=True)
class SourcesRead:
    """The database and the image folder as read and matched: the articles, the image items, the ids in the
    folder, the database's image ids missing there and the count of images no article names."""
    database: Any
    images: Any
    articles: list
    img_items: list
    in_folder: set[str]
    missing: list[str]
    orphans: int


def _build(folder: Path, name: str, o: BuildOptions, read: SourcesRead) -> dict:
    database, images, articles, img_items = read.database, read.images, read.articles, read.img_items
    in_folder, missing, orphans = read.in_folder, read.missing, read.orphans
    from engine.core.encoders.registry import DEFAULT_IMAGE_SPEC, DEFAULT_TEXT_SPEC, load_encoder
    image_spec = load_encoder(o.model or DEFAULT_IMAGE_SPEC).spec
    text_spec = load_encoder(o.text_model or DEFAULT_TEXT_SPEC).spec
    started = time.perf_counter()
    image_col = _reusable(folder, IMAGES, image_spec, ids=in_folder)
    if image_col is not None:
        info(f"image collection of {name!r} is already built: kept")
    else:
        image_col = Collection.build(IMAGES, items=img_items, kind="image", root=folder, model=image_spec,
                                     index=o.index, batch_size=o.batch_size, batch_pixels=o.batch_pixels,
                                     workers=o.workers, force=True,
                                     device=o.device, ray=o.ray)
    image_seconds = time.perf_counter() - started

    started = time.perf_counter()
    passages = encode_passages(folder, articles, text_spec, o.passage_words, o.index, max(o.batch_size, 64),
                               device=o.device, ray=o.ray)
    bm25 = BM25Index.build([a.id for a in articles], [a.text for a in articles])
    settings = {"database": str(database), "images": str(images), "fields": asdict(o.fields),
                "passage_words": o.passage_words,
                "counts": {"articles": len(articles), "passages": len(passages), "images": len(image_col),
                           "images_missing": len(missing), "images_without_article": orphans},
                "seconds": {"images": round(image_seconds, 2), "articles": round(time.perf_counter() - started, 2)},
                "image_model": image_spec, "text_model": text_spec}
    stored = commit_articles(passages, articles, bm25, image_col, settings)
    info(f"EVENTA index {name!r}: {len(articles)} articles ({len(passages)} passages), {len(image_col)} images "
         f"in {folder}")
    return stored


def passage_items(articles: Sequence[Article], passage_words: int) -> list[Item]:
    """Each article cut into passages of whole sentences (`ARTICLE#n`, title repeated in each)."""
    return [Item(f"{a.id}#{n}", text, {"article": a.id})
            for a in articles for n, text in enumerate(pack_passages(a.content, passage_words, a.title))]


def _passages_digest(passages: Sequence[Item]) -> str:
    h = hashlib.sha256()
    for p in passages:
        h.update(p.id.encode() + b"\0" + p.source.encode() + b"\1")
    return h.hexdigest()


def _reusable(folder: Path, name: str, spec: str, ids: set[str] | None = None,
              digest: str | None = None) -> Collection | None:
    """A collection of `folder` already built with `spec` over the same items (the same `ids`, failed ones
    included, or the same passages `digest`), or None: it need not be encoded again."""
    if name not in list_collections(folder):
        return None
    try:
        col = Collection.open(name, folder)
    except EngineError:
        return None
    if col.manifest.get("encoder") != spec:
        return None
    if digest is not None:
        return col if col.extra.get("passages") == digest else None
    have = set(col.ids) | {s["id"] for s in col.manifest.get("skipped", [])}
    return col if have == ids else None


def encode_passages(folder: Path, articles: Sequence[Article], text_spec: str, passage_words: int = 150,
                    index: str = _CORE.index, batch_size: int = 64, device: str = _CORE.device,
                    ray: str | None = None) -> Collection:
    """The passage collection of the articles; one of the same passages and model is kept as it is."""
    passages = passage_items(articles, passage_words)
    digest = _passages_digest(passages)
    col = _reusable(folder, ARTICLES, text_spec, digest=digest)
    if col is not None:
        info(f"article collection in {folder} is already built: kept")
        return col
    return Collection.build(ARTICLES, items=passages, kind="text", root=folder, model=text_spec, index=index,
                            batch_size=batch_size, force=True, extra={"passages": digest}, device=device, ray=ray)


def commit_articles(passages: Collection, articles: Sequence[Article], bm25: BM25Index, images: Collection,
                    settings: dict) -> dict:
    """Attach BM25, the article → image ids map and `settings` to the passage collection: the commit point
    of a build. Returns the settings as stored."""
    extra = {"format": FORMAT, **settings, "image_collection": image_identity(images)}
    col = passages.attach(files={BM25: bm25.writer()}, documents={ARTICLE_IMAGES: {a.id: a.images for a in articles}},
                          extra=extra)
    return col.extra
