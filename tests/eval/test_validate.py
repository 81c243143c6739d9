"""`engine validate run`: every problem with its line number, a non-zero exit, one line when valid."""
from __future__ import annotations

import pytest

from engine.errors import EngineError
from engine.eval.validate import validate_run
from engine.io.ids import read_id_list


def test_valid_run_says_so_in_one_line(run_cli, monkeypatch, capsys, tmp_path, ids):
    run = tmp_path / "good.run"
    run.write_text("q1 Q0 d1 1 2.0 s\nq1 Q0 d2 2 1.0 s\nq2 Q0 d3 1 0.5 s\nq3 Q0 d1 1 0.1 s\n")
    code, out, _ = run_cli("validate", "run", run, "--queries", ids[0], "--docs", ids[1])
    assert code == 0
    assert out.strip().splitlines() == [f"{run}: valid TREC run (3 queries, 4 lines)"]


def test_run_problems_each_with_its_line(run_cli, monkeypatch, capsys, tmp_path, ids):
    run = tmp_path / "bad.run"
    run.write_text("\n".join([
        "q1 Q0 d1 1 2.0 s",      # 1 ok
        "q1 Q0 d2 2 abc s",      # 2 non-numeric score
        "",                      # 3 blank line
        "q1 Q0 d1 3 0.5 s",      # 4 duplicate doc in a query
        "q9 Q0 d2 1 1.0 s",      # 5 unknown query
        "q2 Q0 d7 1 1.0 s",      # 6 unknown doc
        "q2 Q0 d3 1.5 0.5 s",    # 7 rank not an integer
        "q2 Q0 d1 3 0.4",        # 8 wrong column count
        "q1 Q0 d3 4 0.1 s",      # 9 q1 again after other queries
    ]) + "\n")
    code, out, _ = run_cli("validate", "run", run, "--queries", ids[0], "--docs", ids[1])
    assert code == 1
    lines = out.strip().splitlines()
    assert lines == [
        f"{run}:2: score 'abc' is not a number",
        f"{run}:3: blank line",
        f"{run}:4: duplicate doc 'd1' in query 'q1' (first on line 1)",
        f"{run}:5: unknown query id 'q9'",
        f"{run}:6: unknown doc id 'd7'",
        f"{run}:7: rank '1.5' is not an integer",
        f"{run}:8: expected 6 fields `qid Q0 docid rank score runid`, found 5",
        f"{run}:9: query 'q1' appears again: its lines began on line 1 and other queries came between",
        f"{ids[0]}:3: query 'q3' has no line in the run",
        f"{run}: INVALID TREC run: 9 problems",
    ]


def test_run_with_ties_is_valid_with_a_note(tmp_path):
    run = tmp_path / "ties.run"
    run.write_text("q1 Q0 a 1 1.0 s\nq1 Q0 b 2 1.0 s\n")
    report = validate_run(run)
    assert report.ok and "1 query has tied or rising scores" in report.text()


def test_empty_run_is_invalid(tmp_path):
    run = tmp_path / "empty.run"
    run.write_text("")
    report = validate_run(run)
    assert not report.ok and report.text().splitlines()[0] == f"{run}: empty run: no `qid Q0 docid rank score " \
                                                               "runid` lines"


def test_id_lists_from_text_and_tables(tmp_path):
    txt = tmp_path / "ids.txt"
    txt.write_text("id\na\n\nb extra\n")
    assert read_id_list(txt) == {"a": 2, "b": 4}
    csv_file = tmp_path / "images.csv"
    csv_file.write_text("image_id,url\nx,http://x\ny,http://y\n")
    assert list(read_id_list(csv_file)) == ["x", "y"]
    dup = tmp_path / "q.tsv"
    dup.write_text("q1\tone\nq1\tagain\n")
    with pytest.raises(EngineError, match=r"q.tsv:2: duplicate id 'q1' \(first on line 1\)"):
        read_id_list(dup, unique=True)


def test_missing_file_is_one_line_error(run_cli, monkeypatch, capsys, tmp_path):
    code, out, err = run_cli("validate", "run", tmp_path / "nope.run")
    assert code == 2 and "nope.run: no such file" in err and "Traceback" not in err
