"""TREC run/qrels files: the writer's file means exactly the order it was given, the readers round-trip."""
from __future__ import annotations

import pytest

from engine.errors import EngineError
from engine.eval.metrics import trec_order
from engine.io.runs import parse_run, read_qrels, read_run, write_qrels, write_run


def test_written_run_reads_back_in_the_given_order_despite_ties(tmp_path):
    given = [("a", 0.5), ("z", 0.5), ("m", 0.5000000001), ("b", 0.4999999), ("a", 0.1), ("c", -3.0)]
    path = tmp_path / "r.run"
    n = write_run(path, {"q1": given, "q2": [("x", 1.0)]}, "sys")
    assert n == 6  # the repeated "a" kept its first place only
    lines = path.read_text().splitlines()
    assert lines[0] == "q1 Q0 a 1 0.500000 sys"
    scores = [float(ln.split()[4]) for ln in lines[:5]]
    assert all(s1 > s2 for s1, s2 in zip(scores, scores[1:]))  # strictly decreasing as printed
    run = read_run(path)
    assert trec_order(run["q1"]) == ["a", "z", "m", "b", "c"]  # trec_eval sees our order, not docid tie-breaks
    assert [ln.rank for ln in parse_run(path).lines] == ["1", "2", "3", "4", "5", "1"]


@pytest.mark.parametrize("score,message", [
    (float("inf"), "a score is inf"), (float("nan"), "a score is nan"), ("high", "score 'high' is not a number"),
])
def test_write_run_rejects_non_finite_scores(tmp_path, score, message):
    with pytest.raises(EngineError, match=message):
        write_run(tmp_path / "r.run", {"q": [("a", 1.0), ("b", score)]}, "sys")
    assert not (tmp_path / "r.run").exists()  # nothing half-written


def test_write_run_refuses_scores_too_large_for_six_decimals(tmp_path):
    with pytest.raises(EngineError, match="too large"):
        write_run(tmp_path / "r.run", {"q": [("a", 1e12), ("b", 1e12)]}, "sys")


def test_qrels_round_trip_and_bad_grades(tmp_path):
    path = tmp_path / "q.txt"
    assert write_qrels(path, {"1": {"a": 2, "b": 0}, "2": {"c": -1}}) == 3
    assert path.read_text() == "1 0 a 2\n1 0 b 0\n2 0 c -1\n"
    assert read_qrels(path) == {"1": {"a": 2, "b": 0}, "2": {"c": -1}}
    with pytest.raises(EngineError, match="relevance 0.5 is not an integer"):
        write_qrels(path, {"1": {"a": 0.5}})
    with pytest.raises(EngineError, match="white space"):
        write_qrels(path, {"1": {"a b": 1}})


def test_reader_accepts_crlf_and_tabs_and_integral_float_grades(tmp_path):
    run = tmp_path / "r.txt"
    run.write_bytes(b"1\tQ0\ta\t1\t2\tx\r\n1 Q0 b 2 1e-3 x\r\n")
    assert read_run(run) == {"1": {"a": 2.0, "b": 0.001}}
    qrels = tmp_path / "q.txt"
    qrels.write_text("1 0 a 1.0\n")
    assert read_qrels(qrels) == {"1": {"a": 1}}


def test_reader_rejects_non_utf8(tmp_path):
    run = tmp_path / "r.txt"
    run.write_bytes(b"1 Q0 \xff 1 2 x\n")
    with pytest.raises(EngineError, match="not UTF-8"):
        read_run(run)
