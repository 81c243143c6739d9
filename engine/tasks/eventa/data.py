"""The challenge's own input files: the article database (OpenEvents V1 `database.json`, or a JSON list /
JSONL of articles) and the labeled caption CSV that `engine eventa eval` scores against."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import EngineError, opt, preview, where
from engine.io.tables import cell_text, id_text, pick_column, read_rows
from engine.progress import warn

ARTICLE_ID_FIELDS = ("article_id", "id", "doc_id", "docid")
LABEL_ID_COLUMNS = ("query_id", "image_index", "query_index", "qid", "id")
LABEL_TEXT_COLUMNS = ("query_text", "caption", "text", "query")
LABEL_IMAGE_COLUMNS = ("retrieved_image_id", "image_id", "gold_image_id")
LABEL_ARTICLE_COLUMNS = ("retrieved_article_id", "article_id", "gold_article_id")


# ---------------------------------------------------------------- the database

@dataclass(frozen=True)
class Fields:
    """Names of the article fields (OpenEvents V1: `title`, `content`, `images`, `date`, `url`)."""
    title: str = "title"
    content: str = "content"
    images: str = "images"
    id: str | None = None  # only for a JSON list / JSONL; the OpenEvents object is keyed by article id


@dataclass
class Article:
    id: str
    title: str
    content: str
    images: list[str]
    meta: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return f"{self.title}\n{self.content}".strip()


def parse_image_ids(value: object) -> list[str] | None:
    """An article's image ids (distinct, in order) from a list of ids, a list of {id: …} objects or one
    comma-separated string; None when the value is none of these."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.replace(";", ",").split(",")
    if not isinstance(value, list):
        return None
    out: list[str] = []
    for v in value:
        if isinstance(v, dict):
            v = v.get("id", v.get("image_id"))
        v = str(v).strip() if v is not None else ""
        if v and v not in out:
            out.append(v)
    return out


def read_database(path: str | os.PathLike, fields: Fields = Fields()) -> list[Article]:
    """Articles of an OpenEvents V1 `database.json` ({article_id: {title, content, images, date, url}})
    or a JSON list / JSONL of such objects with an id field. Bad entries are warned about and skipped;
    a field missing from every article is an error naming the fields that are there."""
    path = Path(path)
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no articles")
    cols = set().union(*(r.data.keys() for r in rows[:1000]))
    id_col = pick_column(path, cols, fields.id, ARTICLE_ID_FIELDS, "article id")
    for role, name in (("title", fields.title), ("content", fields.content), ("images", fields.images)):
        if name not in cols:
            raise EngineError(f"{path}: no article has a {name!r} field for the {role} (fields: "
                              f"{', '.join(sorted(cols))}); name it with {opt(role + '_field')}")
    articles: list[Article] = []
    seen: set[str] = set()
    no_id, dups, no_images, bad_images, empty = [], [], [], [], []
    for row in rows:
        aid = id_text(row.data.get(id_col), path, row.line, id_col)
        if not aid:
            no_id.append(where(path, row.line))
            continue
        if aid in seen:
            dups.append(f"{aid} ({where(path, row.line)})")
            continue
        seen.add(aid)
        raw = row.data.get(fields.images)
        images = parse_image_ids(raw)
        if images is None:
            (no_images if raw is None else bad_images).append(aid)
            images = []
        title = cell_text(row.data.get(fields.title), path, row.line, fields.title)
        content = cell_text(row.data.get(fields.content), path, row.line, fields.content)
        if not title and not content:
            empty.append(aid)
        meta = {k: v for k, v in row.data.items()
                if k not in (id_col, fields.title, fields.content, fields.images) and isinstance(v, (str, int, float))}
        articles.append(Article(aid, title, content, images, meta))
    if no_id:
        warn(f"{path}: {len(no_id)} article(s) without an id skipped: {preview(no_id)}")
    if dups:
        warn(f"{path}: {len(dups)} repeated article id(s), the first of each is kept: {preview(dups)}")
    if no_images:
        warn(f"{path}: {len(no_images)} article(s) have no {fields.images!r} field (no images): {preview(no_images)}")
    if bad_images:
        warn(f"{path}: {len(bad_images)} article(s) have a {fields.images!r} value that is not a list of "
             f"image ids (ignored): {preview(bad_images)}")
    if empty:
        warn(f"{path}: {len(empty)} article(s) with empty title and content (found only through their "
             f"images): {preview(empty)}")
    if not articles:
        raise EngineError(f"{path}: no usable articles")
    return articles


# ---------------------------------------------------------------- labeled captions

@dataclass
class Labeled:
    """One labeled caption: its correct image and, where the file says, its correct article."""
    qid: str
    text: str
    image: str
    article: str | None
    line: int


def read_labeled(path: str | os.PathLike, id_column: str | None = None, text_column: str | None = None,
                 image_column: str | None = None, article_column: str | None = None) -> list[Labeled]:
    """The challenge's labeled CSV: query id (or image_index), caption, retrieved_article_id, retrieved_image_id."""
    path = Path(path)
    rows = read_rows(path)
    if not rows:
        raise EngineError(f"{path}: no rows")
    cols = list(rows[0].data.keys())
    id_col = pick_column(path, cols, id_column, LABEL_ID_COLUMNS, "query id")
    text_col = pick_column(path, cols, text_column, LABEL_TEXT_COLUMNS, "caption")
    image_col = pick_column(path, cols, image_column, LABEL_IMAGE_COLUMNS, "correct image id")
    lower = {c.lower(): c for c in cols}
    art_col = article_column or next((lower[c] for c in LABEL_ARTICLE_COLUMNS if c in lower), None)
    if art_col is not None and art_col not in cols:
        raise EngineError(f"{path}: no column {art_col!r} for the article id (columns: {', '.join(cols)})")
    out: list[Labeled] = []
    seen: dict[str, int] = {}
    for row in rows:
        qid = id_text(row.data.get(id_col), path, row.line, id_col)
        text = cell_text(row.data.get(text_col), path, row.line, text_col)
        image = id_text(row.data.get(image_col), path, row.line, image_col)
        if not qid or not text or not image:
            raise EngineError(f"{where(path, row.line)}: empty query id, caption or image id")
        if qid in seen:
            raise EngineError(f"{where(path, row.line)}: duplicate query id {qid!r} (first on line {seen[qid]})")
        seen[qid] = row.line
        article = (id_text(row.data.get(art_col), path, row.line, art_col) or None) if art_col else None
        out.append(Labeled(qid, text, image, article, row.line))
    return out


def labeled_qrels(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """The labeled CSV as qrels for `engine eval` (each caption's correct image, grade 1): what an EVENTA
    submission, read as a run of image ids, is scored against."""
    return {row.qid: {row.image: 1} for row in read_labeled(path)}
