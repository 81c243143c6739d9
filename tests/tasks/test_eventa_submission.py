"""EVENTA Track 2 submission files: the CSV the scorer expects, the zip around it, reading both back,
`engine validate eventa` (every problem with its line) and `engine convert eventa-submission`."""
from __future__ import annotations

import zipfile

import pytest

from engine.errors import EngineError
from engine.eval.evaluate import evaluate_files
from engine.tasks.eventa.submission import (header, parse_eventa_submission, read_eventa_submission, slot_scores,
                                            validate_eventa, write_eventa_csv, write_eventa_submission)

TEMPLATE_HEADER = "query_id," + ",".join(f"article_id_{i}" for i in range(1, 11))


def test_csv_has_template_header_eleven_columns_and_hash_slots(tmp_path):
    rankings = {
        "q2": [f"img{i}" for i in range(15)],              # more than 10: cut at 10
        "q1": [("b", 0.9), ("a", 0.8), ("b", 0.1)],        # (id, score) pairs; a repeat keeps its first place
        "q3": {"x": 0.1, "y": 0.7},                        # {id: score}: best first
    }
    path = tmp_path / "submission.csv"
    assert write_eventa_csv(path, rankings, query_ids=["q1", "q2", "q3", "q4"]) == 4
    raw = path.read_bytes()
    assert b"\r" not in raw and raw.endswith(b"\n") and b"\n\n" not in raw
    lines = raw.decode().splitlines()
    assert lines[0] == TEMPLATE_HEADER
    assert lines[1] == "q1,b,a," + ",".join(["#"] * 8)
    assert lines[2] == "q2," + ",".join(f"img{i}" for i in range(10))
    assert lines[3] == "q3,y,x," + ",".join(["#"] * 8)
    assert lines[4] == "q4," + ",".join(["#"] * 10)  # listed query without a ranking still gets its row
    assert all(len(ln.split(",")) == 11 for ln in lines)


def test_zip_holds_only_submission_csv_at_root(tmp_path):
    csv_path, zip_path = write_eventa_submission(tmp_path / "out", {"q1": ["a", "b"]})
    assert csv_path.name == "submission.csv" and zip_path.name == "submission.zip"
    with zipfile.ZipFile(zip_path) as zf:
        assert zf.namelist() == ["submission.csv"]
        assert zf.read("submission.csv") == csv_path.read_bytes()
    assert read_eventa_submission(zip_path) == {"q1": ["a", "b"]}


@pytest.mark.parametrize("rankings,query_ids,message", [
    ({"q1": ["a,b"]}, None, "cannot go in the EVENTA CSV"),
    ({"q1": ["#"]}, None, "cannot go in the EVENTA CSV"),
    ({"q1": ["a"], "q9": ["b"]}, ["q1"], "not in the query list"),
    ({"q1": ["a"]}, ["q1", "q1"], "listed twice"),
    ({}, None, "no queries"),
])
def test_writer_refuses_what_the_scorer_would_misread(tmp_path, rankings, query_ids, message):
    with pytest.raises(EngineError, match=message):
        write_eventa_csv(tmp_path / "s.csv", rankings, query_ids)
    assert not (tmp_path / "s.csv").exists()


def test_reader_accepts_image_id_header_too(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(",".join(header("image_id")) + "\nq1,a,b,#,#,#,#,#,#,#,#\n")
    assert read_eventa_submission(path) == {"q1": ["a", "b"]}


def test_reader_names_file_and_line(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(TEMPLATE_HEADER + "\nq1,a,#,#,#,#,#,#,#,#,#\nq1,b,#,#,#,#,#,#,#,#,#\n")
    with pytest.raises(EngineError, match=r"s.csv:3: duplicate query id 'q1' \(first on line 2\)"):
        read_eventa_submission(path)
    path.write_text("query_id,img1\nq1,a\n")
    parsed = parse_eventa_submission(path)
    assert [(p.line, p.message.split(" ")[0]) for p in parsed.problems] == [(1, "header"), (2, "expected")]


def test_submission_evaluates_as_a_run(tmp_path):
    csv_path, _ = write_eventa_submission(tmp_path, {"c1": ["x", "A"], "c2": ["B"]}, ["c1", "c2", "c3"])
    qrels = tmp_path / "gt.txt"
    qrels.write_text("c1 0 A 1\nc2 0 B 1\nc3 0 C 1\n")
    ev = evaluate_files(csv_path, qrels, "eventa,mrr")
    # c3's row is ten '#': submitted, so a valid query that scores 0 (the scorer sees its row)
    assert ev.means["eventa.mrr"] == 0.5 and ev.means["eventa.r@1"] == pytest.approx(1 / 3)
    assert ev.means["eventa.coverage"] == 1.0
    assert ev.means["mrr"] == 0.5
    csv_path.write_text(csv_path.read_text().rsplit("c3", 1)[0])  # drop c3's row: now it is missing
    ev = evaluate_files(csv_path, qrels, "eventa")
    assert ev.means["eventa.mrr"] == 0.75 and ev.means["eventa.coverage"] == pytest.approx(2 / 3)


def test_slot_scores_keep_the_order():
    assert slot_scores(["b", "a", "c"]) == {"b": 3.0, "a": 2.0, "c": 1.0}


# ---------------------------------------------------------------- engine validate eventa

def test_valid_eventa_submission(run_cli, monkeypatch, capsys, tmp_path, ids):
    csv_path, zip_path = write_eventa_submission(tmp_path, {"q1": ["d1", "d2"], "q2": ["d3"], "q3": ["d2"]})
    for path in (csv_path, zip_path):
        code, out, _ = run_cli("validate", "eventa", path, "--queries", ids[0], "--docs", ids[1])
        assert code == 0
        assert len(out.strip().splitlines()) == 1 and "valid EVENTA submission (3 queries, 26 empty slots)" in out


def test_eventa_problems_each_with_its_line(run_cli, monkeypatch, capsys, tmp_path, ids):
    sub = tmp_path / "submission.csv"
    sub.write_text("\n".join([
        TEMPLATE_HEADER,
        "q1,d1,d2,#,#,#,#,#,#,#,#",     # 2 ok
        "q1,d1,#,#,#,#,#,#,#,#,#",      # 3 duplicate query id
        "",                             # 4 blank line
        "q2,d1,d2,#,#,#,#,#,#,#",       # 5 ten columns
        "q8,d1,#,#,#,#,#,#,#,#,#",      # 6 unknown query
        "q3,d1,zz,#,#,#,#,#,#,#,#",     # 7 unknown image
        "q4,d1,d1,,#,#,#,#,#,#,#",      # 8 image twice, empty slot (a broken row is not checked further)
    ]) + "\n")
    code, out, _ = run_cli("validate", "eventa", sub, "--queries", ids[0], "--docs", ids[1])
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
    assert str(validate_eventa(sub).problems[0]).startswith(f"{sub}:1: header must be `{TEMPLATE_HEADER}`")
    sub.write_text("")
    assert "empty file" in validate_eventa(sub).text()


# ---------------------------------------------------------------- engine convert eventa-submission

def test_cli_convert_run_to_eventa_submission(run_cli, monkeypatch, capsys, tmp_path):
    run = tmp_path / "r.run"
    run.write_text("c2 Q0 i9 1 3.0 s\nc2 Q0 i1 2 3.0 s\nc1 Q0 i4 1 1.0 s\n")
    queries = tmp_path / "queries.csv"
    queries.write_text("query_id,caption\nc1,a dog\nc2,a cat\nc3,a bird\n")
    code, _, _ = run_cli("convert", "eventa-submission", run, tmp_path / "out",
                         "--queries", queries)
    assert code == 0
    assert read_eventa_submission(tmp_path / "out" / "submission.zip") == {"c1": ["i4"], "c2": ["i9", "i1"],
                                                                          "c3": []}
