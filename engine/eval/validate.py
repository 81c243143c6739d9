"""`engine validate`: check a run before it is uploaded and list every problem with its line number (a
scorer that rejects a file, or silently scores a query 0, costs a submission slot). Tasks with a format of
their own check it with the same `Report`."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from engine.eval.runs import parse_run
from engine.io.ids import read_id_list
from engine.io.problems import Problem


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

    def text(self) -> str:
        """Every problem on its own line, then a verdict line."""
        if self.ok:
            return f"{self.path}: valid {self.kind} ({self.summary})"
        n = len(self.problems)
        return "\n".join([str(p) for p in self.problems]
                         + [f"{self.path}: INVALID {self.kind}: {n} problem{'s' if n != 1 else ''}"])


def missing_queries(queries_path: str | os.PathLike, queries: dict[str, int], seen: set[str],
                     what: str) -> list[Problem]:
    return [Problem(str(queries_path), n, f"query {q!r} has no {what}") for q, n in queries.items()
            if q not in seen]


def sort_problems(report: Report, given: str) -> None:
    """File-level problems of the given file (e.g. the zip) first, then by line, then the queries file's."""
    def key(p: Problem) -> tuple[int, int]:
        rank = 1 if p.path == report.path else 0 if p.path == given else 2
        return rank, p.line or 0
    report.problems.sort(key=key)


def validate_run(path: str | os.PathLike, queries: str | os.PathLike | None = None,
                 docs: str | os.PathLike | None = None) -> Report:
    """Check a TREC run: format (6 fields, numeric finite score, integer rank, no blank line), no doc
    twice in a query, each query's lines together, and with `queries`/`docs` the ids against them."""
    parsed = parse_run(path)
    report = Report(str(path), "TREC run", list(parsed.problems))
    allowed_q = read_id_list(queries, unique=True) if queries is not None else None
    allowed_d = read_id_list(docs) if docs is not None else None
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
        report.problems += missing_queries(queries, allowed_q, set(parsed.run), "line in the run")  # type: ignore[arg-type]
    sort_problems(report, str(path))
    report.summary = f"{len(parsed.run)} queries, {len(parsed.lines)} lines"
    if out_of_order:
        report.summary += (f"; note: {len(out_of_order)} quer{'y has' if len(out_of_order) == 1 else 'ies have'} "
                           "tied or rising scores down the file, which trec_eval re-sorts by score then docid")
    return report
