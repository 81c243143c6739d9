"""EVENTA's default ranking as a pipeline of core stages (what `engine pipeline show eventa` prints and
`engine eventa submit` runs): articles by dense passages (MaxP) and BM25, fused; optionally reranked; their
images scored by text→image similarity and fused with their article's score; filled from a global
text→image search; the top k."""
from __future__ import annotations

from engine.core.pipeline.parse import pipeline_file_text
from engine.tasks.eventa.build import ARTICLE_IMAGES, ARTICLES, DEFAULT_NAME, IMAGES

GLOBAL_FACTOR = 5   # images the global search fetches per slot, to fill from
ORDER_LIMIT = 50    # images of ranked articles placed in article order (the per-stage rows)


def q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parts(params, name: str = DEFAULT_NAME) -> dict[str, str]:
    """The expressions of the default's steps (`params`: `engine.tasks.eventa.rank.RankParams`)."""
    images, articles = q(f"{name}/{IMAGES}"), q(f"{name}/{ARTICLES}")
    p = params.pooling
    dense = f"retrieve({articles}, group=\"article\", pooling=\"{p}\", k={params.depth}, fetch={params.depth * 3})"
    bm25 = f"retrieve({articles}, mode=\"bm25\", k={params.depth})"
    method = "rrf" if params.article_fusion == "rrf" else "weighted"
    fused = (f"fuse({dense},\n     {bm25},\n     method=\"{method}\", weights=[{params.dense_weight!r}, "
             f"{params.bm25_weight!r}], depth={params.depth}, informative=True)")
    reranked = None
    if params.rerank is not None:
        reranked = f"{fused}\n  >> rerank({q(params.rerank)}, depth={params.rerank_depth}, docs={articles}, " \
                   f"group=\"article\")"
    glob = f"retrieve({images}, pooling=\"{p}\", k={params.k * GLOBAL_FACTOR})"
    via = q(f"{name}/{ARTICLES}:{ARTICLE_IMAGES}")
    order = f"expand({images}, via={via}, limit={ORDER_LIMIT})"
    top = reranked or fused
    if params.top_articles == 0:
        full = f"{glob} % {params.k}"
    else:
        full = (f"(({top})\n  >> expand({images}, via={via}, top={params.top_articles}, score=\"parent\")\n"
                f"  >> similarity({images}, weight={params.article_weight!r}, fusion=\"{params.image_fusion}\", "
                f"pooling=\"{p}\")\n  ^ {glob}) % {params.k}")
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


def default_pipeline(params=None, name: str = DEFAULT_NAME) -> str:
    """The default ranking's expression."""
    from engine.tasks.eventa.rank import RankParams
    return parts(params or RankParams(), name)["fused"]


def default_pipeline_file(params=None, name: str = DEFAULT_NAME) -> str:
    return pipeline_file_text(default_pipeline(params, name),
                              "EVENTA 2025 Track 2: caption → 10 images (`engine eventa submit --pipeline FILE`)")
