"""Ranking images for captions, as every top team of EVENTA 2025 did it, and writing the submission.

Per caption: (1) articles are retrieved by dense passages (MaxP over title + content chunks) and BM25 over
the whole article, fused (RRF or weights); (2) the images of the top articles are scored by text→image
similarity and fused with their article's score; (3) a global text→image search fills the top 10. The
ranking is a pipeline of core stages (`engine.tasks.eventa.stages`); this module holds its knobs and
`submit`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from engine.core.collection import Collection
from engine.errors import EngineError
from engine.progress import info, warn
from engine.tasks.eventa.build import ARTICLE_IMAGES, BM25, DEFAULT_NAME, IMAGES, eventa_path, open_collections
from engine.tasks.eventa.stages import RankParams, default_pipeline

STAGES = ("images", "articles_dense", "articles_bm25", "articles", "articles_reranked", "fused")
ARTICLE_STAGES = ("articles_dense", "articles_bm25", "articles")
RERANKED = "articles_reranked"  # the article stage reordered by --rerank (present only with a reranker)
BATCH_SIZE = 64  # captions ranked per batch (kept for the commands' --batch-size; stages run a whole file)


class EventaIndex:
    """An opened EVENTA index: the image and passage collections, BM25 and the article → image map (what the
    default pipeline's stages read, named here for inspection and checks)."""

    def __init__(self, folder: Path, images: Collection, passages: Collection):
        self.folder = folder
        self.images = images
        self.passages = passages
        self.settings = passages.extra
        self._bm25 = None
        self.image_ids = images.ids
        self.image_row = {iid: n for n, iid in enumerate(self.image_ids)}
        self.passage_article = [it["article"] for it in passages.items]
        self.article_images = {a: [i for i in imgs if i in self.image_row]
                               for a, imgs in passages.document(ARTICLE_IMAGES).items()}

    @classmethod
    def open(cls, name: str = DEFAULT_NAME, root: str | os.PathLike | None = None) -> "EventaIndex":
        return cls(*open_collections(name, root))

    @property
    def bm25(self):
        if self._bm25 is None:
            from engine.core.storage.index.bm25 import BM25Index
            self._bm25 = BM25Index.load(self.passages.file(BM25))
        return self._bm25


def run_captions(qs: Sequence[tuple[str, str]], name: str = DEFAULT_NAME, root: str | os.PathLike | None = None,
                 params: RankParams = RankParams(), pipeline: str | os.PathLike | None = None) -> dict[str, list]:
    """{query id: [(image id, score)] best first} by the default pipeline of `params` (or the pipeline file
    `pipeline`, its `eventa/…` collections read as the index `name`'s), over the captions cut to the query
    bound."""
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.rebind import read_index_pipeline
    from engine.core.ranking.pipeline.run import run_pipeline
    from engine.io.limits import LIMITS, truncate_query
    stage = parse_pipeline(default_pipeline(params, name)) if pipeline is None else \
        read_index_pipeline(pipeline, name, DEFAULT_NAME, "engine eventa submit")
    open_collections(name, root)  # one line on a missing, old or incomplete index, before any model loads
    cut = [truncate_query(t) for _, t in qs]
    long = sum(len(a) != len(b) for (_, a), b in zip(qs, cut))
    if long:
        warn(f"{long} caption(s) longer than {LIMITS['max_query_chars'].value():,.0f} characters were cut there "
             f"({LIMITS['max_query_chars'].env} raises the bound)")
    from engine.core.collection import DEFAULT_ROOT
    run = run_pipeline(stage, [Query(qid, t) for (qid, _), t in zip(qs, cut)],
                       Context(root=root if root is not None else DEFAULT_ROOT))
    return {qid: run[qid].pairs() for qid, _ in qs}


def submit_eventa(queries: str | os.PathLike, out: str | os.PathLike, name: str = DEFAULT_NAME,
                  root: str | os.PathLike | None = None, params: RankParams = RankParams(),
                  id_column: str | None = None,
                  text_column: str | None = None, pipeline: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Rank every caption of a `query_id,query_text` CSV (other names: `id_column`, `text_column`) by the
    default pipeline (or the pipeline file `pipeline`) and write `submission.csv` beside the zip `out`."""
    from engine.io.tables import read_queries
    from engine.tasks.eventa.submission import CSV_NAME, SLOTS, validate_eventa, write_eventa_csv, zip_submission
    out = Path(out)
    if out.suffix.lower() != ".zip":
        raise EngineError(f"{out}: the submission to write is a zip (e.g. submission.zip; submission.csv is "
                          "written beside it)")
    params.check()
    from engine.tasks.eventa.data import LABEL_ID_COLUMNS
    qs = read_queries(queries, id_column, text_column, LABEL_ID_COLUMNS)
    ranked_images = run_captions(qs, name, root, params, pipeline)
    csv_path = out.with_name(CSV_NAME)
    write_eventa_csv(csv_path, ranked_images, [q for q, _ in qs])
    zip_submission(csv_path, out)
    report = validate_eventa(out, [q for q, _ in qs])
    if not report.ok:  # the writer guarantees the format: this would be our bug, never silently uploaded
        raise EngineError(f"the written submission is invalid: {report.problems[0]}")
    short = sum(1 for r in ranked_images.values() if len(r) < SLOTS)
    if short:
        images = len(Collection.open(IMAGES, eventa_path(name, root)))
        warn(f"{short} queries have fewer than {SLOTS} images ('#' fills the slots): the index holds "
             f"{images} images")
    info(f"wrote {csv_path} and {out} ({len(qs)} queries)")
    return csv_path, out
