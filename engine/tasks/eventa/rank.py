"""Ranking images for captions, as every top team of EVENTA 2025 did it, and writing the submission.

Per caption: (1) articles are retrieved by dense passages (MaxP over title + content chunks) and BM25 over
the whole article, fused (RRF or weights); (2) the images of the top articles are scored by text→image
similarity and fused with their article's score; (3) a global text→image search fills the top 10.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.collection import Collection
from engine.core.fusion import informative, ranked, rrf, weighted
from engine.core.text_pooling import POOLINGS, SentenceVectors, encode_queries, similarity
from engine.errors import EngineError, opt
from engine.progress import info, track, warn
from engine.tasks.eventa.build import ARTICLE_IMAGES, BM25, DEFAULT_NAME, IMAGES, eventa_path, open_collections

STAGES = ("images", "articles_dense", "articles_bm25", "articles", "articles_reranked", "fused")
ARTICLE_STAGES = ("articles_dense", "articles_bm25", "articles")
RERANKED = "articles_reranked"  # the article stage reordered by --rerank (present only with a reranker)
FUSIONS = ("rrf", "weighted")
BATCH_SIZE = 64  # captions ranked per batch

Ranked = list[tuple[str, float]]


@dataclass(frozen=True)
class RankParams:
    """Knobs of the pipeline (the options of submit and eval); the defaults are the ones measured best on
    the fixture and coco-mini."""
    pooling: str = "mean"          # mean | max | full (truncating)
    article_fusion: str = "rrf"    # dense + BM25 articles: rrf | weighted (min-max)
    dense_weight: float = 1.0
    bm25_weight: float = 1.0
    top_articles: int = 10         # whose images are scored (0: skip the article stage, images alone)
    image_fusion: str = "weighted"  # image similarity + article score: weighted | rrf
    article_weight: float = 0.8    # share of the article score in the image fusion (0: images only)
    depth: int = 100               # articles kept per system before fusion
    k: int = 10
    rerank: str | None = None      # reranker spec reordering the fused articles (e.g. cross:DIR); None: no stage
    rerank_depth: int = 20         # fused articles the reranker reads per caption

    def check(self) -> None:
        if self.pooling not in POOLINGS:
            raise EngineError(f"unknown pooling {self.pooling!r}; use one of {', '.join(POOLINGS)}")
        for what, value in (("article fusion", self.article_fusion), ("image fusion", self.image_fusion)):
            if value not in FUSIONS:
                raise EngineError(f"unknown {what} {value!r}; use one of {', '.join(FUSIONS)}")
        if not 0.0 <= self.article_weight <= 1.0:
            raise EngineError(f"{opt('article_weight')} must be between 0 and 1, not {self.article_weight}")
        if self.top_articles < 0 or self.depth < 1 or self.k < 1:
            raise EngineError(f"{opt('top_articles')} must be at least 0 (0: skip the article stage), "
                              f"{opt('depth')} and k at least 1")
        if self.rerank is not None:
            from engine.core.rerankers.registry import check_depth, entry_for
            entry_for(self.rerank)
            check_depth(self.rerank_depth, 1)
        if self.dense_weight < 0 or self.bm25_weight < 0 or self.dense_weight + self.bm25_weight == 0:
            raise EngineError(f"{opt('dense_weight')} and {opt('bm25_weight')} must be >= 0 and not both 0")


@dataclass
class RankResult:
    images: dict[str, list[Ranked]]    # stage → per query image ranking (best first)
    articles: dict[str, list[Ranked]]  # article stage → per query article ranking


def sweep_stage(weight: float) -> str:
    return f"fused w={weight:g}"


class Timer:
    """Seconds per stage, one value per `rank` call: per-query latency percentiles when called one caption at a time."""

    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = {}

    def add(self, stage: str, seconds: float) -> None:
        self.calls.setdefault(stage, []).append(seconds)


class EventaIndex:
    """An opened EVENTA index: the image and passage collections, BM25 and the article → image map."""

    def __init__(self, folder: Path, images: Collection, passages: Collection):
        self.folder = folder
        self.images = images
        self.passages = passages
        self.settings = passages.extra
        self._bm25 = None
        self.image_ids = images.ids
        self.image_row = {iid: n for n, iid in enumerate(self.image_ids)}
        self.image_emb = np.asarray(images.embeddings, dtype=np.float32)
        self.passage_article = [it["article"] for it in passages.items]
        self.article_images = {a: [i for i in imgs if i in self.image_row]
                               for a, imgs in passages.document(ARTICLE_IMAGES).items()}

    @classmethod
    def open(cls, name: str = DEFAULT_NAME, root: str | os.PathLike | None = None) -> "EventaIndex":
        return cls(*open_collections(name, root))

    @property
    def bm25(self):
        if self._bm25 is None:
            from engine.core.bm25 import BM25Index
            self._bm25 = BM25Index.load(self.passages.file(BM25))
        return self._bm25

    @staticmethod
    def _dense(col: Collection, keys: Sequence[str], sv: SentenceVectors, pooling: str,
               depth: int) -> list[dict[str, float]]:
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
        params.check()
        unknown = [s for s in stages if s not in STAGES]
        if unknown:
            raise EngineError(f"unknown stage {unknown[0]!r}; stages are {', '.join(STAGES)}")
        timer = timer or Timer()
        texts = list(texts)
        t0 = time.perf_counter()
        text_enc, image_enc = self.passages.encoder, self.images.encoder
        sv_text = encode_queries(text_enc, texts, params.pooling)
        sv_image = sv_text if image_enc.text_spec == text_enc.text_spec \
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
        fused_articles = [self._fuse_articles(d, b, w, params) for d, b in zip(dense, bm25)]
        out_images: dict[str, list[Ranked]] = {}
        want = set(stages)
        articles = dict(zip(ARTICLE_STAGES, (dense, bm25, fused_articles)))
        if params.rerank is not None:
            from engine.tasks.eventa.rerank import rerank_articles
            fused_articles = articles[RERANKED] = rerank_articles(self, texts, fused_articles, params)
            if RERANKED in want:
                out_images[RERANKED] = [self._fill(self._article_order(a), g, params.k)
                                        for a, g in zip(fused_articles, glob)]
        for stage, arts in zip(ARTICLE_STAGES, (dense, bm25, fused_articles)):
            if stage in want:
                out_images[stage] = [self._fill(self._article_order(a), g, params.k) for a, g in zip(arts, glob)]
        if "images" in want:
            out_images["images"] = [g[:params.k] for g in glob]
        if "fused" in want:
            out_images["fused"] = self._fused(sv_image, fused_articles, glob, params)
        for weight in sweep:  # other article weights, for tuning: the expensive parts above are shared
            out_images[sweep_stage(weight)] = self._fused(sv_image, fused_articles, glob,
                                                          replace(params, article_weight=weight))
        timer.add("fusion", time.perf_counter() - t4)
        timer.add("total", time.perf_counter() - t0)
        return RankResult(out_images, articles)

    @staticmethod
    def _fuse_articles(dense: Ranked, bm25: Ranked, w: tuple[float, float], params: RankParams) -> Ranked:
        """Dense and BM25 articles fused; none when neither says anything about this caption (all its scores
        tie: empty articles), so the image stage is not reordered by an arbitrary article order."""
        if not (informative(dense) or informative(bm25)):
            return []
        if params.article_fusion == "rrf":
            return rrf([dense, bm25], weights=w, depth=params.depth)
        return weighted([dense, bm25], weights=w, method="minmax", depth=params.depth)

    def _fused(self, sv: SentenceVectors, articles: list[Ranked], glob: list[Ranked],
               params: RankParams) -> list[Ranked]:
        """Per caption: the images of its top articles fused with their articles, filled by the global search."""
        return [self._fill(self._fuse_images(n, sv, a, params), g, params.k)
                for n, (a, g) in enumerate(zip(articles, glob))]

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

    def _fuse_images(self, n: int, sv: SentenceVectors, articles: Ranked, params: RankParams) -> Ranked:
        """Images of the top articles: text→image similarity fused with the best score of their articles."""
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


def rank_in_batches(index: EventaIndex, texts: Sequence[str], params: RankParams, stages: Sequence[str],
                    batch_size: int = BATCH_SIZE, timer: Timer | None = None, sweep: Sequence[float] = ()) -> RankResult:
    """`EventaIndex.rank` over many captions, a batch at a time, with a progress bar."""
    from engine.io.limits import LIMITS, truncate_query
    cut = [truncate_query(t) for t in texts]
    long = sum(len(a) != len(b) for a, b in zip(texts, cut))
    if long:
        warn(f"{long} caption(s) longer than {LIMITS['max_query_chars'].value():,.0f} characters were cut there "
             f"({LIMITS['max_query_chars'].env} raises the bound)")
    texts = cut
    names = [s for s in stages if s != RERANKED or params.rerank] + [sweep_stage(w) for w in sweep]
    result = RankResult({s: [] for s in names}, {s: [] for s in ARTICLE_STAGES + ((RERANKED,) if params.rerank
                                                                                   else ())})
    starts = range(0, len(texts), batch_size)
    for start in track(starts, len(starts), "ranking captions"):
        part = index.rank(texts[start:start + batch_size], params, stages, timer, sweep)
        for s in names:
            result.images[s] += part.images[s]
        for s in result.articles:
            result.articles[s] += part.articles[s]
    return result


def run_captions(qs: Sequence[tuple[str, str]], name: str = DEFAULT_NAME, root: str | os.PathLike | None = None,
                 params: RankParams = RankParams(), pipeline: str | os.PathLike | None = None) -> dict[str, list]:
    """{query id: [(image id, score)] best first} by the default pipeline of `params` (or the pipeline file
    `pipeline`), over the captions cut to the query bound."""
    from engine.core.pipeline import Context, Query
    from engine.core.pipeline.parse import parse_pipeline, read_pipeline_file
    from engine.core.pipeline.run import run_pipeline
    from engine.io.limits import LIMITS, truncate_query
    from engine.tasks.eventa.stages import default_pipeline
    stage = read_pipeline_file(pipeline) if pipeline is not None else parse_pipeline(default_pipeline(params, name))
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
                  batch_size: int = BATCH_SIZE, id_column: str | None = None,
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
