"""EVENTA 2025 Track 2 (caption → news image) with an article stage, as every top team of 2025 did it.

Per caption: (1) articles are retrieved by dense passages (MaxP over title + content chunks) and
BM25 over the whole article, fused (RRF or weights); (2) the images of the top articles are scored
by text→image similarity and fused with their article's score; (3) a global text→image search fills
the top 10. On disk, one folder per database:

    indexes/NAME/images/     image collection (image–text model: conse offline, clip:ARCH:WEIGHTS)
    indexes/NAME/articles/   passage collection (sentence model; item meta `article` = article id)
    indexes/NAME/bm25/       BM25 (bm25s) over title + content, one doc per article
    indexes/NAME/eventa.json fields, models, article → image ids (written last: the commit point)
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import EngineError, where
from engine.io.atomic import write_json
from engine.io.tables import pick_column, read_queries, read_rows
from engine.progress import info, warn
from engine.core.text_pooling import POOLINGS, encode_queries, pack_passages, similarity

DEFAULT_ROOT = Path("indexes")
CONFIG = "eventa.json"
IMAGES, ARTICLES, BM25_DIR = "images", "articles", "bm25"
STAGES = ("images", "articles_dense", "articles_bm25", "articles", "fused")
STAGE_HELP = {"images": "text→image search alone", "articles_dense": "dense article search, images in article order",
              "articles_bm25": "BM25 article search, images in article order",
              "articles": "dense + BM25 articles, images in article order",
              "fused": "articles + text→image scores inside them, filled by the global search"}
FUSIONS = ("rrf", "weighted")
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


def _image_ids(value: object) -> list[str] | None:
    """An article's image ids from a list of ids, a list of {id: …} objects, or one comma-separated string."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.replace(";", ",").split(",")]
    if not isinstance(value, list):
        return None
    out = []
    for v in value:
        if isinstance(v, dict):
            v = v.get("id", v.get("image_id"))
        v = str(v).strip() if v is not None else ""
        if v and v not in out:
            out.append(v)
    return out


def _show(items: Sequence[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (" …" if len(items) > n else "")


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
                              f"{', '.join(sorted(cols))}); name it with --{role}-field")
    articles: list[Article] = []
    seen: dict[str, int] = {}
    no_id, dups, no_images, bad_images, empty = [], [], [], [], []
    for row in rows:
        aid = str(row.data.get(id_col, "") or "").strip()
        if not aid:
            no_id.append(where(path, row.line))
            continue
        if aid in seen:
            dups.append(f"{aid} ({where(path, row.line)})")
            continue
        seen[aid] = row.line
        raw = row.data.get(fields.images)
        images = _image_ids(raw)
        if images is None:
            (no_images if raw is None else bad_images).append(aid)
            images = []
        title = str(row.data.get(fields.title) or "").strip()
        content = str(row.data.get(fields.content) or "").strip()
        if not title and not content:
            empty.append(aid)
        meta = {k: v for k, v in row.data.items()
                if k not in (id_col, fields.title, fields.content, fields.images) and isinstance(v, (str, int, float))}
        articles.append(Article(aid, title, content, images, meta))
    if no_id:
        warn(f"{path}: {len(no_id)} article(s) without an id skipped: {_show(no_id)}")
    if dups:
        warn(f"{path}: {len(dups)} repeated article id(s), the first of each is kept: {_show(dups)}")
    if no_images:
        warn(f"{path}: {len(no_images)} article(s) have no {fields.images!r} field (no images): {_show(no_images)}")
    if bad_images:
        warn(f"{path}: {len(bad_images)} article(s) have a {fields.images!r} value that is not a list of "
             f"image ids (ignored): {_show(bad_images)}")
    if empty:
        warn(f"{path}: {len(empty)} article(s) with empty title and content (found only through their "
             f"images): {_show(empty)}")
    if not articles:
        raise EngineError(f"{path}: no usable articles")
    return articles


# ---------------------------------------------------------------- building

def eventa_path(name: str, root: str | os.PathLike | None = None) -> Path:
    from engine.core.collection import collection_path
    return collection_path(name, root if root is not None else DEFAULT_ROOT)


def _reusable(folder: Path, sub: str, ids: set[str], spec: str) -> bool:
    """A sub-collection left by an interrupted `eventa build` of the same input need not be encoded again."""
    from engine.core.collection import MANIFEST, Collection
    if not (folder / sub / MANIFEST).is_file():
        return False
    try:
        col = Collection.open(sub, folder)
    except EngineError:
        return False
    have = set(col.ids) | {s["id"] for s in col.manifest.get("skipped", [])}
    return col.manifest.get("encoder") == spec and have == ids


def build_eventa(database: str | os.PathLike, images: str | os.PathLike, name: str = "eventa",
                 root: str | os.PathLike | None = None, model: str | None = None, text_model: str | None = None,
                 fields: Fields = Fields(), passage_words: int = 150, index: str = "Flat", batch_size: int = 32,
                 workers: int = 2, force: bool = False) -> dict:
    """Build the image collection, the article-passage collection and the BM25 index for one database."""
    from engine.core.collection import Collection
    from engine.core.encoders import DEFAULT_IMAGE_SPEC, DEFAULT_TEXT_SPEC, load_encoder
    from engine.core.sources import image_items

    folder = eventa_path(name, root)
    if (folder / CONFIG).is_file() and not force:
        raise EngineError(f"EVENTA index {name!r} already exists in {folder}; use --force to rebuild it")
    if passage_words < 16:
        raise EngineError(f"--passage-words must be at least 16, not {passage_words}")
    articles = read_database(database, fields)
    img_items = image_items(images)
    (folder / CONFIG).unlink(missing_ok=True)  # a rebuild cut short leaves no index, not a mismatched one
    in_folder = {it.id for it in img_items}
    referenced = {img for a in articles for img in a.images}
    missing = sorted(referenced - in_folder)
    if missing:
        warn(f"{len(missing)} of {len(referenced)} image ids of {database} have no file in {images} "
             f"(they cannot be ranked): {_show(missing)}")
    if referenced and not referenced & in_folder:
        raise EngineError(f"no image id of {database} matches a file name in {images} (ids there look like "
                          f"{_show(sorted(in_folder), 3)}; the database names {_show(sorted(referenced), 3)})")
    orphans = len(in_folder - referenced)
    if orphans:
        info(f"{orphans} images in {images} belong to no article: only the global text→image search finds them")

    image_spec = load_encoder(model or DEFAULT_IMAGE_SPEC).spec
    text_spec = load_encoder(text_model or DEFAULT_TEXT_SPEC).spec
    started = time.perf_counter()
    if _reusable(folder, IMAGES, in_folder, image_spec):
        info(f"image collection of {name!r} is already built: kept")
    else:
        Collection.build(IMAGES, items=img_items, kind="image", root=folder, model=image_spec, index=index,
                         batch_size=batch_size, workers=workers, force=True)
    image_seconds = time.perf_counter() - started

    n_passages, text_seconds = build_article_indexes(folder, articles, text_spec, passage_words, index,
                                                     max(batch_size, 64))
    indexed = len(Collection.open(IMAGES, folder, verify=False))
    config = commit_config(folder, articles, image_spec, text_spec, {
        "database": str(database), "images": str(images), "fields": asdict(fields), "passage_words": passage_words,
        "counts": {"articles": len(articles), "passages": n_passages, "images": indexed,
                   "images_missing": len(missing), "images_without_article": orphans},
        "seconds": {"images": round(image_seconds, 2), "articles": round(text_seconds, 2)}})
    info(f"EVENTA index {name!r}: {len(articles)} articles ({n_passages} passages), {indexed} images in {folder}")
    return config


def build_article_indexes(folder: Path, articles: Sequence[Article], text_spec: str, passage_words: int = 150,
                          index: str = "Flat", batch_size: int = 64) -> tuple[int, float]:
    """The passage collection and the BM25 index of the articles; returns (passages, seconds spent)."""
    from engine.core.bm25 import BM25Index
    from engine.core.collection import Collection
    from engine.core.sources import Item
    started = time.perf_counter()
    passages = [Item(f"{a.id}#{n}", text, {"article": a.id})
                for a in articles for n, text in enumerate(pack_passages(a.content, passage_words, a.title))]
    if _reusable(folder, ARTICLES, {p.id for p in passages}, text_spec):
        info(f"article collection in {folder} is already built: kept")
    else:
        Collection.build(ARTICLES, items=passages, kind="text", root=folder, model=text_spec, index=index,
                         batch_size=batch_size, force=True)
    BM25Index.build([a.id for a in articles], [a.text for a in articles]).save(folder / BM25_DIR)
    return len(passages), time.perf_counter() - started


def commit_config(folder: Path, articles: Sequence[Article], image_spec: str, text_spec: str, extra: dict) -> dict:
    """Write eventa.json, the commit point of a build; returns it without the article → images map."""
    config = {"format": 1, **extra, "image_model": image_spec, "text_model": text_spec,
              "article_images": {a.id: a.images for a in articles}}
    write_json(folder / CONFIG, config)
    return {k: v for k, v in config.items() if k != "article_images"}


# ---------------------------------------------------------------- ranking

@dataclass
class RankParams:
    """Knobs of the pipeline; the defaults are the ones measured best on the fixture and coco-mini."""
    pooling: str = "mean"          # mean | max | full (truncating)
    article_fusion: str = "rrf"    # dense + BM25 articles: rrf | weighted (min-max)
    dense_weight: float = 1.0
    bm25_weight: float = 1.0
    top_articles: int = 10         # whose images are scored
    image_fusion: str = "weighted"  # image similarity + article score: weighted | rrf
    article_weight: float = 0.8    # share of the article score in the image fusion (0: images only)
    depth: int = 100               # articles kept per system before fusion
    k: int = 10

    def check(self) -> None:
        if self.pooling not in POOLINGS:
            raise EngineError(f"unknown pooling {self.pooling!r}; use one of {', '.join(POOLINGS)}")
        for what, value in (("article fusion", self.article_fusion), ("image fusion", self.image_fusion)):
            if value not in FUSIONS:
                raise EngineError(f"unknown {what} {value!r}; use one of {', '.join(FUSIONS)}")
        if not 0.0 <= self.article_weight <= 1.0:
            raise EngineError(f"--article-weight must be between 0 and 1, not {self.article_weight}")
        if self.top_articles < 1 or self.depth < 1 or self.k < 1:
            raise EngineError("--top-articles, --depth and k must be at least 1")
        if self.dense_weight < 0 or self.bm25_weight < 0 or self.dense_weight + self.bm25_weight == 0:
            raise EngineError("--dense-weight and --bm25-weight must be >= 0 and not both 0")


Ranked = list[tuple[str, float]]


@dataclass
class RankResult:
    images: dict[str, list[Ranked]]    # stage → per query image ranking (best first)
    articles: dict[str, list[Ranked]]  # article stage → per query article ranking


def _text_side(spec: str) -> str:
    """The sentence model behind a spec's text tower, to share query vectors between the two stages."""
    if spec.startswith("conse"):
        for part in spec.partition(":")[2].split(","):
            if part.startswith("text="):
                return f"sbert:{part[5:]}"
    return spec


def sweep_stage(weight: float) -> str:
    return f"fused w={weight:g}"


class Timer:
    """Seconds per stage, one value per `rank` call: per-query latency percentiles when called one caption at a time."""

    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = {}

    def add(self, stage: str, seconds: float) -> None:
        self.calls.setdefault(stage, []).append(seconds)


class EventaIndex:
    """An opened EVENTA index: the two collections, BM25 and the article → image map."""

    def __init__(self, folder: Path, config: dict):
        from engine.core.collection import Collection
        self.folder = folder
        self.config = config
        self.images = Collection.open(IMAGES, folder)
        self.passages = Collection.open(ARTICLES, folder)
        self._bm25 = None
        self.image_ids = self.images.ids
        self.image_row = {iid: n for n, iid in enumerate(self.image_ids)}
        self.image_emb = np.asarray(self.images.embeddings, dtype=np.float32)
        self.passage_article = [it["article"] for it in self.passages.items]
        self.article_images = {a: [i for i in imgs if i in self.image_row]
                               for a, imgs in config["article_images"].items()}

    @classmethod
    def open(cls, name: str = "eventa", root: str | os.PathLike | None = None) -> "EventaIndex":
        folder = eventa_path(name, root)
        cpath = folder / CONFIG
        if not cpath.is_file():
            raise EngineError(f"no EVENTA index {name!r} in {folder.parent}/; build it with "
                              f"`engine eventa build --database DB --images DIR --name {name}`")
        try:
            config = json.loads(cpath.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise EngineError(f"{cpath}: not valid JSON ({exc}); rebuild with "
                              f"`engine eventa build ... --force`") from None
        return cls(folder, config)

    @property
    def bm25(self):
        if self._bm25 is None:
            from engine.core.bm25 import BM25Index
            self._bm25 = BM25Index.load(self.folder / BM25_DIR)
        return self._bm25

    def _dense(self, col, keys: Sequence[str], sv, pooling: str, depth: int) -> list[dict[str, float]]:
        """Per text: {key: best score} over its top `depth` rows (rows map to keys: passage → article)."""
        if pooling == "mean":
            queries, owner = sv.pooled(), np.arange(sv.n_texts)
        else:
            queries, owner = sv.vectors, sv.owner
        scores, rows = col.search_vectors(queries, depth)
        out: list[dict[str, float]] = [{} for _ in range(sv.n_texts)]
        for q, srow, irow in zip(owner, scores, rows):
            best = out[int(q)]
            for s, i in zip(srow.tolist(), irow.tolist()):
                if i >= 0:
                    key = keys[i]
                    if s > best.get(key, -math.inf):
                        best[key] = s
        return out

    def rank(self, texts: Sequence[str], params: RankParams = RankParams(), stages: Sequence[str] = ("fused",),
             timer: Timer | None = None, sweep: Sequence[float] = ()) -> RankResult:
        """Rank images for each caption; `stages` picks which of STAGES to return (all share the work);
        `sweep` adds a fused ranking per other article weight (stage names from `sweep_stage`)."""
        from engine.core.fusion import ranked, rrf, weighted
        params.check()
        unknown = [s for s in stages if s not in STAGES]
        if unknown:
            raise EngineError(f"unknown stage {unknown[0]!r}; stages are {', '.join(STAGES)}")
        timer = timer or Timer()
        texts = list(texts)
        t0 = time.perf_counter()
        text_enc, image_enc = self.passages.encoder, self.images.encoder
        sv_text = encode_queries(text_enc, texts, params.pooling)
        sv_image = sv_text if _text_side(image_enc.spec) == _text_side(text_enc.spec) \
            else encode_queries(image_enc, texts, params.pooling)
        t1 = time.perf_counter()
        timer.add("encode", t1 - t0)

        dense = self._dense(self.passages, self.passage_article, sv_text, params.pooling, params.depth * 3)
        dense = [ranked(d)[:params.depth] for d in dense]
        t2 = time.perf_counter()
        timer.add("articles_dense", t2 - t1)
        bm25 = [self.bm25.search(t, params.depth) for t in texts]
        t3 = time.perf_counter()
        timer.add("articles_bm25", t3 - t2)
        glob = self._dense(self.images, self.image_ids, sv_image, params.pooling, params.k * 5)
        glob = [ranked(g)[:params.k * 5] for g in glob]
        t4 = time.perf_counter()
        timer.add("images_global", t4 - t3)

        w = (params.dense_weight, params.bm25_weight)
        fused_articles = [rrf([d, b], weights=w, depth=params.depth) if params.article_fusion == "rrf"
                          else weighted([d, b], weights=w, method="minmax", depth=params.depth)
                          for d, b in zip(dense, bm25)]
        out_images: dict[str, list[Ranked]] = {}
        want = set(stages)
        for stage, arts in (("articles_dense", dense), ("articles_bm25", bm25), ("articles", fused_articles)):
            if stage in want:
                out_images[stage] = [self._fill(self._article_order(a), g, params.k) for a, g in zip(arts, glob)]
        if "images" in want:
            out_images["images"] = [g[:params.k] for g in glob]
        if "fused" in want:
            out_images["fused"] = [self._fill(self._fuse_images(n, sv_image, a, params), g, params.k)
                                   for n, (a, g) in enumerate(zip(fused_articles, glob))]
        for w in sweep:  # other article weights, for tuning: the expensive parts above are shared
            pw = RankParams(**{**asdict(params), "article_weight": w})
            out_images[sweep_stage(w)] = [self._fill(self._fuse_images(n, sv_image, a, pw), g, params.k)
                                          for n, (a, g) in enumerate(zip(fused_articles, glob))]
        timer.add("fusion", time.perf_counter() - t4)
        timer.add("total", time.perf_counter() - t0)
        return RankResult(out_images, {"articles_dense": dense, "articles_bm25": bm25, "articles": fused_articles})

    def _article_order(self, articles: Ranked, limit: int = 50) -> Ranked:
        """Images of ranked articles, article by article in database order (the lead image first)."""
        out: Ranked = []
        seen: set[str] = set()
        for aid, _ in articles:
            for img in self.article_images.get(aid, []):
                if img not in seen:
                    seen.add(img)
                    out.append((img, float(-len(out))))
            if len(out) >= limit:
                break
        return out

    def _fuse_images(self, n: int, sv, articles: Ranked, params: RankParams) -> Ranked:
        """Images of the top articles: text→image similarity fused with the best score of their articles."""
        from engine.core.fusion import rrf, weighted
        article_score: dict[str, float] = {}
        for aid, score in articles[:params.top_articles]:
            for img in self.article_images.get(aid, []):
                article_score.setdefault(img, score)  # articles come best first
        if not article_score:
            return []
        cands = list(article_score)
        sims = similarity(sv, n, self.image_emb[[self.image_row[c] for c in cands]], params.pooling)
        image_rank = sorted(zip(cands, sims.tolist()), key=lambda kv: -kv[1])
        article_rank = list(article_score.items())
        ws = (1.0 - params.article_weight, params.article_weight)
        if params.image_fusion == "rrf":
            return rrf([image_rank, article_rank], weights=ws)
        return weighted([image_rank, article_rank], weights=ws, method="minmax")

    @staticmethod
    def _fill(first: Ranked, fallback: Ranked, k: int) -> Ranked:
        """`first`, then the fallback's images not in it, to k; scores kept strictly decreasing."""
        out = list(first[:k])
        seen = {d for d, _ in out}
        floor = min((s for _, s in out), default=0.0)
        for doc, _ in fallback:
            if len(out) >= k:
                break
            if doc not in seen:
                seen.add(doc)
                floor -= 1.0
                out.append((doc, floor))
        return out


# ---------------------------------------------------------------- submit and evaluate

def rank_in_batches(index: EventaIndex, texts: Sequence[str], params: RankParams, stages: Sequence[str],
                    batch_size: int = 64, timer: Timer | None = None, sweep: Sequence[float] = ()) -> RankResult:
    from engine.progress import track
    names = list(stages) + [sweep_stage(w) for w in sweep]
    result = RankResult({s: [] for s in names}, {s: [] for s in ("articles_dense", "articles_bm25", "articles")})
    starts = range(0, len(texts), batch_size)
    for start in track(starts, len(starts), "ranking captions"):
        part = index.rank(texts[start:start + batch_size], params, stages, timer, sweep)
        for s in names:
            result.images[s] += part.images[s]
        for s in result.articles:
            result.articles[s] += part.articles[s]
    return result


def submit_eventa(queries: str | os.PathLike, out: str | os.PathLike, name: str = "eventa",
                  root: str | os.PathLike | None = None, params: RankParams = RankParams(),
                  batch_size: int = 64) -> tuple[Path, Path]:
    """Rank every caption of a `query_id,query_text` CSV and write `submission.csv` beside the zip `out`."""
    from engine.tasks.eventa.submission import CSV_NAME, write_eventa_csv, zip_submission
    from engine.tasks.eventa.submission import validate_eventa
    out = Path(out)
    if out.suffix.lower() != ".zip":
        raise EngineError(f"--out {out}: give the zip to write, e.g. --out submission.zip")
    params.check()
    qs = read_queries(queries)
    index = EventaIndex.open(name, root)
    result = rank_in_batches(index, [t for _, t in qs], params, ("fused",), batch_size)
    csv_path = out.with_name(CSV_NAME)
    write_eventa_csv(csv_path, {q: r for (q, _), r in zip(qs, result.images["fused"])}, [q for q, _ in qs])
    zip_submission(csv_path, out)
    report = validate_eventa(out, queries)
    if not report.ok:  # the writer guarantees the format: this would be our bug, never silently uploaded
        raise EngineError(f"the written submission is invalid: {report.problems[0]}")
    empty = sum(1 for r in result.images["fused"] if len(r) < 10)
    if empty:
        warn(f"{empty} queries have fewer than 10 images ('#' fills the slots): the index holds "
             f"{len(index.image_ids)} images")
    info(f"wrote {csv_path} and {out} ({len(qs)} queries)")
    return csv_path, out


@dataclass
class Labeled:
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
    out, seen = [], {}
    for row in rows:
        qid = str(row.data.get(id_col, "") or "").strip()
        text = str(row.data.get(text_col, "") or "").strip()
        image = str(row.data.get(image_col, "") or "").strip()
        if not qid or not text or not image:
            raise EngineError(f"{where(path, row.line)}: empty query id, caption or image id")
        if qid in seen:
            raise EngineError(f"{where(path, row.line)}: duplicate query id {qid!r} (first on line {seen[qid]})")
        seen[qid] = row.line
        article = str(row.data.get(art_col, "") or "").strip() or None if art_col else None
        out.append(Labeled(qid, text, image, article, row.line))
    return out


def _positional(ranking: Ranked) -> dict[str, float]:
    return {doc: float(len(ranking) - i) for i, (doc, _) in enumerate(ranking)}


def score_stages(labeled: Sequence[Labeled], result: RankResult) -> dict[str, dict[str, float]]:
    """EVENTA Overall and parts per stage (engine.eval.evaluate), plus the gold article's recall@10 where known."""
    from engine.eval.evaluate import evaluate
    qrels = {q.qid: {q.image: 1} for q in labeled}
    table: dict[str, dict[str, float]] = {}
    for stage, rankings in result.images.items():
        run = {q.qid: _positional(r) for q, r in zip(labeled, rankings)}
        table[stage] = dict(evaluate(run, qrels, "eventa").means)
        arts = result.articles.get("articles" if stage.startswith("fused") else stage)
        gold = {q.qid: {q.article: 1} for q in labeled if q.article}
        if arts is not None and gold:
            arun = {q.qid: _positional(r) for q, r in zip(labeled, arts) if q.qid in gold}
            means = evaluate(arun, gold, "recall@1,recall@10").means
            table[stage]["article_r@1"], table[stage]["article_r@10"] = means["recall@1"], means["recall@10"]
    return table


def eval_eventa(labeled_path: str | os.PathLike, name: str = "eventa", root: str | os.PathLike | None = None,
                params: RankParams = RankParams(), poolings: Sequence[str] = ("mean", "max"),
                batch_size: int = 64, limit: int | None = None, sweep: Sequence[float] = (),
                columns: dict[str, str | None] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """{pooling: {stage: {metric: value}}} for every stage alone and fused, on a labeled CSV; `sweep`
    adds the fused stage at other article weights (`fused w=…` rows) to tune --article-weight."""
    labeled = read_labeled(labeled_path, **(columns or {}))[:limit]
    index = EventaIndex.open(name, root)
    unknown = [q.image for q in labeled if q.image not in index.image_row]
    if unknown:
        warn(f"{len(unknown)} labeled images are not in the index (those queries score 0): {_show(unknown)}")
    out = {}
    for pooling in poolings:
        p = RankParams(**{**asdict(params), "pooling": pooling})
        result = rank_in_batches(index, [q.text for q in labeled], p, STAGES, batch_size, sweep=sweep)
        out[pooling] = score_stages(labeled, result)
    return out


COLUMNS = (("eventa", "Overall"), ("eventa.map", "mAP"), ("eventa.mrr", "MRR"), ("eventa.r@1", "R@1"),
           ("eventa.r@5", "R@5"), ("eventa.r@10", "R@10"), ("article_r@1", "art R@1"), ("article_r@10", "art R@10"))


def format_stage_table(table: dict[str, dict[str, dict[str, float]]], markdown: bool = False) -> str:
    """One row per pooling × stage; `markdown` for docs."""
    heads = ["pooling", "stage"] + [h for _, h in COLUMNS]
    rows = [[pooling, stage] + [f"{vals[c]:.3f}" if c in vals else "–" for c, _ in COLUMNS]
            for pooling, stages in table.items() for stage, vals in stages.items()]
    if markdown:
        lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(r[i]) for r in [heads] + rows) for i in range(len(heads))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in [heads] + rows)


def eval_command(labeled_path: str | os.PathLike, name: str, root: str | os.PathLike | None, params: RankParams,
                 poolings: Sequence[str], out: str | os.PathLike | None = None, as_json: bool = False,
                 markdown: bool = False, batch_size: int = 64, limit: int | None = None,
                 sweep: Sequence[str] = (), columns: dict[str, str | None] | None = None) -> str:
    """`engine eventa eval`: the stage table as text, Markdown or JSON (and written to `out` if given)."""
    bad = [p for p in poolings if p not in POOLINGS]
    if bad or not poolings:
        raise EngineError(f"--pooling takes a comma-separated list of {', '.join(POOLINGS)}, "
                          f"not {','.join(poolings)!r}")
    try:
        weights = [float(w) for w in sweep]
    except ValueError:
        raise EngineError(f"--sweep takes comma-separated article weights between 0 and 1, "
                          f"not {','.join(sweep)!r}") from None
    if any(not 0.0 <= w <= 1.0 for w in weights):
        raise EngineError(f"--sweep weights must lie between 0 and 1, not {','.join(sweep)!r}")
    table = eval_eventa(labeled_path, name, root, params, poolings, batch_size, limit, weights, columns)
    if out is not None:
        write_json(out, {"labeled": str(labeled_path), "params": asdict(params), "stages": table})
    if as_json:
        return json.dumps(table, indent=2)
    return format_stage_table(table, markdown)
