"""DSEBench (dataset search with examples): a keyword query plus example datasets → ranked datasets.

A case's score for a record fuses query→record similarity (dense and BM25) with examples→record
similarity (mean and max over the examples, per field and for the whole record). Untuned default:
reciprocal rank fusion of four systems; tuned: a weighted sum of z-scored features whose weights are
fitted per fold on that fold's training cases (coordinate ascent on nDCG@10, DSEBench gain).
Files are read in DSEBench's own formats, unchanged.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from engine.core.bm25 import BM25Index
from engine.core.fusion import rrf, weighted_arrays
from engine.errors import EngineError, preview, where
from engine.eval.runs import Qrels, Run, write_run
from engine.io.atomic import write_json, write_npy
from engine.io.tables import read_json
from engine.progress import info, track, warn
from engine.tasks.dse.data import (FIELDS, Case, Fold, load_dse_run, read_cases, read_datasets,
                                   read_dse_queries, read_dsebench_judgments, read_folds, record_text,
                                   select_cases)

EMBEDDED = FIELDS + ("all",)
FEATURES = ("q_dense", "q_bm25", "ex_bm25") + tuple(f"ex_{agg}_{f}" for f in EMBEDDED for agg in ("mean", "max"))
METHODS = ("rrf", "tuned", "query", "examples")
RRF_SYSTEMS = {"rrf": ("q_dense", "q_bm25", "ex_mean_all", "ex_bm25"),
               "query": ("q_dense", "q_bm25"),
               "examples": ("ex_mean_all", "ex_bm25")}
DSE_METRICS = "ndcg@5,ndcg@10,map@5,map@10,recall@5,recall@10"
TUNE_METRIC = "ndcg@10"
WEIGHT_GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
POOL = 500          # per feature, for tuning: docs outside every feature's top POOL are never ranked
RRF_DEPTH = 1000    # per system list fed to RRF
DEFAULT_DEPTH = 100
ENCODE_CHUNK = 2048  # texts per progress step
MANIFEST = "dse.json"


# ---------------------------------------------------------------- metrics (the one call into `engine eval`)

def score_run(run: Run, qrels: Qrels, metrics: str = DSE_METRICS) -> dict[str, float]:
    """Means over the qrels' cases with trec_eval semantics, via `engine.eval.evaluate` (DSEBench gain in qrels)."""
    from engine.eval.evaluate import evaluate
    return evaluate(run, qrels, metrics).means


# ---------------------------------------------------------------- build

def _encoder(spec: str):
    from engine.core.encoders import load_encoder
    return load_encoder(spec)


def build_dse(datasets: str | os.PathLike, name: str = "dsebench", root: str | os.PathLike = "indexes",
              model: str | None = None, batch_size: int = 64) -> Path:
    """Embed every field and the whole record, and index all fields with BM25, into `root/name`."""
    from engine.core.encoders import DEFAULT_TEXT_SPEC
    model = model or DEFAULT_TEXT_SPEC
    records = read_datasets(datasets)
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    encoder = _encoder(model)
    info(f"dse build: {len(records)} records → {folder} ({encoder.spec})")
    texts = {f: [r[f] for r in records] for f in FIELDS}
    texts["all"] = [record_text(r) for r in records]
    emb = {f: np.zeros((len(records), encoder.dim), dtype=np.float32) for f in EMBEDDED}
    # every non-empty field text in one stream (empty fields keep a zero vector: similar to nothing)
    todo = [(f, i) for f in EMBEDDED for i, t in enumerate(texts[f]) if t]
    chunks = [todo[i:i + ENCODE_CHUNK] for i in range(0, len(todo), ENCODE_CHUNK)]
    for chunk in track(chunks, len(chunks), f"embedding {len(todo)} field texts"):
        vecs = encoder.encode_texts([texts[f][i] for f, i in chunk], batch_size=batch_size)
        for (f, i), v in zip(chunk, vecs):
            emb[f][i] = v
    for f in EMBEDDED:  # float16 on disk halves the index; scoring casts back to float32
        write_npy(folder / f"emb_{f}.npy", emb[f].astype(np.float16))
    BM25Index.build([r["id"] for r in records], texts["all"]).save(folder / "bm25")
    write_json(folder / "records.json", records)
    write_json(folder / MANIFEST, {"kind": "dsebench", "model": encoder.spec, "records": len(records),
                                   "dim": encoder.dim, "fields": list(EMBEDDED),
                                   "source": str(Path(datasets).resolve()),
                                   "source_bytes": Path(datasets).stat().st_size})
    info(f"dse build: done ({len(records)} records)")
    return folder


# ---------------------------------------------------------------- scoring

class DseIndex:
    """A built DSEBench index: field embeddings, BM25 and records, opened for scoring cases."""

    def __init__(self, folder: str | os.PathLike) -> None:
        folder = Path(folder)
        manifest = folder / MANIFEST
        if not manifest.exists():
            raise EngineError(f"{folder}: no DSEBench index here ({MANIFEST} missing); run "
                              f"`engine dse build --datasets datasets.json --name {folder.name}` first")
        self.folder = folder
        self.manifest = json.loads(manifest.read_text(encoding="utf-8"))
        self.records: list[dict[str, str]] = json.loads((folder / "records.json").read_text(encoding="utf-8"))
        self.ids = [r["id"] for r in self.records]
        self.pos = {rid: i for i, rid in enumerate(self.ids)}
        self.emb = {f: np.load(folder / f"emb_{f}.npy").astype(np.float32) for f in EMBEDDED}
        self.bm25 = BM25Index.load(folder / "bm25")
        self._encoder = None

    @classmethod
    def open(cls, name: str = "dsebench", root: str | os.PathLike = "indexes") -> "DseIndex":
        return cls(Path(root) / name)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        if self._encoder is None:
            self._encoder = _encoder(self.manifest["model"])
        return self._encoder.encode_texts(list(texts))

    def features(self, query_vec: np.ndarray | None, query_text: str | None, examples: Sequence[int]) -> np.ndarray:
        """docs × FEATURES scores for one case; a part without input (no query, no examples) scores 0."""
        n = len(self.ids)
        cols: dict[str, np.ndarray] = {}
        zero = np.zeros(n, dtype=np.float32)
        cols["q_dense"] = self.emb["all"] @ query_vec if query_vec is not None else zero
        cols["q_bm25"] = self.bm25.scores(query_text) if query_text else zero
        ex = list(examples)
        cols["ex_bm25"] = (np.mean([self.bm25.scores(record_text(self.records[i])) for i in ex], axis=0)
                           if ex else zero)
        for f in EMBEDDED:
            if ex:
                sims = self.emb[f] @ self.emb[f][ex].T
                cols[f"ex_mean_{f}"], cols[f"ex_max_{f}"] = sims.mean(axis=1), sims.max(axis=1)
            else:
                cols[f"ex_mean_{f}"] = cols[f"ex_max_{f}"] = zero
        return np.column_stack([cols[name] for name in FEATURES]).astype(np.float32)


def _top(scores: np.ndarray, k: int, banned: Sequence[int]) -> np.ndarray:
    """Positions of the k best scores, best first (ties: lower position first), banned ones left out."""
    s = scores.astype(np.float64).copy()
    s[list(banned)] = -np.inf
    k = min(k, int(np.isfinite(s).sum()))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    top = np.argpartition(-s, k - 1)[:k]
    return top[np.lexsort((top, -s[top]))]


def rank_rrf(feats: np.ndarray, systems: Sequence[str], banned: Sequence[int], depth: int) -> list[tuple[int, float]]:
    """RRF over the named feature columns, each a system ranking its top RRF_DEPTH docs."""
    lists = []
    for name in systems:
        col = feats[:, FEATURES.index(name)]
        if not np.any(col):
            continue  # a system with no input (e.g. no examples) says nothing
        lists.append([(str(i), float(col[i])) for i in _top(col, RRF_DEPTH, banned)])
    return [(int(d), s) for d, s in rrf(lists, depth=depth)]


def rank_weighted(feats: np.ndarray, weights: Sequence[float], banned: Sequence[int],
                  depth: int) -> list[tuple[int, float]]:
    """Weighted sum of per-case z-scored features (z over the whole catalogue)."""
    fused = weighted_arrays(feats, weights, method="zscore")
    return [(int(i), float(fused[i])) for i in _top(fused, depth, banned)]


def weights_vector(weights: Mapping[str, float]) -> list[float]:
    unknown = [k for k in weights if k not in FEATURES]
    if unknown:
        raise EngineError(f"unknown DSE feature(s) {', '.join(unknown)} in the weights; known: {', '.join(FEATURES)}")
    return [float(weights.get(f, 0.0)) for f in FEATURES]


def default_weights() -> list[float]:
    """Tuning's starting point: the four RRF systems, equally weighted."""
    return [1.0 if f in RRF_SYSTEMS["rrf"] else 0.0 for f in FEATURES]


# ---------------------------------------------------------------- cases → features

@dataclass
class PreparedCase:
    case_id: str
    feats: np.ndarray
    banned: list[int]


def prepare_cases(index: DseIndex, cases: Mapping[str, Case], queries: Mapping[str, str],
                  case_ids: Sequence[str], cases_path: object = "cases.tsv") -> list[PreparedCase]:
    """Feature matrices of the cases to rank. Unknown example datasets are dropped with a warning (the case
    is then ranked by what is left); an unknown query leaves the examples; a case with neither is skipped."""
    unknown_ex: list[str] = []
    unknown_q: list[tuple[str, str]] = []
    skipped: list[str] = []
    texts: dict[str, str] = {}
    for cid in case_ids:
        case = cases[cid]
        q = queries.get(case.query_id, "")
        if not q:
            unknown_q.append((cid, f"{where(cases_path, case.line)} case {cid} query {case.query_id}"))
        texts[cid] = q
    vecs = index.encode_queries([texts[c] for c in case_ids if texts[c]]) if any(texts.values()) else None
    vec_of, j = {}, 0
    for c in case_ids:
        if texts[c]:
            vec_of[c] = vecs[j]  # type: ignore[index]
            j += 1
    out = []
    for cid in track(case_ids, len(case_ids), "scoring cases"):
        case = cases[cid]
        ex = []
        for e in case.examples:
            if e in index.pos:
                ex.append(index.pos[e])
            else:
                unknown_ex.append(f"{where(cases_path, case.line)} case {cid} dataset {e}")
        if not ex and not texts[cid]:
            skipped.append(cid)
            continue
        out.append(PreparedCase(cid, index.features(vec_of.get(cid), texts[cid] or None, ex), ex))
    if unknown_ex:
        warn(f"{len(unknown_ex)} example dataset id(s) are not in the index and are ignored: {preview(unknown_ex, 3)}")
    examples_only = [msg for cid, msg in unknown_q if cid not in skipped]
    if examples_only:
        warn(f"{len(examples_only)} case(s) name a query id missing from the queries file; ranked by their "
             f"examples only: {preview(examples_only, 3)}")
    if skipped:
        warn(f"{len(skipped)} case(s) have neither a known query nor a known example dataset; no ranking: "
             f"{preview(skipped)}")
    return out


# ---------------------------------------------------------------- tuning

def _pool(p: PreparedCase) -> np.ndarray:
    top = [_top(p.feats[:, j], POOL, p.banned) for j in range(p.feats.shape[1]) if np.any(p.feats[:, j])]
    return np.unique(np.concatenate(top)) if top else np.zeros(0, dtype=np.int64)


def tune_weights(prepared: Sequence[PreparedCase], qrels: Qrels, ids: Sequence[str],
                 passes: int = 3) -> tuple[list[float], float]:
    """Coordinate ascent over WEIGHT_GRID maximizing mean nDCG@10 (DSEBench gain) on judged cases.

    Z-scores are taken over the whole catalogue once; ranking is then restricted to each case's pool
    (top POOL docs of any feature), which keeps every trial a small matrix product.
    """
    judged = [p for p in prepared if p.case_id in qrels]
    if not judged:
        raise EngineError("no training case has both judgments and a ranking; cannot tune weights")
    tables = []
    for p in judged:
        pool = _pool(p)
        z = np.column_stack([_z(p.feats[:, j]) for j in range(p.feats.shape[1])])[pool]
        tables.append((p.case_id, pool, z))
    sub_qrels = {p.case_id: qrels[p.case_id] for p in judged}

    def objective(w: np.ndarray) -> float:
        run: Run = {}
        for cid, pool, z in tables:
            s = z @ w
            k = min(10, len(s))
            top = np.argpartition(-s, k - 1)[:k] if k else []
            run[cid] = {ids[pool[i]]: float(s[i]) for i in top}
        return score_run(run, sub_qrels, TUNE_METRIC)[TUNE_METRIC]

    w = np.array(default_weights())
    best = objective(w)
    for _ in range(passes):
        improved = False
        for j in range(len(FEATURES)):
            for g in WEIGHT_GRID:
                if g == w[j]:
                    continue
                trial = w.copy()
                trial[j] = g
                if not trial.any():
                    continue
                v = objective(trial)
                if v > best + 1e-9:
                    best, w, improved = v, trial, True
        if not improved:
            break
    return [float(x) for x in w], best


def _z(col: np.ndarray) -> np.ndarray:
    from engine.core.fusion import normalize_array
    return normalize_array(col, "zscore").astype(np.float32)


# ---------------------------------------------------------------- rankings for methods

def rankings_for(prepared: Sequence[PreparedCase], ids: Sequence[str], method: str, depth: int,
                 weights: Mapping[str, Sequence[float]] | None = None) -> dict[str, list[tuple[str, float]]]:
    """{case_id: [(dataset_id, score)]} best first. For `tuned`, `weights` maps case_id → weight vector."""
    if method not in METHODS:
        raise EngineError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    out = {}
    for p in prepared:
        if method == "tuned":
            ranked = rank_weighted(p.feats, weights[p.case_id], p.banned, depth)  # type: ignore[index]
        else:
            ranked = rank_rrf(p.feats, RRF_SYSTEMS[method], p.banned, depth)
        out[p.case_id] = [(ids[i], s) for i, s in ranked]
    return out


def cross_validated_weights(index: DseIndex, cases: Mapping[str, Case], queries: Mapping[str, str],
                            folds: Sequence[Fold], case_ids: Sequence[str], prepared: Sequence[PreparedCase],
                            cases_path: object = "cases.tsv") -> tuple[dict[str, list[float]], dict]:
    """Weights for every case: those of the fold whose test part holds it, tuned on that fold's train
    cases; cases in no fold's test part get weights tuned on every judged case."""
    have = {p.case_id: p for p in prepared}
    judged_all: Qrels = {}
    for f in folds:
        for part in (f.train, f.valid, f.test):
            judged_all.update(part)
    need = [c for c in judged_all if c in cases and c not in have]
    if need:
        info(f"dse: scoring {len(need)} judged training case(s)")
        for p in prepare_cases(index, cases, queries, need, cases_path):
            have[p.case_id] = p
    unknown = [c for c in judged_all if c not in cases]
    if unknown:
        warn(f"{len(unknown)} judged case id(s) are not in the cases file; not used for tuning: {preview(unknown)}")
    per_case: dict[str, list[float]] = {}
    report: dict = {"features": list(FEATURES), "folds": {}}
    for f in folds:
        train = [have[c] for c in f.train if c in have]
        w, v = tune_weights(train, f.train, index.ids)
        report["folds"][f.name] = {"train_ndcg@10": round(v, 4), "weights": dict(zip(FEATURES, w))}
        info(f"dse tune {f.name}: train nDCG@10 {v:.4f} on {len(train)} cases")
        for c in f.test:
            per_case.setdefault(c, w)
    rest = [c for c in case_ids if c not in per_case]
    if rest:
        w, v = tune_weights(list(have.values()), judged_all, index.ids)
        report["all"] = {"train_ndcg@10": round(v, 4), "weights": dict(zip(FEATURES, w))}
        for c in rest:
            per_case[c] = w
    return per_case, report


def load_weights(path: str | os.PathLike) -> list[float]:
    """A weights file: {feature: weight}, or the report `--save-weights` writes (its `all` weights)."""
    data = read_json(path, "weights file")
    if isinstance(data, dict) and isinstance(data.get("all"), dict):
        data = data["all"].get("weights", data["all"])
    if not isinstance(data, dict) or not data:
        raise EngineError(f"{path}: expected {{feature: weight}}; features: {', '.join(FEATURES)}")
    try:
        vec = weights_vector({k: float(v) for k, v in data.items()})
    except (TypeError, ValueError):
        raise EngineError(f"{path}: weights must be numbers") from None
    if not any(vec) or not all(math.isfinite(x) for x in vec):
        raise EngineError(f"{path}: weights must be finite and not all zero")
    return vec


# ---------------------------------------------------------------- commands

def _load_inputs(name: str, root: str | os.PathLike, queries: str | os.PathLike, cases_path: str | os.PathLike):
    index = DseIndex.open(name, root)
    return index, read_dse_queries(queries), read_cases(cases_path)


def ensure_index(datasets: str | os.PathLike, name: str, root: str | os.PathLike) -> Path:
    """Build `root/name` from `datasets` unless it already indexes that file (same path, same size)."""
    folder = Path(root) / name
    manifest = folder / MANIFEST
    src = Path(datasets)
    if manifest.exists() and src.exists():
        m = json.loads(manifest.read_text(encoding="utf-8"))
        if m.get("source") == str(src.resolve()) and m.get("source_bytes") == src.stat().st_size:
            info(f"dse: using the existing index {folder}")
            return folder
    return build_dse(datasets, name, root)


def submit_dse(queries: str | os.PathLike, cases: str | os.PathLike, out: str | os.PathLike,
               name: str = "dsebench", root: str | os.PathLike = "indexes", split: str = "test",
               method: str = "rrf", folds: str | os.PathLike | None = None,
               weights: str | os.PathLike | None = None, save_weights: str | os.PathLike | None = None,
               depth: int = DEFAULT_DEPTH, run_id: str | None = None,
               datasets: str | os.PathLike | None = None) -> int:
    """Write one ranking per case (`case_id Q0 dataset_id rank score runid`); returns the number of cases.

    With `datasets`, the index is built first unless `root/name` already indexes that same file:
    one command from DSEBench's `datasets.json` to a run.
    """
    if method not in METHODS:
        raise EngineError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    if method == "tuned" and folds is None and weights is None:
        raise EngineError("--method tuned needs --folds DIR (DSEBench's Data/Splits/5-Fold_split, weights tuned "
                          "per fold on its train cases) or --weights FILE")
    if depth < 1:
        raise EngineError(f"--depth must be at least 1, not {depth}")
    if datasets is not None:
        ensure_index(datasets, name, root)
    index, qs, cs = _load_inputs(name, root, queries, cases)
    case_ids = select_cases(cs, split)
    if not case_ids:
        raise EngineError(f"{cases}: no case in split {split!r}")
    prepared = prepare_cases(index, cs, qs, case_ids, cases)
    per_case = None
    if method == "tuned":
        if weights is not None:
            vec = load_weights(weights)
            per_case = {p.case_id: vec for p in prepared}
        else:
            per_case, report = cross_validated_weights(index, cs, qs, read_folds(folds), case_ids,  # type: ignore[arg-type]
                                                       prepared, cases)
            if save_weights is not None:
                write_json(save_weights, report)
    rankings = rankings_for(prepared, index.ids, method, depth, per_case)
    write_run(out, rankings, run_id or f"dse-{method}")
    info(f"dse submit: {len(rankings)} cases → {out}")
    return len(rankings)


def eval_dse(judgments: str | os.PathLike, folds: str | os.PathLike | None = None,
             run: str | os.PathLike | None = None, name: str = "dsebench", root: str | os.PathLike = "indexes",
             queries: str | os.PathLike | None = None, cases: str | os.PathLike | None = None,
             depth: int = DEFAULT_DEPTH) -> dict[str, dict[str, float]]:
    """Scores with the DSEBench gain on the judged cases (with --folds: the folds' test cases).

    With `run`: that run file's scores (and one row per fold). Without: the variant table of the built
    index — query only, examples only, fused RRF, and (with folds) fused tuned, cross-validated.
    """
    qrels = read_dsebench_judgments(judgments)  # gain = query_rel × target_sim
    fold_list = read_folds(folds) if folds is not None else []
    if fold_list:
        tested = {c for f in fold_list for c in f.test}
        missing = [c for c in tested if c not in qrels]
        if missing:
            warn(f"{len(missing)} fold test case(s) have no judgments in {judgments}: {preview(missing)}")
        qrels = {c: g for c, g in qrels.items() if c in tested}
    if run is not None:
        run_scores = load_dse_run(run)
        table = {"run": score_run(run_scores, qrels)}
        for f in fold_list:
            sub = {c: g for c, g in qrels.items() if c in f.test}
            if sub:
                table[f.name] = score_run({c: run_scores[c] for c in sub if c in run_scores}, sub)
        return table
    if queries is None or cases is None:
        raise EngineError("without --run, `engine dse eval` ranks the judged cases itself: give --queries and "
                          "--cases (and --name of a built index)")
    index, qs, cs = _load_inputs(name, root, queries, cases)
    case_ids = [c for c in qrels if c in cs]
    unknown = [c for c in qrels if c not in cs]
    if unknown:
        warn(f"{len(unknown)} judged case id(s) are not in {cases}: {preview(unknown)}")
    prepared = prepare_cases(index, cs, qs, case_ids, cases)
    table: dict[str, dict[str, float]] = {}
    labels = {"query": "query only (RRF dense+BM25)", "examples": "examples only (RRF dense+BM25)",
              "rrf": "fused untuned (RRF)"}
    for method, label in labels.items():
        table[label] = score_run(_as_run(rankings_for(prepared, index.ids, method, depth)), qrels)
    if fold_list:
        per_case, _ = cross_validated_weights(index, cs, qs, fold_list, case_ids, prepared, cases)
        table["fused tuned (5-fold CV)"] = score_run(
            _as_run(rankings_for(prepared, index.ids, "tuned", depth, per_case)), qrels)
    return table


def _as_run(rankings: Mapping[str, Sequence[tuple[str, float]]]) -> Run:
    """Rankings as a run whose scores keep the given order (what `write_run` would print)."""
    from engine.eval.runs import strictly_decreasing
    return {q: dict(zip([d for d, _ in r], strictly_decreasing([s for _, s in r]))) for q, r in rankings.items()}


def format_table(table: Mapping[str, Mapping[str, float]], metrics: str = DSE_METRICS) -> str:
    """A markdown table, one row per run or variant, DSEBench's column order."""
    cols = [m.strip() for m in metrics.split(",")]
    heads = {"ndcg@5": "nDCG@5", "ndcg@10": "nDCG@10", "map@5": "MAP@5", "map@10": "MAP@10",
             "recall@5": "R@5", "recall@10": "R@10"}
    lines = ["| variant | " + " | ".join(heads.get(c, c) for c in cols) + " |",
             "| --- |" + " ---: |" * len(cols)]
    for label, means in table.items():
        lines.append(f"| {label} | " + " | ".join(f"{means[c]:.4f}" for c in cols) + " |")
    return "\n".join(lines)


def eval_command(judgments: str | os.PathLike, folds: str | os.PathLike | None = None,
                 run: str | os.PathLike | None = None, name: str = "dsebench", root: str | os.PathLike = "indexes",
                 queries: str | os.PathLike | None = None, cases: str | os.PathLike | None = None,
                 depth: int = DEFAULT_DEPTH, out: str | os.PathLike | None = None) -> str:
    """`engine dse eval`: the table as Markdown (and as JSON in `out`)."""
    table = eval_dse(judgments, folds, run, name, root, queries, cases, depth)
    if out is not None:
        write_json(out, table)
    return format_table(table)
