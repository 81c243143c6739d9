"""`engine validate run|eventa`: every problem with its line number, a non-zero exit, one line when valid."""
from __future__ import annotations

import zipfile

import pytest

from engine.errors import EngineError
from engine.tasks.eventa.submission import write_eventa_submission
from engine.eval.validate import validate_run
from engine.io.ids import read_id_list
from engine.tasks.eventa.submission import validate_eventa
from conftest import run_cli

HEADER = "query_id," + ",".join(f"article_id_{i}" for i in range(1, 11))


@pytest.fixture()
def ids(tmp_path):
    queries = tmp_path / "queries.tsv"
    queries.write_text("q1\tfirst query\nq2\tsecond query\nq3\tthird query\n")
    docs = tmp_path / "docs.txt"
    docs.write_text("doc_id\nd1\nd2\nd3\n")
    return queries, docs


def test_valid_run_says_so_in_one_line(monkeypatch, capsys, tmp_path, ids):
    run = tmp_path / "good.run"
    run.write_text("q1 Q0 d1 1 2.0 s\nq1 Q0 d2 2 1.0 s\nq2 Q0 d3 1 0.5 s\nq3 Q0 d1 1 0.1 s\n")
    code, out, _ = run_cli(monkeypatch, capsys, "validate", "run", run, "--queries", ids[0], "--docs", ids[1])
    assert code == 0
    assert out.strip().splitlines() == [f"{run}: valid TREC run (3 queries, 4 lines)"]


def test_run_problems_each_with_its_line(monkeypatch, capsys, tmp_path, ids):
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
    code, out, _ = run_cli(monkeypatch, capsys, "validate", "run", run, "--queries", ids[0], "--docs", ids[1])
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


def test_valid_eventa_submission(monkeypatch, capsys, tmp_path, ids):
    csv_path, zip_path = write_eventa_submission(tmp_path, {"q1": ["d1", "d2"], "q2": ["d3"], "q3": ["d2"]})
    for path in (csv_path, zip_path):
        code, out, _ = run_cli(monkeypatch, capsys, "validate", "eventa", path, "--queries", ids[0], "--docs", ids[1])
        assert code == 0
        assert len(out.strip().splitlines()) == 1 and "valid EVENTA submission (3 queries, 26 empty slots)" in out


def test_eventa_problems_each_with_its_line(monkeypatch, capsys, tmp_path, ids):
    sub = tmp_path / "submission.csv"
    sub.write_text("\n".join([
        HEADER,
        "q1,d1,d2,#,#,#,#,#,#,#,#",     # 2 ok
        "q1,d1,#,#,#,#,#,#,#,#,#",      # 3 duplicate query id
        "",                             # 4 blank line
        "q2,d1,d2,#,#,#,#,#,#,#",       # 5 ten columns
        "q8,d1,#,#,#,#,#,#,#,#,#",      # 6 unknown query
        "q3,d1,zz,#,#,#,#,#,#,#,#",     # 7 unknown image
        "q4,d1,d1,,#,#,#,#,#,#,#",      # 8 image twice, empty slot (a broken row is not checked further)
    ]) + "\n")
    code, out, _ = run_cli(monkeypatch, capsys, "validate", "eventa", sub, "--queries", ids[0], "--docs", ids[1])
    assert code == 1
    assert out.strip().splitlines() == [
        f"{sub}:3: duplicate query id 'q1' (first on line 2)",
        f"{sub}:4: blank line",
        f"{sub}:5: expected 11 columns (query id + 10 images), found 10",
        f"{sub}:6: unknown query id 'q8'",
        f"{sub}:7: slot 2: unknown image id 'zz'",
        f"{sub}:8: image 'd1' is listed twice for query 'q4'",
        f"{sub}:8: slot 3 is empty; write '#' for a missing image",
        f"{ids[0]}:2: query 'q2' has no row in the submission",
        f"{sub}: INVALID EVENTA submission: 8 problems",
    ]


def test_eventa_zip_must_hold_only_submission_csv(tmp_path):
    csv_path, _ = write_eventa_submission(tmp_path, {"q1": ["d1"]})
    bad_zip = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad_zip, "w") as zf:
        zf.write(csv_path, "folder/submission.csv")
        zf.writestr("notes.txt", "hi")
    report = validate_eventa(bad_zip)
    assert not report.ok
    assert str(report.problems[0]) == (f"{bad_zip}: the zip must hold only submission.csv at its root; "
                                       "it holds folder/submission.csv, notes.txt")


def test_eventa_wrong_header_and_empty_file(tmp_path):
    sub = tmp_path / "s.csv"
    sub.write_text("id,a,b\n")
    assert str(validate_eventa(sub).problems[0]).startswith(f"{sub}:1: header must be `{HEADER}`")
    sub.write_text("")
    assert "empty file" in validate_eventa(sub).text()


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


def test_missing_file_is_one_line_error(monkeypatch, capsys, tmp_path):
    code, out, err = run_cli(monkeypatch, capsys, "validate", "run", tmp_path / "nope.run")
    assert code == 2 and "nope.run: no such file" in err and "Traceback" not in err
