"""The NTCIR-19 ModelRetrieval checker: which submissions the organizers accept, and how they order them.

It differs from trec_eval on purpose (the organizers' submission and evaluation spec): a file holds up to
five RunIDs, each scored on its own; every required topic must list every candidate model (a gap rejects
the run instead of scoring 0); ties in Score are broken by line order, and the Rank column must agree with
that order. Messages are the spec's (`Line 12: expected 6 fields, found 5.`), listed first few plus a count.
"""
from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from engine.errors import EngineError, preview, where
from engine.io.runs import Qrels, Run, _finite
from engine.io.problems import Problem
from engine.io.tables import read_text_lines

MAX_RUN_IDS = 5
MAX_BYTES = 10 * 1024 * 1024
SHOWN_ERRORS = 10   # the spec lists "the first several" errors, then the total


@dataclass(frozen=True)
class NtcirRules:
    """One subtask's rules: B compares image ids without a trailing `.png` and model ids without left zeros;
    A's ground truth judges every candidate, so its qrels name them all."""
    subtask: str
    loose_ids: bool = False
    qrels_judge_all: bool = False

    def topic(self, text: str) -> str:
        return text[:-4] if self.loose_ids and text.lower().endswith(".png") else text

    def model(self, text: str) -> str:
        return str(int(text)) if self.loose_ids and text.isdigit() else text


RULES = {"ntcir-a": NtcirRules("A", qrels_judge_all=True), "ntcir-b": NtcirRules("B", loose_ids=True)}


@dataclass(frozen=True)
class NtcirError:
    """One rejection reason; `line` is where it was seen (None: the whole file). `at_line` errors print
    as the spec's `Line N: …`, run-level ones (a missing topic, a rank/score disagreement) as they are."""
    line: int | None
    message: str
    at_line: bool = True

    @property
    def spec(self) -> str:
        return f"Line {self.line}: {self.message}" if self.at_line and self.line is not None else self.message


@dataclass
class NtcirCheck:
    """A checked file: its errors (any rejects it) and, per RunID, the run in the order the spec scores."""
    path: str
    errors: list[NtcirError] = field(default_factory=list)
    runs: dict[str, Run] = field(default_factory=dict)
    n_lines: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def problems(self) -> list[Problem]:
        return [Problem(self.path, e.line, e.spec) for e in self.errors]

    def text(self, shown: int = SHOWN_ERRORS) -> str:
        """The spec's report: the first `shown` errors, then the total; or one line saying the file is valid."""
        if self.ok:
            return (f"{self.path}: valid NTCIR run ({len(self.runs)} RunID{'s' if len(self.runs) != 1 else ''}: "
                    f"{', '.join(self.runs)}; {self.n_lines} lines)")
        n = len(self.errors)
        out = [e.spec for e in self.errors[:shown]]
        if n > shown:
            out.append(f"… {n - shown} more")
        return "\n".join(out + [f"{self.path}: INVALID NTCIR run: {n} error{'s' if n != 1 else ''}"])

    def raise_if_invalid(self, hint: str) -> None:
        """One line for `engine eval` and task commands: the first error with its place, the count, the fix."""
        if self.ok:
            return
        first = self.errors[0]
        more = len(self.errors) - 1
        tail = f" (and {more} more error{'s' if more != 1 else ''}; `{hint}` lists them)" if more else ""
        raise EngineError(f"{where(self.path, first.line)}: run rejected: {first.message}{tail}")


@dataclass(frozen=True)
class _Line:
    line: int
    run_id: str
    topic: str
    model: str
    rank: int
    score: float


def check_ntcir(path: str | os.PathLike, profile: str, topics: Iterable[str] | None = None,
                models: Iterable[str] | None = None) -> NtcirCheck:
    """Check an NTCIR-19 ModelRetrieval run against `topics` (required, and the only ones known) and `models`
    (the candidates every topic must list); without them, the topics and models the file itself names."""
    rules = RULES[profile]
    path = Path(path)
    out = NtcirCheck(str(path))
    if path.is_file() and path.stat().st_size > MAX_BYTES:
        size = path.stat().st_size / 2**20
        out.errors.append(NtcirError(None, f"File is {size:.1f} MB; files over {MAX_BYTES // 2**20} MB are refused."))
        return out
    known_t = {rules.topic(t) for t in topics} if topics is not None else None
    known_m = {rules.model(m) for m in models} if models is not None else None
    lines: list[_Line] = []
    first: dict[tuple[str, str, str], int] = {}
    for n, text in enumerate(read_text_lines(path), 1):
        fields = text.split()
        if not fields:
            continue  # lines of only white space are ignored
        out.n_lines += 1
        if len(fields) != 6:
            out.errors.append(NtcirError(n, f"expected 6 fields, found {len(fields)}."))
            continue
        topic_text, q0, model_text, rank_text, score_text, run_id = fields
        bad = len(out.errors)
        if q0 != "Q0":
            out.errors.append(NtcirError(n, f"field 2 must be Q0, found {q0!r}."))
        if not (rank_text.isdigit() and int(rank_text) > 0):
            out.errors.append(NtcirError(n, f"Rank {rank_text!r} is not a positive integer."))
        score = _finite(score_text)  # the TREC reader's rule: finite floats only
        if score is None:
            out.errors.append(NtcirError(n, f"Score {score_text!r} is not numeric."))
        topic, model = rules.topic(topic_text), rules.model(model_text)
        if known_t is not None and topic not in known_t:
            out.errors.append(NtcirError(n, f"unknown topicID {topic_text!r}."))
        if known_m is not None and model not in known_m:
            out.errors.append(NtcirError(n, f"unknown model id {model_text!r}."))
        key = (run_id, topic, model)
        if key in first:
            out.errors.append(NtcirError(n, f"duplicate ({run_id}, {topic_text}, {model_text}); first on line "
                                            f"{first[key]}."))
        if len(out.errors) > bad:
            continue
        first[key] = n
        lines.append(_Line(n, run_id, topic, model, int(rank_text), score))  # type: ignore[arg-type]
    if not out.n_lines:
        out.errors.append(NtcirError(None, "File has no run lines."))
        return out
    by_run: dict[str, dict[str, list[_Line]]] = {}
    for ln in lines:
        by_run.setdefault(ln.run_id, {}).setdefault(ln.topic, []).append(ln)
    if len(by_run) > MAX_RUN_IDS:
        out.errors.append(NtcirError(None, f"File has {len(by_run)} RunIDs ({preview(list(by_run), 8)}); at most "
                                           f"{MAX_RUN_IDS} are allowed."))
    for run_id, per_topic in by_run.items():
        out.runs[run_id] = _check_run(run_id, per_topic, known_t, known_m, out.errors)
    out.errors.sort(key=lambda e: (e.line is None, e.line or 0))
    return out


def _check_run(run_id: str, per_topic: Mapping[str, list[_Line]], known_t: Collection[str] | None,
               known_m: Collection[str] | None, errors: list[NtcirError]) -> Run:
    """One RunID: every topic present with every candidate, ranks agreeing with scores (ties by line order);
    returns {topic: {model: score}} with distinct scores in that order, so any scorer sees the spec's order."""
    all_models = set(known_m) if known_m is not None else {ln.model for ls in per_topic.values() for ln in ls}
    for topic in sorted(set(known_t or ()) - set(per_topic), key=_natural):
        errors.append(NtcirError(None, f"{run_id} topicID {topic} is missing.", at_line=False))
    run: Run = {}
    for topic, lines in per_topic.items():
        absent = sorted(all_models - {ln.model for ln in lines}, key=_natural)
        if absent:
            errors.append(NtcirError(lines[0].line, f"{run_id} topicID {topic} lacks {len(absent)} candidate "
                                                    f"model{'s' if len(absent) != 1 else ''}: {preview(absent)}.",
                                     at_line=False))
        order = sorted(lines, key=lambda ln: (-ln.score, ln.line))  # the spec: ties by line order
        if any(b.rank < a.rank for a, b in pairwise(order)):
            errors.append(NtcirError(lines[0].line, f"{run_id} topicID {topic} rank order does not match score "
                                                    "order.", at_line=False))
        run[topic] = {ln.model: float(len(order) - i) for i, ln in enumerate(order)}
    return run


def _natural(text: str) -> tuple[int, int | str]:
    return (0, int(text)) if text.isdigit() else (1, text)


def normalize_qrels(qrels: Qrels, profile: str) -> Qrels:
    """Qrels under the subtask's id rules (B: `x.png` = `x`, `0001` = `1`), so they match the checked run."""
    rules = RULES[profile]
    return {rules.topic(q): {rules.model(d): g for d, g in judged.items()} for q, judged in qrels.items()}
