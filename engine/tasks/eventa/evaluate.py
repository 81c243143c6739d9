"""`engine eventa eval`: every stage alone and fused, scored on labeled captions with the challenge's rules
(`PROFILES["eventa"]`), plus the gold article's recall in the article stage that feeds each row. Each row is
a pipeline of the default's steps (`engine.tasks.eventa.stages.parts`), all run on the same captions with
one in-memory stage cache, so a step the rows share is computed once."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from typing import Any, Sequence

from engine.core.ranking.text_pooling import POOLINGS
from engine.display import format_table
from engine.errors import EngineError, opt, preview
from engine.eval.evaluate import evaluate
from engine.eval.profiles import PROFILES
from engine.io.options import split_list
from engine.progress import track, warn
from engine.tasks.eventa.build import DEFAULT_NAME
from engine.tasks.eventa.data import Labeled, read_labeled
from engine.tasks.eventa.rank import RERANKED, STAGES, EventaIndex, RankParams
from engine.tasks.eventa.submission import slot_scores

EVAL_POOLINGS = ("mean", "max")
ARTICLE_METRICS = "recall@1,recall@10"
COLUMNS = (("eventa", "Overall"), ("eventa.map", "mAP"), ("eventa.mrr", "MRR"), ("eventa.r@1", "R@1"),
           ("eventa.r@5", "R@5"), ("eventa.r@10", "R@10"), ("article_r@1", "art R@1"), ("article_r@10", "art R@10"))
ARTICLES_OF = {"articles_dense": "_dense", "articles_bm25": "_bm25", "articles": "_articles",
               RERANKED: "_reranked"}   # the article ranking behind each row (fused rows: the last one)

StageTable = dict[str, dict[str, dict[str, float]]]
"""{pooling: {stage: {metric: value}}}"""


def sweep_stage(weight: float) -> str:
    return f"fused w={weight:g}"


def stage_rankings(labeled: Sequence[Labeled], name: str, root, params: RankParams, sweep: Sequence[float] = ()
                   ) -> tuple[dict[str, list], dict[str, list]]:
    """({row: per caption image ranking}, {row: per caption article ranking}) for every row of the table."""
    from engine.core.collection import DEFAULT_ROOT
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.cache import StageCache
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.run import run_pipeline
    from engine.io.limits import truncate_query
    from engine.tasks.eventa.stages import parts
    params.check()
    exprs = parts(params, name)
    rows = {s: exprs[s] for s in STAGES if s in exprs}
    rows.update({sweep_stage(w): parts(replace(params, article_weight=w), name)["fused"] for w in sweep})
    ctx = Context(root=root if root is not None else DEFAULT_ROOT, cache=StageCache(None))
    queries = [Query(q.qid, truncate_query(q.text)) for q in labeled]
    images = {}
    for row, expr in track(list(rows.items()), len(rows), f"ranking captions ({params.pooling} pooling)"):
        run = run_pipeline(parse_pipeline(expr), queries, ctx)
        images[row] = [run[q.qid].pairs() for q in queries]
    articles = {}
    for row, part in ARTICLES_OF.items():
        if part in exprs:
            run = run_pipeline(parse_pipeline(exprs[part]), queries, ctx)
            articles[row] = [run[q.qid].pairs() for q in queries]
    return images, articles


def score_stages(labeled: Sequence[Labeled], images: dict[str, list], articles: dict[str, list]
                 ) -> dict[str, dict[str, float]]:
    """EVENTA Overall and parts per stage, plus the gold article's recall@1/10 where the labels name it."""
    qrels = {q.qid: {q.image: 1} for q in labeled}
    gold = {q.qid: {q.article: 1} for q in labeled if q.article}
    table: dict[str, dict[str, float]] = {}
    for stage, rankings in images.items():
        run = {q.qid: slot_scores([d for d, _ in r]) for q, r in zip(labeled, rankings)}
        table[stage] = dict(evaluate(run, qrels, PROFILES["eventa"].metrics).means)
        arts = articles.get(stage) if not stage.startswith("fused") \
            else articles.get(RERANKED, articles.get("articles"))
        if arts is not None and gold:
            arun = {q.qid: slot_scores([d for d, _ in r]) for q, r in zip(labeled, arts) if q.qid in gold}
            means = evaluate(arun, gold, ARTICLE_METRICS).means
            table[stage]["article_r@1"], table[stage]["article_r@10"] = means["recall@1"], means["recall@10"]
    return table


def eval_eventa(labeled_path: str | os.PathLike, name: str = DEFAULT_NAME, root: str | os.PathLike | None = None,
                params: RankParams = RankParams(), poolings: Sequence[str] = EVAL_POOLINGS,
                limit: int | None = None, sweep: Sequence[float] = (),
                columns: dict[str, str | None] | None = None) -> StageTable:
    """The stage table on a labeled CSV; `sweep` adds the fused stage at other article weights (`fused w=…`
    rows), to tune the article weight."""
    labeled = read_labeled(labeled_path, **(columns or {}))[:limit]
    index = EventaIndex.open(name, root)
    unknown = [q.image for q in labeled if q.image not in index.image_row]
    if unknown:
        warn(f"{len(unknown)} labeled images are not in the index (those queries score 0): {preview(unknown)}")
    out: StageTable = {}
    for pooling in poolings:
        images, articles = stage_rankings(labeled, name, root, replace(params, pooling=pooling), sweep)
        out[pooling] = score_stages(labeled, images, articles)
    return out


def format_stage_table(table: StageTable, markdown: bool = False) -> str:
    """One row per pooling × stage, the labels left and the numbers right."""
    heads = ["pooling", "stage"] + [h for _, h in COLUMNS]
    rows = [[pooling, stage] + [f"{vals[c]:.3f}" if c in vals else "–" for c, _ in COLUMNS]
            for pooling, stages in table.items() for stage, vals in stages.items()]
    return format_table(heads, rows, markdown=markdown, left=2)


def sweep_weights(sweep: Sequence[str]) -> list[float]:
    """Article weights to sweep, from their text; each must lie between 0 and 1."""
    try:
        weights = [float(w) for w in sweep]
    except ValueError:
        raise EngineError(f"{opt('sweep')} takes comma-separated article weights between 0 and 1, "
                          f"not {','.join(sweep)!r}") from None
    if any(not 0.0 <= w <= 1.0 for w in weights):
        raise EngineError(f"{opt('sweep')} weights must lie between 0 and 1, not {','.join(sweep)!r}")
    return weights


def eval_command(o: Any, params: RankParams) -> str:
    """`engine eventa eval` (`engine.tasks.eventa.cli.EventaEvalOptions`, its pipeline knobs `params`): the stage
    table as text, Markdown or JSON (and written to `o.out` if given)."""
    from engine.io.atomic import write_json
    poolings, out = split_list(o.pooling) or [], o.out
    bad = [p for p in poolings if p not in POOLINGS]
    if bad or not poolings:
        raise EngineError(f"{opt('pooling')} takes a comma-separated list of {', '.join(POOLINGS)}, "
                          f"not {','.join(poolings)!r}")
    table = eval_eventa(o.queries, o.name, o.root, params, poolings, o.limit,
                        sweep_weights(split_list(o.sweep) or []), o.columns())
    if out is not None:
        write_json(out, {"labeled": str(o.queries), "params": asdict(params), "stages": table})
    if o.as_json:
        return json.dumps(table, indent=2)
    return format_stage_table(table, o.markdown)
