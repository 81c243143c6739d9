"""`engine validate`: check a run before it is uploaded and list every problem with its line number (a
scorer that rejects a file, or silently scores a query 0, costs a submission slot). Tasks with a format of
their own check it with the same `Report`."""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.io.runs import parse_run
from engine.io.ids import read_id_list
from engine.io.problems import Problem, raise_first

if TYPE_CHECKING:
    from engine.eval.ntcir import NtcirCheck


@dataclass
class Report:
    """The outcome of one validation: problems (any makes the file invalid) and a one-line summary."""
    path: str
    kind: str
    problems: list[Problem] = field(default_factory=list)
    summary: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def raise_if_invalid(self, hint: str) -> None:
        """The first problem as one-line `EngineError` (with the count and `hint`, the command listing them all)."""
        raise_first(self.problems, hint)

    def text(self) -> str:
        """Every problem on its own line, then a verdict line."""
        if self.ok:
            return f"{self.path}: valid {self.kind} ({self.summary})"
        n = len(self.problems)
        return "\n".join([str(p) for p in self.problems]
                         + [f"{self.path}: INVALID {self.kind}: {n} problem{'s' if n != 1 else ''}"])


IdSource = str | os.PathLike | Iterable[str]
"""Ids to check against: a file (one per line, or a table with an id column) or the ids themselves."""


def _ids(source: IdSource, unique: bool = False) -> dict[str, int | None]:
    if isinstance(source, (str, os.PathLike)):
        return dict(read_id_list(source, unique=unique))
    return dict.fromkeys(map(str, source))


def missing_queries(queries_path: object, queries: dict[str, int | None], seen: set[str],
                    what: str) -> list[Problem]:
    return [Problem(str(queries_path), n, f"query {q!r} has no {what}") for q, n in queries.items()
            if q not in seen]


def sort_problems(report: Report, given: str) -> None:
    """File-level problems of the given file (e.g. the zip) first, then by line, then the queries file's."""
    def key(p: Problem) -> tuple[int, int]:
        rank = 1 if p.path == report.path else 0 if p.path == given else 2
        return rank, p.line or 0
    report.problems.sort(key=key)


def validate_run(path: str | os.PathLike, queries: IdSource | None = None,
                 docs: IdSource | None = None) -> Report:
    """Check a TREC run: format (6 fields, numeric finite score, integer rank, no blank line), no doc
    twice in a query, each query's lines together, and with `queries`/`docs` the ids against them."""
    parsed = parse_run(path)
    report = Report(str(path), "TREC run", list(parsed.problems))
    allowed_q = _ids(queries, unique=True) if queries is not None else None
    allowed_d = _ids(docs) if docs is not None else None
    block_start: dict[str, int] = {}
    reported_q: set[str] = set()
    prev_qid: str | None = None
    prev_score: float | None = None
    out_of_order: set[str] = set()
    for ln in parsed.lines:
        if not ln.rank.lstrip("-").isdigit():
            report.problems.append(Problem(report.path, ln.line, f"rank {ln.rank!r} is not an integer"))
        if ln.qid != prev_qid:
            if ln.qid in block_start:
                report.problems.append(Problem(report.path, ln.line, f"query {ln.qid!r} appears again: its lines "
                                               f"began on line {block_start[ln.qid]} and other queries came between"))
            block_start.setdefault(ln.qid, ln.line)
            prev_score = None
        if prev_score is not None and ln.score >= prev_score:
            out_of_order.add(ln.qid)
        prev_qid, prev_score = ln.qid, ln.score
        if allowed_q is not None and ln.qid not in allowed_q and ln.qid not in reported_q:
            reported_q.add(ln.qid)
            report.problems.append(Problem(report.path, ln.line, f"unknown query id {ln.qid!r}"))
        if allowed_d is not None and ln.docid not in allowed_d:
            report.problems.append(Problem(report.path, ln.line, f"unknown doc id {ln.docid!r}"))
    if allowed_q is not None:
        origin = queries if isinstance(queries, (str, os.PathLike)) else "queries"
        report.problems += missing_queries(origin, allowed_q, set(parsed.run), "line in the run")
    sort_problems(report, str(path))
    report.summary = f"{len(parsed.run)} queries, {len(parsed.lines)} lines"
    if out_of_order:
        report.summary += (f"; note: {len(out_of_order)} quer{'y has' if len(out_of_order) == 1 else 'ies have'} "
                           "tied or rising scores down the file, which trec_eval re-sorts by score then docid")
    return report


def validate_profile_run(path: str | os.PathLike, profile: str = "trec", queries: IdSource | None = None,
                         docs: IdSource | None = None) -> Report | NtcirCheck:
    """`engine validate run --profile`: the checker the benchmark's organizers run (both results have `ok`,
    `exit_code` and `text()`)."""
    from engine.eval.profiles import get_profile
    if get_profile(profile).checker != "ntcir":
        return validate_run(path, queries, docs)
    from engine.eval.ntcir import check_ntcir
    return check_ntcir(path, profile, list(_ids(queries, unique=True)) if queries is not None else None,
                       list(_ids(docs)) if docs is not None else None)


def check_written(path: str | os.PathLike, profile: str, queries: IdSource | None = None,
                  docs: IdSource | None = None) -> None:
    """What a task command calls on the run it just wrote: the benchmark's own checker, so a file the organizers
    would reject never leaves the command as a success. One line naming the first problem."""
    validate_profile_run(path, profile, queries, docs).raise_if_invalid(
        f"engine validate run {path} --profile {profile}")
