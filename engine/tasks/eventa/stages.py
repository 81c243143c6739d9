"""EVENTA's default ranking as a pipeline of core stages (what `engine pipeline show eventa` prints and
`engine eventa submit` runs): articles by dense passages (MaxP) and BM25, fused; optionally reranked; their
images scored by text→image similarity and fused with their article's score; filled from a global
text→image search; the top k."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.core.ranking.pipeline.parse import pipeline_file_text
from engine.core.ranking.rerankers.registry import RERANK_DEPTH
from engine.core.ranking.text_pooling import POOLINGS
from engine.errors import EngineError, opt
from engine.io.options import DEPTH, MAX_K, SHARE, WEIGHT, K, Range
from engine.tasks.eventa.build import ARTICLE_IMAGES, ARTICLES, DEFAULT_NAME, IMAGES

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec

FUSIONS = ("rrf", "weighted")

GLOBAL_FACTOR = 5   # images the global search fetches per slot, to fill from
ORDER_LIMIT = 50    # images of ranked articles placed in article order (the per-stage rows)
RERANK_INSTRUCTION = "Given a news photo's caption, retrieve the news article the photo illustrates"
"""What an llm:/llm-list: reranker is told the task is (`options_taken`: only kinds that take one)."""


RANGES = {"dense_weight": WEIGHT, "bm25_weight": WEIGHT, "top_articles": Range(1, MAX_K, integer=True, zero=True),
          "article_weight": SHARE, "depth": DEPTH, "k": K, "rerank_depth": RERANK_DEPTH}
"""Each numeric knob's range (top_articles 0: skip the article stage): `RankParams.check` and the flags of
`engine eventa submit|eval` read these; `rerank_depth` is the rerankers' own."""


@dataclass(frozen=True)
class RankParams:
    """Knobs of the pipeline (the options of submit and eval); the defaults are the ones measured best on
    the fixture and coco-mini."""
    pooling: str = "mean"          # articles' dense stage: mean | max | full (truncating) | auto
    image_pooling: str = "auto"    # image stage: whole caption where it fits the window, else best sentence
    article_fusion: str = "rrf"    # dense + BM25 articles: rrf | weighted (min-max)
    dense_weight: float = 1.0
    bm25_weight: float = 1.0
    top_articles: int = 10         # whose images are scored (0: skip the article stage, images alone)
    image_fusion: str = "weighted"  # image similarity + article score: weighted | rrf
    article_weight: float = 0.8    # share of the article score in the image fusion (0: images only)
    depth: int = 100               # articles kept per system before fusion
    k: int = 10
    rerank: "str | RerankerSpec | None" = None  # reranker reordering the fused articles (e.g. cross:DIR); None: none
    rerank_depth: int = 20         # fused articles the reranker reads per caption

    def check(self) -> None:
        for name in ("pooling", "image_pooling"):
            if getattr(self, name) not in POOLINGS:
                raise EngineError(f"{opt(name)}: unknown pooling {getattr(self, name)!r}; use one of "
                                  f"{', '.join(POOLINGS)}")
        for what, value in (("article fusion", self.article_fusion), ("image fusion", self.image_fusion)):
            if value not in FUSIONS:
                raise EngineError(f"unknown {what} {value!r}; use one of {', '.join(FUSIONS)}")
        for name, declared in RANGES.items():
            declared.check(name, getattr(self, name), text=False)
        if self.rerank is not None:
            from engine.core.ranking.rerankers.spec import RerankerSpec
            from engine.core.ranking.rerankers.stage import check_candidates
            check_candidates(RerankerSpec.parse(self.rerank), "text", "this task's ranking")
        if self.dense_weight + self.bm25_weight == 0:
            raise EngineError(f"{opt('dense_weight')} and {opt('bm25_weight')} must not both be 0")


def q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parts(params: RankParams, name: str = DEFAULT_NAME) -> dict[str, str]:
    """The expressions of the default's steps, one per row of `engine eventa eval`'s table."""
    images, articles = q(f"{name}/{IMAGES}"), q(f"{name}/{ARTICLES}")
    p = params.pooling
    dense = f"retrieve({articles}, group=\"article\", pooling=\"{p}\", k={params.depth}, fetch={params.depth * 3})"
    bm25 = f"retrieve({articles}, mode=\"bm25\", k={params.depth})"
    method = "rrf" if params.article_fusion == "rrf" else "weighted"
    fused = (f"fuse({dense},\n     {bm25},\n     method=\"{method}\", weights=[{params.dense_weight!r}, "
             f"{params.bm25_weight!r}], depth={params.depth}, informative=True)")
    reranked = None
    if params.rerank is not None:
        from engine.core.ranking.rerankers.registry import options_taken
        from engine.core.ranking.rerankers.spec import RerankerSpec
        spec = RerankerSpec.parse(params.rerank)
        told = "".join(f", {k}={q(v)}" for k, v in options_taken(spec, instruction=RERANK_INSTRUCTION).items())
        reranked = f"{fused}\n  >> rerank({q(str(params.rerank))}, depth={params.rerank_depth}, docs={articles}, " \
                   f"group=\"article\"{told})"
    ip = params.image_pooling
    glob = f"retrieve({images}, pooling=\"{ip}\", k={params.k * GLOBAL_FACTOR})"
    via = q(f"{name}/{ARTICLES}:{ARTICLE_IMAGES}")
    order = f"expand({images}, via={via}, limit={ORDER_LIMIT})"
    top = reranked or fused
    if params.top_articles == 0:
        full = f"{glob} % {params.k}"
    else:
        full = (f"(({top})\n  >> expand({images}, via={via}, top={params.top_articles}, score=\"parent\")\n"
                f"  >> similarity({images}, weight={params.article_weight!r}, fusion=\"{params.image_fusion}\", "
                f"pooling=\"{ip}\")\n  ^ {glob}) % {params.k}")
    out = {"images": f"{glob} % {params.k}",
           "articles_dense": f"({dense} >> {order} ^ {glob}) % {params.k}",
           "articles_bm25": f"({bm25} >> {order} ^ {glob}) % {params.k}",
           "articles": f"(({fused}) >> {order} ^ {glob}) % {params.k}",
           "fused": full,
           "_articles": fused, "_dense": dense, "_bm25": bm25}
    if reranked is not None:
        out["articles_reranked"] = f"(({reranked}) >> {order} ^ {glob}) % {params.k}"
        out["_reranked"] = reranked
    return out


def default_pipeline(params: RankParams | None = None, name: str = DEFAULT_NAME) -> str:
    """The default ranking's expression."""
    return parts(params or RankParams(), name)["fused"]


def default_pipeline_file(params=None, name: str = DEFAULT_NAME) -> str:
    return pipeline_file_text(default_pipeline(params, name),
                              "EVENTA 2025 Track 2: caption → 10 images (`engine eventa submit --pipeline FILE`)")
