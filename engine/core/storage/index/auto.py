"""`--index auto`: pick the index by measuring, not by rule of thumb.

1. Candidates: exact Flat / SQfp16 / SQ8, HNSW32, IVF-Flat and IVF-PQ with an exact refine, each with its
   memory at full size estimated (those over `--memory-budget` are dropped).
2. A pilot: each candidate is built on a sample (≤ `PILOT` vectors, IVF lists scaled to it) and its knob
   (nprobe, efSearch, k_factor) swept on held-out queries **of the modality users send** (text queries
   for an image–text collection: an index trained on image vectors can lose recall on text queries);
   the fastest setting reaching `--recall` (plus a margin) wins, measured as speed-up over exact search,
   if it is at least `MIN_SPEEDUP` times faster than exact Flat (else Flat: a smaller gain is timing noise);
   under `MIN_VECTORS` vectors the index is exact Flat without measuring.
3. The winner is built at full size and its knob tuned again there on the same queries; the operating
   point and the whole recall–QPS table go into the manifest (`index_choice`) and are printed.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from engine.core.storage.index.faiss_index import build_index, faiss_module, use_blas_for
from engine.errors import EngineError, opt

PILOT = 100_000
MARGIN = 0.01  # the pilot's recall must beat the target by this much (its sample is smaller than the index)
K = 10
MIN_SPEEDUP = 1.5  # another index wins over exact Flat only this many times faster (1.1× is timing noise)
MIN_VECTORS = 1000  # below this, exact Flat: a scan of a few hundred vectors takes microseconds
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_bytes(text: str | None) -> int | None:
    """'4G', '512M', '1.5g', '800000000' → bytes (None stays None)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)i?b?\s*", str(text).lower())
    if not m:
        raise EngineError(f"{opt('memory_budget')} must be a size such as 4G, 512M or 800000000, not {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


@dataclass
class Candidate:
    factory: str                      # at full size
    knob: str | None                  # FAISS parameter swept, None: none
    values: tuple[float, ...] = ()
    fixed: dict = field(default_factory=dict)  # other parameters set while sweeping


def _nlist(n: int) -> int:
    return int(2 ** round(math.log2(max(16, 4 * math.sqrt(n)))))


def _pq_m(dim: int) -> int:
    for m in (64, 48, 32, 24, 16, 8, 4, 2, 1):
        if dim % m == 0 and dim // m >= 4 or m == 1:
            return m
    return 1


def candidates(n: int, dim: int) -> list[Candidate]:
    nlist = _nlist(n)
    m = _pq_m(dim)
    out = [Candidate("Flat", None), Candidate("SQfp16", None), Candidate("SQ8", None),
           Candidate("HNSW32", "efSearch", (16, 32, 64, 128, 256, 512))]
    if n >= 40 * 64:
        probes = tuple(p for p in (1, 2, 4, 8, 16, 32, 64, 128, 256) if p <= nlist)
        out += [Candidate(f"IVF{nlist},Flat", "nprobe", probes),
                Candidate(f"IVF{nlist},PQ{m}np,RFlat", "k_factor_rf", (1, 2, 4, 8, 16, 32), {"nprobe": 0})]
    return out


def memory_bytes(factory: str, n: int, dim: int) -> int:
    """Resident bytes of an index at full size (codes, graph links, ids; FAISS's own overhead aside)."""
    if factory == "Flat":
        return n * dim * 4
    if factory == "SQfp16":
        return n * dim * 2
    if factory == "SQ8":
        return n * dim
    if factory.startswith("HNSW"):
        return n * (dim * 4 + int(re.match(r"HNSW(\d+)", factory).group(1)) * 2 * 4 + 8)
    nlist = int(re.match(r"IVF(\d+)", factory).group(1))
    if factory.endswith(",Flat"):
        return n * (dim * 4 + 8) + nlist * dim * 4
    m = int(re.search(r"PQ(\d+)", factory).group(1))
    return n * (m + 8) + nlist * dim * 4 + (n * dim * 4 if "RFlat" in factory else 0)


def _scaled(factory: str, n: int) -> str:
    """The factory for a pilot sample of `n` vectors: IVF lists scaled to it."""
    return re.sub(r"IVF\d+", f"IVF{_nlist(n)}", factory)


def _blocks(vectors: np.ndarray, normalize: bool, block: int = 65536):
    from engine.core.encoders.base import l2_normalize
    for lo in range(0, len(vectors), block):
        part = vectors[lo:lo + block]
        yield lo, l2_normalize(part) if normalize else np.ascontiguousarray(part, dtype=np.float32)


def _truth(vectors: np.ndarray, queries: np.ndarray, normalize: bool = False) -> np.ndarray:
    """Exact top-10 rows, block by block (no copy of the vectors)."""
    from engine.core.storage.index.faiss_index import exact_top_k
    rows = _Normalized(vectors) if normalize else vectors
    return exact_top_k(rows, queries, K)[1] if len(rows) else np.full((len(queries), K), -1, np.int64)


class _Normalized:
    """Rows L2-normalized as they are sliced."""

    def __init__(self, vectors):
        self.vectors = vectors

    def __len__(self) -> int:
        return len(self.vectors)

    def __getitem__(self, key):
        from engine.core.encoders.base import l2_normalize
        return l2_normalize(self.vectors[key])


def _exact_qps(vectors: np.ndarray, queries: np.ndarray, normalize: bool = False, rounds: int = 3) -> float:
    """Exact search's queries per second at batch 64 over these vectors (timed over a share of them at
    full size, scaled: a scan's time is linear in the vectors scanned); best of `rounds` passes."""
    faiss = faiss_module()
    part = next(_blocks(vectors, normalize, 262_144))[1]
    use_blas_for(SimpleNamespace(ntotal=len(vectors), d=vectors.shape[1]), 64)
    best = 0.0
    for _ in range(rounds):
        t = time.perf_counter()
        for lo in range(0, len(queries), 64):
            faiss.knn(queries[lo:lo + 64], part, K, metric=faiss.METRIC_INNER_PRODUCT)
        best = max(best, len(queries) / max(time.perf_counter() - t, 1e-9))
    return best * len(part) / len(vectors)


def _recall(got: np.ndarray, truth: np.ndarray) -> float:
    """Share of the exact top-10 found (of all rows, where a collection has fewer than 10)."""
    return float(np.mean([len(set(g[g >= 0].tolist()) & set(t[t >= 0].tolist())) / max(1, int((t >= 0).sum()))
                          for g, t in zip(got, truth)]))


def _qps(index, queries: np.ndarray, rounds: int = 3) -> tuple[float, np.ndarray]:
    """Queries per second at batch 64 (what `search --queries` sends): the best of `rounds` passes, since
    other load only ever slows a pass down; and the results."""
    use_blas_for(index, 64)
    out = index.search(queries, K)[1]
    best = 0.0
    for _ in range(rounds):
        t = time.perf_counter()
        for lo in range(0, len(queries), 64):
            index.search(queries[lo:lo + 64], K)
        best = max(best, len(queries) / max(time.perf_counter() - t, 1e-9))
    return best, out


def sweep(index, cand: Candidate, queries: np.ndarray, truth: np.ndarray, nlist: int | None = None) -> list[dict]:
    """recall@10 and QPS at each knob value."""
    faiss = faiss_module()
    space = faiss.ParameterSpace()
    rows = []
    fixed = dict(cand.fixed)
    if "nprobe" in fixed:  # PQ + refine: visit enough lists that the PQ stage is not the bottleneck
        fixed["nprobe"] = min(nlist or 64, 64)
    for name, value in fixed.items():
        space.set_index_parameter(index, name, float(value))
    for value in (cand.values or (None,)):
        if value is not None:
            space.set_index_parameter(index, cand.knob, float(value))
        qps, got = _qps(index, queries)
        rows.append({"factory": cand.factory, "params": {**fixed, **({cand.knob: value} if cand.knob else {})},
                     "recall@10": _recall(got, truth), "qps": qps})
        if rows[-1]["recall@10"] >= 0.999:
            break  # more of the knob only costs time
    return rows


@dataclass
class Choice:
    factory: str
    params: dict
    recall: float
    qps: float
    exact_qps: float
    table: list[dict]       # the full-size sweep of the chosen index
    pilot: list[dict]       # every candidate's sweep on the pilot sample
    target: float
    budget: int | None
    queries: str

    def manifest(self) -> dict:
        return {"factory": self.factory, "params": self.params, "recall@10": self.recall, "qps": self.qps,
                "exact_qps": self.exact_qps, "speedup": self.qps / self.exact_qps if self.exact_qps else None,
                "target_recall": self.target, "memory_budget": self.budget, "queries": self.queries,
                "table": self.table, "pilot": self.pilot}


def _best(rows: list[dict], target: float) -> dict | None:
    ok = [r for r in rows if r["recall@10"] >= target]
    return max(ok, key=lambda r: r["qps"]) if ok else None


def choose(vectors: np.ndarray, queries: np.ndarray, target: float = 0.95, budget: int | None = None,
           queries_label: str = "held-out vectors", pilot: int = PILOT, seed: int = 0,
           normalize: bool = False) -> tuple[object, Choice]:
    """The index that reaches `target` recall@10 fastest within `budget` bytes, built at full size and tuned."""
    from engine.progress import info
    if not 0 < target <= 1:
        raise EngineError(f"{opt('recall')} must be in (0, 1], not {target}")
    n, dim = vectors.shape
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    cands = [c for c in candidates(n, dim) if budget is None or memory_bytes(c.factory, n, dim) <= budget]
    if n < MIN_VECTORS and any(c.factory == "Flat" for c in cands):
        info(f"auto index: {n:,} vectors (under {MIN_VECTORS:,}): exact Flat, nothing to gain from another")
        cands = [c for c in cands if c.factory == "Flat"]
    if not cands:
        need = min(memory_bytes(c.factory, n, dim) for c in candidates(n, dim))
        raise EngineError(f"no index of {n:,} × {dim} fits in {opt('memory_budget')} {budget:,} bytes; the "
                          f"smallest candidate needs {need:,}")
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(n, pilot, replace=False)) if n > pilot else np.arange(n)
    pilot_vecs = next(_blocks(vectors[sample], normalize, len(sample)))[1]
    truth = _truth(pilot_vecs, queries)
    exact_qps = _exact_qps(pilot_vecs, queries)
    pilot_rows: list[dict] = []
    best, best_speed = None, 0.0
    for cand in cands:
        factory = _scaled(cand.factory, len(pilot_vecs))
        if factory.startswith("IVF") and len(pilot_vecs) < 40 * _nlist(len(pilot_vecs)):
            continue
        info(f"auto index: trying {factory} on {len(pilot_vecs):,} vectors")
        index = build_index(pilot_vecs, factory)
        rows = sweep(index, Candidate(factory, cand.knob, cand.values, cand.fixed), queries, truth,
                     _nlist(len(pilot_vecs)))
        for r in rows:
            r["memory_bytes"] = memory_bytes(cand.factory, n, dim)
        pilot_rows += rows
        hit = _best(rows, min(1.0, target + MARGIN)) or (_best(rows, target) if cand.knob is None else None)
        if hit and hit["qps"] > best_speed:
            best, best_speed = cand, hit["qps"]
        del index
    exact_qps = next((r["qps"] for r in pilot_rows if r["factory"] == "Flat"), exact_qps)  # same code path
    for r in pilot_rows:
        r["speedup"] = r["qps"] / exact_qps
    if best is None:  # nothing approximate reaches the target: exact search within the budget
        best = next((c for c in cands if c.knob is None), cands[0])
    flat = next((c for c in cands if c.factory == "Flat"), None)
    if flat is not None and best is not flat and best_speed < MIN_SPEEDUP * exact_qps:
        info(f"auto index: {best.factory} is only {best_speed / exact_qps:.1f}× faster than exact Flat (under "
             f"{MIN_SPEEDUP}×): Flat")
        best = flat
    info(f"auto index: building {best.factory} over {n:,} vectors")
    del pilot_vecs
    if n <= pilot:  # the pilot was the whole collection: its sweep is the full-size one
        index = build_index(vectors, best.factory, normalize=normalize)
        table = [r for r in pilot_rows if r["factory"] == best.factory]
    else:  # tune at full size against full-size truth
        index = build_index(vectors, best.factory, normalize=normalize)
        truth = _truth(vectors, queries, normalize)
        exact_qps = _exact_qps(vectors, queries, normalize)
        table = sweep(index, best, queries, truth, _nlist(n))
        for r in table:
            r["speedup"] = r["qps"] / exact_qps
    point = _best(table, target) or max(table, key=lambda r: r["recall@10"])
    from engine.core.storage.index.faiss_index import apply_search_params
    apply_search_params(index, point["params"])
    return index, Choice(best.factory, point["params"], point["recall@10"], point["qps"], exact_qps, table,
                         pilot_rows, target, budget, queries_label)


def choice_table(choice: dict) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of an `index_choice` manifest entry: the pilot and the full-size sweep."""
    rows = []
    for stage, key in (("pilot", "pilot"), ("chosen", "table")):
        for r in choice.get(key, []):
            params = ",".join(f"{k}={v:g}" for k, v in r["params"].items()) or "-"
            rows.append([stage, r["factory"], params, f"{r['recall@10']:.3f}", f"{r['qps']:.0f}",
                         f"{r.get('speedup', 0):.1f}", f"{r.get('memory_bytes', 0) / 2**20:.0f}"
                         if r.get("memory_bytes") else ""])
    return ["stage", "index", "knobs", "recall@10", "QPS", "× exact", "MiB at full size"], rows
