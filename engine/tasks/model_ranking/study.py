"""Repeated k-fold cross-validation of ranking variants, with paired significance against a baseline.

With ~80 training queries one 10-fold split moves a mean by a few hundredths, so every variant is scored on
the same R splits (seeds 0..R−1) and reported as mean ± std over the repeats; its gain over the baseline is
tested paired over queries (each query's value averaged over the repeats) with a sign-flip randomization
test (`engine.eval.significance.randomization`), so the p-value says whether the gain outlives the choice of queries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from engine.display import format_table
from engine.errors import EngineError
from engine.eval.significance import randomization
from engine.progress import track
from engine.core.folds import fold_assignment

FoldPredictor = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(training rows, held-out rows) → predictions (held-out rows × candidates) from the training rows only."""
PerQuery = Callable[[np.ndarray], Mapping[str, np.ndarray]]
"""predictions (queries × candidates) → metric name → one value per query."""


def memoized(predictor: FoldPredictor) -> FoldPredictor:
    """`predictor` remembering its predictions per (training rows, held-out rows): the variants of one study
    (and the guards' inner splits, the same seeds for every variant) ask a deterministic method for the same
    folds again and again."""
    seen: dict[tuple[bytes, bytes], np.ndarray] = {}

    def predict(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        key = (np.asarray(train, np.int64).tobytes(), np.asarray(test, np.int64).tobytes())
        if key not in seen:
            seen[key] = predictor(train, test)
        return seen[key]
    return predict


def out_of_fold(predictor: FoldPredictor, n: int, m: int, folds: int, seed: int) -> np.ndarray:
    """Every query predicted once, from the queries outside its fold."""
    fold_of = fold_assignment(n, folds, seed)
    if n - np.bincount(fold_of).max() < 2:
        raise EngineError(f"{n} training queries are too few for {folds}-fold cross-validation")
    out = np.empty((n, m))
    for f in range(int(fold_of.max()) + 1):
        test = np.flatnonzero(fold_of == f)
        out[test] = predictor(np.flatnonzero(fold_of != f), test)
    return out


@dataclass
class Variant:
    """One ranking method's per-query metric values over the repeats: name → (repeats × queries)."""
    name: str
    values: dict[str, np.ndarray]
    note: str = ""


def run_variant(name: str, predictor: FoldPredictor, per_query: PerQuery, n: int, m: int, folds: int,
                repeats: int, note: str = "") -> Variant:
    """Score `predictor` out of fold on `repeats` splits (seeds 0..repeats−1)."""
    rows: dict[str, list[np.ndarray]] = {}
    for seed in track(range(repeats), total=repeats, description=name):
        for metric, v in per_query(out_of_fold(predictor, n, m, folds, seed)).items():
            rows.setdefault(metric, []).append(np.asarray(v, dtype=np.float64))
    return Variant(name, {k: np.stack(v) for k, v in rows.items()}, note)


def paired_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p of mean(a − b) ≠ 0, paired over queries: the project's randomization test
    (`engine.eval.significance`)."""
    return randomization(b, a)


@dataclass
class Study:
    """Variants scored on the same splits; `groups` name subsets of the queries (e.g. criticality tiers)."""
    variants: list[Variant]
    metrics: list[str]
    baseline: str
    folds: int
    repeats: int
    groups: dict[str, np.ndarray] = field(default_factory=dict)

    def variant(self, name: str) -> Variant:
        return next(v for v in self.variants if v.name == name)

    def paired(self, a: str, b: str, metric: str) -> tuple[float, float]:
        """Mean gain of variant a over variant b (both averaged over the repeats) and its paired p."""
        va, vb = self.variant(a).values[metric].mean(axis=0), self.variant(b).values[metric].mean(axis=0)
        return float((va - vb).mean()), paired_p(va, vb)

    def summary(self, rows: np.ndarray | None = None) -> dict[str, dict[str, dict[str, float]]]:
        """variant → metric → {mean, std (over repeats), gain and p (paired, vs the baseline)}."""
        base = self.variant(self.baseline)
        out: dict[str, dict[str, dict[str, float]]] = {}
        for v in self.variants:
            out[v.name] = {}
            for metric in self.metrics:
                values = v.values[metric] if rows is None else v.values[metric][:, rows]
                ref = base.values[metric] if rows is None else base.values[metric][:, rows]
                per_repeat = values.mean(axis=1)
                entry = {"mean": float(per_repeat.mean()), "std": float(per_repeat.std(ddof=1)) if len(values) > 1
                         else 0.0, "gain": float(per_repeat.mean() - ref.mean(axis=1).mean())}
                entry["p"] = 1.0 if v.name == self.baseline else paired_p(values.mean(axis=0), ref.mean(axis=0))
                out[v.name][metric] = entry
        return out

    def to_json(self) -> dict:
        return {"folds": self.folds, "repeats": self.repeats, "baseline": self.baseline,
                "metrics": self.metrics, "all": self.summary(),
                "groups": {g: {"n": len(rows), "variants": self.summary(rows)} for g, rows in self.groups.items()},
                "notes": {v.name: v.note for v in self.variants if v.note},
                "per_query": {v.name: {m: [round(float(x), 6) for x in v.values[m].mean(axis=0)] for m in self.metrics}
                              for v in self.variants}}

    def table(self, labels: Mapping[str, str] | None = None) -> str:
        """Markdown: per metric mean ± std over repeats and the paired p against the baseline; then one
        compact table per group (mean ± std)."""
        labels = labels or {}
        summary = self.summary()
        heads = ["variant"] + [h for m in self.metrics for h in (labels.get(m, m), f"p {labels.get(m, m)}")]
        body = [[v.name] + [c for m in self.metrics for c in (_pm(summary[v.name][m]), _p(summary[v.name][m], v.name,
                                                                                           self.baseline))]
                for v in self.variants]
        parts = [(f"{self.repeats} × {self.folds}-fold CV (seeds 0..{self.repeats - 1}): mean ± std over repeats; "
                  f"p: paired sign-flip test over queries against {self.baseline!r}"),
                 format_table(heads, body, markdown=True)]
        for group, rows in self.groups.items():
            gs = self.summary(rows)
            parts.append(f"{group} ({len(rows)} queries)")
            parts.append(format_table(
                ["variant"] + [h for m in self.metrics for h in (labels.get(m, m), f"p {labels.get(m, m)}")],
                [[v.name] + [c for m in self.metrics for c in (_pm(gs[v.name][m]), _p(gs[v.name][m], v.name,
                                                                                      self.baseline))]
                 for v in self.variants], markdown=True))
        notes = [f"- {v.name}: {v.note}" for v in self.variants if v.note]
        return "\n\n".join(parts + (["\n".join(notes)] if notes else []))


def _pm(entry: Mapping[str, float]) -> str:
    return f"{entry['mean']:.4f} ± {entry['std']:.4f}"


def _p(entry: Mapping[str, float], name: str, baseline: str) -> str:
    return "–" if name == baseline else f"{entry['p']:.3f}"


def metric_names(metrics: Sequence) -> list[str]:
    return [m.name for m in metrics]
