"""DSEBench (dataset search with examples): a keyword query plus example datasets → ranked datasets.

A case's score for a record fuses query→record similarity (dense and BM25) with examples→record
similarity (mean and max over the examples, per field and for the whole record). Untuned default:
reciprocal rank fusion of four systems; tuned: a weighted sum of z-scored features whose weights are
fitted per fold on that fold's training cases (coordinate ascent on nDCG@10, DSEBench gain).
Files are read in DSEBench's own formats, unchanged.

Stages: `index` (build, open, features), `rank` (cases → rankings), `tune` (weights); this module holds
the commands `submit` and `eval` and the options they take.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from engine.core.collection import DEFAULT_ROOT
from engine.display import format_table
from engine.errors import EngineError, opt, preview
from engine.eval.evaluate import evaluate
from engine.eval.profiles import PROFILES
from engine.io.runs import Qrels, Run, strictly_decreasing, write_run
from engine.eval.validate import check_written
from engine.io.atomic import write_json
from engine.io.options import DEPTH
from engine.progress import info, warn
from engine.tasks.dse.data import (Fold, load_dse_run, read_cases, read_dse_queries, read_dsebench_judgments,
                                   read_folds, select_cases)
from engine.tasks.dse.index import DEFAULT_NAME, DseIndex, ensure_index
from engine.tasks.dse.rank import METHODS, prepare_cases, tuned_rankings
from engine.tasks.dse.tune import cross_validated_weights, load_weights

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec

METRICS = PROFILES["dsebench"].metrics
HEADERS = {"ndcg@5": "nDCG@5", "ndcg@10": "nDCG@10", "map@5": "MAP@5", "map@10": "MAP@10",
           "recall@5": "R@5", "recall@10": "R@10"}   # the published table's column names
VARIANTS = {"query": "query only (RRF dense+BM25)", "examples": "examples only (RRF dense+BM25)",
            "rrf": "fused untuned (RRF)", "tuned": "fused tuned (5-fold CV)"}
DEFAULT_DEPTH = 100


def _check_depth(depth: int) -> None:
    DEPTH.check("depth", depth, text=False)


def _check_rerank(spec: "str | RerankerSpec | None", depth: int) -> None:
    if spec is not None:
        from engine.core.ranking.rerankers.registry import check_depth
        from engine.core.ranking.rerankers.spec import RerankerSpec
        from engine.core.ranking.rerankers.stage import check_candidates
        check_candidates(RerankerSpec.parse(spec), "text", "this task's ranking")
        check_depth(depth, 1)


@dataclass(frozen=True)
class SubmitOptions:
    """Which cases `engine dse submit` ranks and how; the CLI's option defaults are these."""
    split: str = "test"                           # test, train, all, or a split file
    method: str = "rrf"                           # one of METHODS
    folds: str | os.PathLike | None = None        # 5-Fold_split folder: weights tuned per fold (tuned)
    weights: str | os.PathLike | None = None      # a weights file to apply (tuned)
    save_weights: str | os.PathLike | None = None  # where to write the tuned weights of every fold
    depth: int = DEFAULT_DEPTH                    # datasets per case
    run_id: str | None = None                     # None: dse-METHOD
    rerank: str | None = None                     # reranker spec reordering each case's top candidates
    rerank_depth: int = 20                        # candidates it reads per case
    pipeline: str | os.PathLike | None = None     # a pipeline file ranking the cases instead of the default

    def check(self) -> "SubmitOptions":
        _check_rerank(self.rerank, self.rerank_depth)
        if self.method not in METHODS:
            raise EngineError(f"unknown method {self.method!r}; use one of {', '.join(METHODS)}")
        if self.method == "tuned" and self.folds is None and self.weights is None:
            raise EngineError(f"{opt('method')} tuned needs {opt('folds')} (DSEBench's Data/Splits/5-Fold_split, "
                              f"weights tuned per fold on its train cases) or {opt('weights')} FILE")
        _check_depth(self.depth)
        return self


@dataclass(frozen=True)
class EvalOptions:
    """What `engine dse eval` scores: a run file, or the variants of the built index on queries and cases."""
    folds: str | os.PathLike | None = None        # score the folds' test cases (and tune per fold)
    run: str | os.PathLike | None = None          # a run to score; None: rank the judged cases here
    queries: str | os.PathLike | None = None      # queries.tsv (needed without a run)
    cases: str | os.PathLike | None = None        # cases.tsv (needed without a run)
    depth: int = DEFAULT_DEPTH
    rerank: str | None = None                     # adds a row: the fused RRF ranking reranked
    rerank_depth: int = 20

    def check(self) -> "EvalOptions":
        _check_rerank(self.rerank, self.rerank_depth)
        if self.run is None and (self.queries is None or self.cases is None):
            raise EngineError(f"without {opt('run')}, the judged cases are ranked with the built index: give "
                              f"{opt('queries')} and {opt('cases')} (and the index's {opt('name')})")
        _check_depth(self.depth)
        return self


def score_run(run: Run, qrels: Qrels, metrics: str = METRICS) -> dict[str, float]:
    """Means over the qrels' cases with trec_eval semantics (DSEBench gain in the qrels)."""
    return evaluate(run, qrels, metrics).means


def submit_dse(queries: str | os.PathLike, cases: str | os.PathLike, out: str | os.PathLike,
               name: str = DEFAULT_NAME, root: str | os.PathLike = DEFAULT_ROOT,
               options: SubmitOptions = SubmitOptions(), datasets: str | os.PathLike | None = None) -> int:
    """Write one ranking per case (`case_id Q0 dataset_id rank score runid`); returns the number of cases.

    With `datasets`, the index is built first unless `root/name` already indexes that same file:
    one command from DSEBench's `datasets.json` to a run.
    """
    options.check()
    if datasets is not None:
        ensure_index(datasets, name, root)
    index, qs, cs = DseIndex.open(name, root), read_dse_queries(queries), read_cases(cases)
    case_ids = select_cases(cs, options.split)
    if not case_ids:
        raise EngineError(f"{cases}: no case in split {options.split!r}")
    if options.method != "tuned" or options.pipeline is not None:
        rankings = _pipeline_rankings(CaseRun(index, cs, qs, case_ids, cases, name, root), options)
        write_run(out, rankings, options.run_id or f"dse-{options.method}")
        check_written(out, "dsebench", list(rankings))
        info(f"dse submit: {len(rankings)} cases → {out}")
        return len(rankings)
    prepared = prepare_cases(index, cs, qs, case_ids, cases)
    per_case = None
    if options.method == "tuned":
        if options.weights is not None:
            vec = load_weights(options.weights)
            per_case = {p.case_id: vec for p in prepared}
        else:
            per_case, report = cross_validated_weights(index, cs, qs, read_folds(options.folds), case_ids,
                                                       prepared, cases)
            if options.save_weights is not None:
                write_json(options.save_weights, report)
    rankings = tuned_rankings(prepared, index.ids, options.depth, per_case)
    if options.rerank is not None:
        rankings = _reranked(CaseRun(index, cs, qs, case_ids, cases, name, root), rankings, options.rerank,
                             options.rerank_depth)
    write_run(out, rankings, options.run_id or f"dse-{options.method}")
    check_written(out, "dsebench", list(rankings))
    info(f"dse submit: {len(rankings)} cases → {out}")
    return len(rankings)


@dataclass(frozen=True)
class CaseRun:
    """The cases ranked against one index (`cs`: the case table, `qs`: the queries, `case_ids`: the cases to
    rank, read from `cases_path`): what every pipeline run over them reads."""
    index: DseIndex
    cs: Any
    qs: Any
    case_ids: Sequence[str]
    cases_path: Any
    name: str
    root: Any


def _pipeline_rankings(c: CaseRun, options: SubmitOptions) -> dict[str, list[tuple[str, float]]]:
    """Each case's ranking by the untuned default pipeline of `options.method` (or the file `options.pipeline`,
    its `dsebench` collection read as the index `c.name`)."""
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.rebind import read_index_pipeline
    from engine.tasks.dse.stages import default_pipeline
    stage = read_index_pipeline(options.pipeline, c.name, DEFAULT_NAME, "engine dse submit") \
        if options.pipeline is not None else parse_pipeline(
            default_pipeline(options.method, options.depth, c.name, options.rerank, options.rerank_depth))
    return _run_cases(c, stage)


def _run_cases(c: CaseRun, stage, given=None) -> dict[str, list[tuple[str, float]]]:
    """A pipeline (or, with `given` rankings, a reordering stage) run on the cases."""
    from engine.core.ranking.pipeline import Context
    from engine.core.ranking.pipeline.run import run_pipeline
    from engine.io.ranking import Ranking
    from engine.tasks.dse.rank import case_queries
    queries = case_queries(c.index.pos, c.cs, c.qs, c.case_ids, c.cases_path)
    ctx = Context(root=c.root, opened={c.name: c.index.collection})
    if given is None:
        run = run_pipeline(stage, queries, ctx)
    else:
        stage.prepare(ctx)
        run = stage.transform(queries, {q: Ranking.of(r) for q, r in given.items()}, ctx)
    return {q.qid: run[q.qid].pairs() for q in queries if q.qid in run}


def _reranked(c: CaseRun, rankings, spec: str, depth: int) -> dict[str, list[tuple[str, float]]]:
    """Rankings made elsewhere (the tuned fusion) reordered by the default's rerank stage."""
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.tasks.dse.stages import rerank_stage
    return _run_cases(c, parse_pipeline(rerank_stage(spec, depth, c.name)), rankings)


def _fold_test_cases(qrels: Qrels, folds: Sequence[Fold], judgments: object) -> Qrels:
    """The judged cases that some fold tests (all of them without folds): the cases a table scores."""
    if not folds:
        return qrels
    tested = {c for f in folds for c in f.test}
    missing = [c for c in tested if c not in qrels]
    if missing:
        warn(f"{len(missing)} fold test case(s) have no judgments in {judgments}: {preview(missing)}")
    return {c: g for c, g in qrels.items() if c in tested}


def _as_run(rankings: Mapping[str, Sequence[tuple[str, float]]]) -> Run:
    """Rankings as a run whose scores keep the given order (what `write_run` would print)."""
    return {q: dict(zip([d for d, _ in r], strictly_decreasing([s for _, s in r]))) for q, r in rankings.items()}


def eval_dse(judgments: str | os.PathLike, name: str = DEFAULT_NAME, root: str | os.PathLike = DEFAULT_ROOT,
             options: EvalOptions = EvalOptions()) -> dict[str, dict[str, float]]:
    """Scores with the DSEBench gain on the judged cases (with folds: the folds' test cases).

    With a run: that run file's scores (and one row per fold). Without: the variant table of the built
    index — query only, examples only, fused RRF, and (with folds) fused tuned, cross-validated.
    """
    options.check()
    qrels = read_dsebench_judgments(judgments)  # gain = query_rel × target_sim
    fold_list = read_folds(options.folds) if options.folds is not None else []
    qrels = _fold_test_cases(qrels, fold_list, judgments)
    if options.run is not None:
        run_scores = load_dse_run(options.run)
        table = {"run": score_run(run_scores, qrels)}
        for f in fold_list:
            sub = {c: g for c, g in qrels.items() if c in f.test}
            if sub:
                table[f.name] = score_run({c: run_scores[c] for c in sub if c in run_scores}, sub)
        return table
    index, qs, cs = DseIndex.open(name, root), read_dse_queries(options.queries), read_cases(options.cases)
    case_ids = [c for c in qrels if c in cs]
    unknown = [c for c in qrels if c not in cs]
    if unknown:
        warn(f"{len(unknown)} judged case id(s) are not in {options.cases}: {preview(unknown)}")
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.tasks.dse.stages import default_pipeline
    table = {}
    judged = CaseRun(index, cs, qs, case_ids, options.cases, name, root)
    for m in ("query", "examples", "rrf"):
        stage = parse_pipeline(default_pipeline(m, options.depth, name))
        table[VARIANTS[m]] = score_run(_as_run(_run_cases(judged, stage)), qrels)
    if options.rerank is not None:
        stage = parse_pipeline(default_pipeline("rrf", options.depth, name, options.rerank, options.rerank_depth))
        reranked = _run_cases(judged, stage)
        table[f"{VARIANTS['rrf']} + rerank {options.rerank_depth}"] = score_run(_as_run(reranked), qrels)
    if fold_list:
        prepared = prepare_cases(index, cs, qs, case_ids, options.cases)
        per_case, _ = cross_validated_weights(index, cs, qs, fold_list, case_ids, prepared, options.cases)
        table[VARIANTS["tuned"]] = score_run(
            _as_run(tuned_rankings(prepared, index.ids, options.depth, per_case)), qrels)
    return table


def variant_table(table: Mapping[str, Mapping[str, float]], metrics: str = METRICS) -> str:
    """A Markdown table, one row per run or variant, in DSEBench's column order and names."""
    cols = [m.strip() for m in metrics.split(",")]
    rows = [[label, *(f"{means[c]:.4f}" for c in cols)] for label, means in table.items()]
    return format_table(["variant", *(HEADERS.get(c, c) for c in cols)], rows, markdown=True)


def eval_command(judgments: str | os.PathLike, name: str = DEFAULT_NAME, root: str | os.PathLike = DEFAULT_ROOT,
                 options: EvalOptions = EvalOptions(), out: str | os.PathLike | None = None) -> str:
    """`engine dse eval`: the table as Markdown (and as JSON in `out`)."""
    table = eval_dse(judgments, name, root, options)
    if out is not None:
        write_json(out, table)
    return variant_table(table)
