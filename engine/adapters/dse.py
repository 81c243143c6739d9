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
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from engine.bm25 import BM25Index
from engine.convert import read_dsebench_judgments, read_json_run
from engine.errors import EngineError, where
from engine.fusion import rrf, weighted_arrays
from engine.io.atomic import write_json, write_npy
from engine.io.tables import read_json, read_queries
from engine.progress import info, track, warn
from engine.runs import Qrels, Run, write_run

FIELDS = ("title", "description", "tags", "author", "summary")
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


# ---------------------------------------------------------------- reading DSEBench files

@dataclass
class Case:
    case_id: str
    query_id: str
    examples: list[str]
    line: int


def _show(items: Sequence[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (" …" if len(items) > n else "")


def _field_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return "; ".join(str(v).strip() for v in value if v is not None and str(v).strip())
    return str(value).strip()


def read_datasets(path: str | os.PathLike) -> list[dict[str, str]]:
    """Records `{id, title, description, tags, author, summary}` with every field as text.

    Faults are warned about (grouped, naming record numbers and ids) and the load goes on: records
    without an id and repeated ids (the first is kept) are skipped; missing or empty fields become
    empty text; tags given as one string are split on commas, semicolons or bars.
    """
    path = Path(path)
    data = read_json(path, "file; give DSEBench's datasets.json")
    if isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()):
        data = [{"id": k, **v} for k, v in data.items()]
    if not isinstance(data, list):
        raise EngineError(f"{path}: expected a JSON list of dataset records {{id, title, description, tags, "
                          "author, summary}}")
    records: list[dict[str, str]] = []
    seen: dict[str, int] = {}
    no_id, not_obj, dups, tag_strings = [], [], [], []
    empty: dict[str, list[str]] = {f: [] for f in FIELDS}
    for n, obj in enumerate(data, 1):
        if not isinstance(obj, dict):
            not_obj.append(f"#{n}")
            continue
        rid = _field_text(obj.get("id", obj.get("dataset_id")))
        if not rid:
            no_id.append(f"#{n}")
            continue
        if rid in seen:
            dups.append(f"{rid} (#{n}, first #{seen[rid]})")
            continue
        seen[rid] = n
        rec = {"id": rid}
        for f in FIELDS:
            value = obj.get(f)
            if f == "tags" and isinstance(value, str) and value.strip():
                tag_strings.append(rid)
                value = [t for t in re.split(r"[,;|]", value) if t.strip()]
            rec[f] = _field_text(value)
            if not rec[f]:
                empty[f].append(rid)
        records.append(rec)
    if not_obj:
        warn(f"{path}: {len(not_obj)} entr{'y is' if len(not_obj) == 1 else 'ies are'} not a JSON object, "
             f"skipped: record {_show(not_obj)}")
    if no_id:
        warn(f"{path}: {len(no_id)} record(s) without an id, skipped: record {_show(no_id)}")
    if dups:
        warn(f"{path}: {len(dups)} duplicate id(s), the first record of each is kept: {_show(dups)}")
    if tag_strings:
        warn(f"{path}: {len(tag_strings)} record(s) give tags as a string instead of a list (split on , ; |): "
             f"{_show(tag_strings)}")
    for f, ids in empty.items():
        if ids:
            warn(f"{path}: {len(ids)} record(s) have a missing or empty {f!r} (scored as empty): {_show(ids)}")
    if not records:
        raise EngineError(f"{path}: no usable dataset records (each needs an `id`)")
    return records


def record_text(rec: Mapping[str, str]) -> str:
    """The whole record as one text (embedded as `all`, and BM25's document)."""
    return "\n".join(rec[f] for f in FIELDS if rec.get(f))


def read_dse_queries(path: str | os.PathLike) -> dict[str, str]:
    """DSEBench `queries.tsv` (`query_id<TAB>text`, no header) → {query_id: text}."""
    return dict(read_queries(path))


def read_cases(path: str | os.PathLike) -> dict[str, Case]:
    """DSEBench `cases.tsv` (`case_id<TAB>query_id<TAB>example_dataset_id`, no header).

    A case with several example datasets repeats its case_id on several lines (or lists more ids in
    further columns); a case naming two different queries is an error.
    """
    from engine.problems import read_text_lines
    path = Path(path)
    cases: dict[str, Case] = {}
    for n, text in enumerate(read_text_lines(path), 1):
        if not text.strip():
            continue
        parts = [p.strip() for p in text.split("\t")]
        if len(parts) < 3 or not all(parts[:3]):
            raise EngineError(f"{where(path, n)}: expected `case_id<TAB>query_id<TAB>example_dataset_id`, "
                              f"found {len(parts)} field(s)")
        if n == 1 and parts[0].lower() in ("case_id", "case") and parts[1].lower() in ("query_id", "query"):
            continue  # a header some tools add
        case_id, query_id, examples = parts[0], parts[1], [p for p in parts[2:] if p]
        case = cases.get(case_id)
        if case is None:
            cases[case_id] = Case(case_id, query_id, examples, n)
        elif case.query_id != query_id:
            raise EngineError(f"{where(path, n)}: case {case_id!r} has query {query_id!r} here but "
                              f"{case.query_id!r} on line {case.line}")
        else:
            case.examples += [e for e in examples if e not in case.examples]
    if not cases:
        raise EngineError(f"{path}: no cases")
    return cases


@dataclass
class Fold:
    name: str
    train: Qrels
    valid: Qrels
    test: Qrels


def read_folds(folder: str | os.PathLike) -> list[Fold]:
    """DSEBench `Data/Splits/5-Fold_split`: `fold_k/{train,valid,test}.json`, each a judgments list."""
    folder = Path(folder)
    if not folder.is_dir():
        raise EngineError(f"{folder}: no such folder; give DSEBench's Data/Splits/5-Fold_split")
    dirs = sorted((d for d in folder.iterdir() if d.is_dir() and (d / "test.json").exists()),
                  key=lambda d: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", d.name)])
    if not dirs:
        raise EngineError(f"{folder}: no fold_*/test.json inside; give DSEBench's Data/Splits/5-Fold_split")
    folds = []
    for d in dirs:
        parts = {}
        for part in ("train", "valid", "test"):
            p = d / f"{part}.json"
            parts[part] = read_dsebench_judgments(p) if p.exists() else {}
        overlap = set(parts["train"]) & set(parts["test"])
        if overlap:
            raise EngineError(f"{d}: case(s) {_show(sorted(overlap))} are in both train.json and test.json")
        folds.append(Fold(d.name, parts["train"], parts["valid"], parts["test"]))
    return folds


# ---------------------------------------------------------------- metrics (the one call into `engine eval`)

def score_run(run: Run, qrels: Qrels, metrics: str = DSE_METRICS) -> dict[str, float]:
    """Means over the qrels' cases with trec_eval semantics, via `engine.evaluate` (DSEBench gain in qrels)."""
    from engine.evaluate import evaluate
    return evaluate(run, qrels, metrics).means


# ---------------------------------------------------------------- build

def _encoder(spec: str):
    from engine.encoders import load_encoder
    return load_encoder(spec)


def build_dse(datasets: str | os.PathLike, name: str = "dsebench", root: str | os.PathLike = "indexes",
              model: str | None = None, batch_size: int = 64) -> Path:
    """Embed every field and the whole record, and index all fields with BM25, into `root/name`."""
    from engine.encoders import DEFAULT_TEXT_SPEC
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
        warn(f"{len(unknown_ex)} example dataset id(s) are not in the index and are ignored: {_show(unknown_ex, 3)}")
    examples_only = [msg for cid, msg in unknown_q if cid not in skipped]
    if examples_only:
        warn(f"{len(examples_only)} case(s) name a query id missing from the queries file; ranked by their "
             f"examples only: {_show(examples_only, 3)}")
    if skipped:
        warn(f"{len(skipped)} case(s) have neither a known query nor a known example dataset; no ranking: "
             f"{_show(skipped)}")
    return out


def select_cases(cases: Mapping[str, Case], split: str) -> list[str]:
    """`test`: DSEBench's numbered test cases (ids all digits); `train`: the others (gen_*, l1_*);
    `all`; or a file: a DSEBench split JSON (judgments list) or one case id per line."""
    if split == "all":
        return list(cases)
    if split == "test":
        return [c for c in cases if c.isdigit()]
    if split == "train":
        return [c for c in cases if not c.isdigit()]
    path = Path(split)
    if not path.exists():
        raise EngineError(f"--split {split!r}: use test, train, all, or a split file (JSON judgments or ids)")
    if path.suffix.lower() == ".json":
        wanted = list(read_dsebench_judgments(path))
    else:
        wanted = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    missing = [c for c in wanted if c not in cases]
    if missing:
        warn(f"{split}: {len(missing)} case id(s) are not in the cases file and are skipped: {_show(missing)}")
    return [c for c in wanted if c in cases]


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
    from engine.fusion import normalize_array
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
        warn(f"{len(unknown)} judged case id(s) are not in the cases file; not used for tuning: {_show(unknown)}")
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
            warn(f"{len(missing)} fold test case(s) have no judgments in {judgments}: {_show(missing)}")
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
        warn(f"{len(unknown)} judged case id(s) are not in {cases}: {_show(unknown)}")
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


def load_dse_run(path: str | os.PathLike) -> Run:
    """A TREC run, or a DSEBench baseline results file (`Baselines/*/*.json`: {case_id: {dataset_id: score}})."""
    if Path(path).suffix.lower() == ".json":
        return read_json_run(path)
    from engine.evaluate import load_run
    return load_run(path)


def _as_run(rankings: Mapping[str, Sequence[tuple[str, float]]]) -> Run:
    """Rankings as a run whose scores keep the given order (what `write_run` would print)."""
    from engine.runs import strictly_decreasing
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
