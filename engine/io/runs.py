"""TREC run files: `qid Q0 docid rank score runid`, the one writer every task command uses.

trec_eval ignores the rank column and re-sorts by score (ties by docid, descending), so the
writer makes scores strictly decreasing at the printed precision: the file means the order we chose.
The readers (`read_run`, `read_qrels`) collect every bad line as a `Problem`; evaluation raises the
first, `engine validate` lists them all.
"""
from __future__ import annotations

import importlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from engine.io.ranking import RankingLike, as_pairs
from engine.errors import EngineError
from engine.io.atomic import atomic_open
from engine.io.limits import limit
from engine.io.problems import Problem, raise_first
from engine.io.tables import read_text_lines

SCORE_DECIMALS = 6
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_STEP = 10.0 ** -SCORE_DECIMALS


def strictly_decreasing(scores: Iterable[float]) -> list[float]:
    """Round to the printed precision and nudge ties/inversions down one step, keeping the given order."""
    out: list[float] = []
    for s in scores:
        try:
            s = float(s)
        except (TypeError, ValueError):
            raise EngineError(f"score {s!r} is not a number; cannot write a run") from None
        if not math.isfinite(s):
            raise EngineError(f"a score is {s}; cannot write a run (scores must be finite numbers)")
        v = round(s, SCORE_DECIMALS)
        if out and v >= out[-1] - _STEP / 2:
            v = round(out[-1] - _STEP, SCORE_DECIMALS)
            if v >= out[-1]:  # beyond ~1e9 a double cannot hold 6 decimals
                raise EngineError(f"score {s} is too large to print strictly decreasing at {SCORE_DECIMALS} "
                                  "decimals; rescale the scores")
        out.append(v)
    return out


def format_run_lines(qid: str, ranking: RankingLike, run_id: str) -> list[str]:
    """Lines of one query's ranking, best first; a doc listed twice keeps its first (best) place."""
    seen: set[str] = set()
    docs: list[str] = []
    raw: list[float] = []
    for doc, score in as_pairs(ranking):
        if doc in seen:
            continue
        if not doc or any(c.isspace() for c in doc):
            raise EngineError(f"query {qid}: doc id {doc!r} is empty or has white space; TREC runs cannot hold it")
        seen.add(doc)
        docs.append(doc)
        raw.append(score)
    scores = strictly_decreasing(raw)
    return [f"{qid} Q0 {doc} {rank} {score:.{SCORE_DECIMALS}f} {run_id}"
            for rank, (doc, score) in enumerate(zip(docs, scores), 1)]


def write_run(path: str | os.PathLike, rankings: Mapping[str, RankingLike], run_id: str = "engine") -> int:
    """Write rankings (qid → [(docid, score)] best first) atomically; returns the number of lines."""
    if not run_id or any(c.isspace() for c in run_id):
        raise EngineError(f"run id {run_id!r} must be non-empty and have no white space")
    n = 0
    with atomic_open(path) as fh:
        for qid, ranking in rankings.items():
            if any(c.isspace() for c in str(qid)) or not str(qid):
                raise EngineError(f"query id {qid!r} is empty or has white space; TREC runs cannot hold it")
            for line in format_run_lines(str(qid), ranking, run_id):
                fh.write(line + "\n")
                n += 1
    return n


# ---------------------------------------------------------------- readers

Run = dict[str, dict[str, float]]
"""qid → {docid: score}; the order of a query's docs is recomputed from the scores, as trec_eval does."""
Qrels = dict[str, dict[str, int]]
"""qid → {docid: relevance grade}."""

RUN_FIELDS = 6
QRELS_FIELDS = 4


@dataclass(frozen=True)
class RunLine:
    line: int
    qid: str
    docid: str
    rank: str
    score: float


@dataclass
class ParsedRun:
    """A run file as read: what it says, line by line, and what is wrong with it."""
    path: str
    run: Run = field(default_factory=dict)
    lines: list[RunLine] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


@dataclass
class ParsedQrels:
    path: str
    qrels: Qrels = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def parse_grade(value: Any) -> int | None:
    """An integer relevance grade from a number or text (`2`, `2.0`, "2"), else None."""
    if isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return int(v) if math.isfinite(v) and v.is_integer() and abs(v) <= limit("max_grade") else None


def _finite(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _records(path: Path, width: int, layout: str, other: tuple[int, str],
             problems: list[Problem]) -> Iterator[tuple[int, list[str]]]:
    """(line, fields) of each line with `width` white-space separated fields; other lines become problems
    (a line as wide as the `other` format says which file it looks like)."""
    for n, text in enumerate(read_text_lines(path), 1):
        fields = text.split()
        if _CONTROL.search(text):
            problems.append(Problem(str(path), n, f"control character {_CONTROL.search(text).group()!r}; ids and "
                                                  "scores are printable text (trec_eval would cut the id there)"))
        elif not fields:
            problems.append(Problem(str(path), n, "blank line"))
        elif len(fields) != width:
            hint = f" (is this a {other[1]} file?)" if len(fields) == other[0] else ""
            problems.append(Problem(str(path), n, f"expected {width} fields `{layout}`, found {len(fields)}{hint}"))
        else:
            yield n, fields


def parse_run(path: str | os.PathLike) -> ParsedRun:
    """Read `qid Q0 docid rank score runid` lines, collecting every fault with its line number."""
    path = Path(path)
    out = ParsedRun(str(path))
    first_seen: dict[tuple[str, str], int] = {}
    for n, fields in _records(path, RUN_FIELDS, "qid Q0 docid rank score runid", (QRELS_FIELDS, "qrels"),
                              out.problems):
        qid, _, docid, rank, score_text, _ = fields
        score = _finite(score_text)
        if score is None or abs(score) > limit("max_score"):
            what = "not a number" if not _is_float(score_text) else "not a finite number" if score is None \
                else f"beyond ±{limit('max_score'):g} (max_score; set ENGINE_MAX_SCORE to raise it)"
            out.problems.append(Problem(out.path, n, f"score {score_text[:30]!r} is {what}"))
            continue
        key = (qid, docid)
        if key in first_seen:
            out.problems.append(Problem(out.path, n, f"duplicate doc {docid!r} in query {qid!r} "
                                                     f"(first on line {first_seen[key]})"))
            continue
        first_seen[key] = n
        out.run.setdefault(qid, {})[docid] = score
        out.lines.append(RunLine(n, qid, docid, rank, score))
    if not out.lines and not out.problems:
        out.problems.append(Problem(out.path, None, "empty run: no `qid Q0 docid rank score runid` lines"))
    return out


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def read_run(path: str | os.PathLike) -> Run:
    """The run in `path`; any bad line is an `EngineError` naming file and line."""
    parsed = parse_run(path)
    raise_first(parsed.problems, f"engine validate run {path}")
    return parsed.run


def parse_qrels(path: str | os.PathLike) -> ParsedQrels:
    """Read `qid iter docid rel` lines (rel an integer grade), collecting every fault with its line."""
    path = Path(path)
    out = ParsedQrels(str(path))
    first_seen: dict[tuple[str, str], int] = {}
    n_lines = 0
    for n, fields in _records(path, QRELS_FIELDS, "qid 0 docid rel", (RUN_FIELDS, "run"), out.problems):
        qid, _, docid, rel_text = fields
        rel = _finite(rel_text)
        if rel is None or not rel.is_integer():
            out.problems.append(Problem(out.path, n, f"relevance {rel_text[:30]!r} is not an integer"))
            continue
        if abs(rel) > limit("max_grade"):
            out.problems.append(Problem(out.path, n, f"relevance {rel_text[:30]} is beyond ±{limit('max_grade'):g} "
                                                     "(max_grade; set ENGINE_MAX_GRADE to raise it)"))
            continue
        key = (qid, docid)
        if key in first_seen:
            out.problems.append(Problem(out.path, n, f"doc {docid!r} judged twice for query {qid!r} "
                                                     f"(first on line {first_seen[key]})"))
            continue
        first_seen[key] = n
        out.qrels.setdefault(qid, {})[docid] = int(rel)
        n_lines += 1
    if not n_lines and not out.problems:
        out.problems.append(Problem(out.path, None, "empty qrels: no `qid 0 docid rel` lines"))
    return out


def read_qrels(path: str | os.PathLike) -> Qrels:
    """The judgments in `path`; any bad line is an `EngineError` naming file and line."""
    parsed = parse_qrels(path)
    raise_first(parsed.problems)
    return parsed.qrels


def write_qrels(path: str | os.PathLike, qrels: Mapping[str, Mapping[str, int]]) -> int:
    """Write `qid 0 docid rel` lines atomically, in the given order; returns the number of lines."""
    n = 0
    with atomic_open(path) as fh:
        for qid, judged in qrels.items():
            qid = str(qid)
            if not qid or any(c.isspace() for c in qid):
                raise EngineError(f"query id {qid!r} is empty or has white space; TREC qrels cannot hold it")
            for doc, rel in judged.items():
                doc = str(doc)
                if not doc or any(c.isspace() for c in doc):
                    raise EngineError(f"query {qid}: doc id {doc!r} is empty or has white space; "
                                      "TREC qrels cannot hold it")
                grade = _finite(str(rel))
                if grade is None or not grade.is_integer():
                    raise EngineError(f"query {qid}, doc {doc}: relevance {rel!r} is not an integer")
                fh.write(f"{qid} 0 {doc} {int(grade)}\n")
                n += 1
    return n


# ---------------------------------------------------------------- other run formats

_READERS: dict[str, tuple[str, str]] = {}


def register_run_reader(suffixes: Iterable[str], reader: str, what: str) -> None:
    """Let `load_run` read another task's run format: `reader` is "module:function" (imported on first use),
    returning a `Run`. Tasks register their own formats; evaluation never imports a task."""
    for suffix in suffixes:
        _READERS[suffix.lower()] = (reader, what)


def load_run(path: str | os.PathLike) -> Run:
    """A TREC run, or any registered run format (by file suffix), e.g. an EVENTA submission."""
    return _load(Path(path), _READERS, read_run)


_QRELS_READERS: dict[str, tuple[str, str]] = {}


def register_qrels_reader(suffixes: Iterable[str], reader: str, what: str) -> None:
    """Let `load_qrels` read another task's judgments (by file suffix), e.g. EVENTA's labeled CSV; `reader` is
    "module:function" (imported on first use) returning `Qrels`."""
    for suffix in suffixes:
        _QRELS_READERS[suffix.lower()] = (reader, what)


def load_qrels(path: str | os.PathLike) -> Qrels:
    """TREC qrels, or any registered judgments format (by file suffix)."""
    return _load(Path(path), _QRELS_READERS, read_qrels)


def _load(path: Path, readers: dict[str, tuple[str, str]], default: Callable[[Path], Any]) -> Any:
    """The reader registered for the file's suffix ("module:function", imported now), else `default`."""
    entry = readers.get(path.suffix.lower())
    if entry is None:
        return default(path)
    module, _, function = entry[0].partition(":")
    return getattr(importlib.import_module(module), function)(path)
