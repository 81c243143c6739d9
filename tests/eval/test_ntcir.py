"""The NTCIR-19 ModelRetrieval checker and scorer, rule by rule, on hand-made files with numbers worked out by
hand: RunIDs scored apart (at most 5), missing topics/candidates reject, ties by line order, rank vs score,
field checks with the spec's messages, the 10 MB limit, Subtask B's id rules, nDCG@k with gain 2^rel − 1."""
from __future__ import annotations

import json
import math

import pytest

from engine.errors import EngineError
from engine.eval.evaluate import evaluate_profile_files
from engine.eval.ntcir import MAX_BYTES, check_ntcir
from engine.eval.validate import check_written

TOPICS, MODELS = ["1", "2"], ["1", "2", "3"]
QRELS = "1 0 1 3\n1 0 2 1\n1 0 3 0\n2 0 1 0\n2 0 2 2\n2 0 3 1\n"

# Run01, topic 2: m1 and m2 tie at 0.8; line order puts m1 (grade 0) first. trec_eval (ties by docid,
# descending) would put m2 first, so the two rules give different numbers.
# Run02, topic 1: m1 and m2 tie at 0.5 with ranks 2 and 2 (a duplicate rank is allowed).
GOOD = """\
1 Q0 1 1 0.9 Run01
1 Q0 2 2 0.5 Run01
1 Q0 3 3 0.1 Run01
2 Q0 1 1 0.8 Run01
2 Q0 2 2 0.8 Run01
2 Q0 3 3 0.2 Run01
   \t
1 Q0 3 1 1.0 Run02
1 Q0 1 2 0.5 Run02
1 Q0 2 2 0.5 Run02
2 Q0 2 1 0.9 Run02
2 Q0 3 2 0.5 Run02
2 Q0 1 3 0.1 Run02
"""

L3 = math.log2(3)  # the discount of rank 2; rank 3's is log2(4) = 2


@pytest.fixture()
def files(tmp_path):
    qrels = tmp_path / "a.qrels"
    qrels.write_text(QRELS)
    run = tmp_path / "a.run"
    run.write_text(GOOD)
    return run, qrels


def _errors(tmp_path, text: str, profile: str = "ntcir-a", topics=TOPICS, models=MODELS) -> list[str]:
    path = tmp_path / "r.run"
    path.write_text(text)
    return [e.spec for e in check_ntcir(path, profile, topics, models).errors]


def _full(run_id: str, topics=TOPICS, models=MODELS) -> str:
    """A valid block: every topic lists every model, scores falling with the rank."""
    return "".join(f"{t} Q0 {m} {r} {1.0 / r} {run_id}\n" for t in topics for r, m in enumerate(models, 1))


def test_good_file_scores_each_runid_apart_with_ties_by_line_order(files):
    run, qrels = files
    evs = evaluate_profile_files(run, qrels, "ntcir-a")
    assert list(evs) == ["Run01", "Run02"]
    r1, r2 = evs["Run01"].per_query, evs["Run02"].per_query
    # Run01 topic 1: grades 3,1,0 in order → ideal → 1.0 at every cutoff
    assert r1["1"]["ndcg_exp@1"] == 1.0 and r1["1"]["ndcg_exp@3"] == pytest.approx(1.0)
    # Run01 topic 2: grades 0,2,1 (gains 0,3,1); ideal gains 3,1,0
    assert r1["2"]["ndcg_exp@1"] == 0.0
    assert r1["2"]["ndcg_exp@3"] == pytest.approx((3 / L3 + 1 / 2) / (3 + 1 / L3))  # 0.6590
    # Run02 topic 1: grades 0,3,1 (gains 0,7,1); ideal gains 7,1,0
    assert r2["1"]["ndcg_exp@1"] == 0.0
    assert r2["1"]["ndcg_exp@3"] == pytest.approx((7 / L3 + 1 / 2) / (7 + 1 / L3))  # 0.6542
    assert r2["2"]["ndcg_exp@3"] == pytest.approx(1.0)
    assert evs["Run01"].means["ndcg_exp@1"] == 0.5
    assert evs["Run01"].means["ndcg_exp@3"] == pytest.approx((1 + (3 / L3 + 1 / 2) / (3 + 1 / L3)) / 2)
    assert evs["Run02"].means["ndcg_exp@5"] == pytest.approx(((7 / L3 + 1 / 2) / (7 + 1 / L3) + 1) / 2)


def test_eval_cli_prints_one_row_per_runid_and_per_tier(run_cli, monkeypatch, capsys, files, tmp_path):
    run, qrels = files
    groups = tmp_path / "tiers.tsv"
    groups.write_text("1\thigh\n2\tlow\n")
    code, out, _ = run_cli("eval", run, qrels, "--profile", "ntcir-a", "--groups", groups)
    assert code == 0
    rows = [line.split() for line in out.strip().splitlines()]
    assert rows[0] == ["run", "queries", "n", "ndcg_exp@1", "ndcg_exp@3", "ndcg_exp@5"]
    assert [r[:3] for r in rows[1:]] == [["Run01", "all", "2"], ["Run01", "high", "1"], ["Run01", "low", "1"],
                                         ["Run02", "all", "2"], ["Run02", "high", "1"], ["Run02", "low", "1"]]
    assert rows[3][3:5] == ["0.0000", f"{(3 / L3 + 1 / 2) / (3 + 1 / L3):.4f}"]
    code, out, _ = run_cli("eval", run, qrels, "--profile", "ntcir-a", "--json")
    assert code == 0 and json.loads(out)["Run02"]["ndcg_exp@1"] == 0.5


def test_valid_file_and_validate_cli(run_cli, monkeypatch, capsys, files, tmp_path):
    run, _ = files
    topics, models = tmp_path / "topics.txt", tmp_path / "models.csv"
    topics.write_text("1\n2\n")
    models.write_text("model_id,model_name\n1,a\n2,b\n3,c\n")
    code, out, _ = run_cli("validate", "run", run, "--profile", "ntcir-a",
                           "--queries", topics, "--docs", models)
    assert code == 0 and out.strip() == f"{run}: valid NTCIR run (2 RunIDs: Run01, Run02; 12 lines)"


def test_more_than_five_runids_is_an_error(tmp_path):
    five = "".join(_full(f"R{i}") for i in range(1, 6))
    assert _errors(tmp_path, five) == []
    message = "File has 6 RunIDs (R1, R2, R3, R4, R5, R6); at most 5 are allowed."
    assert _errors(tmp_path, five + _full("R6")) == [message]


def test_missing_topic_or_candidate_rejects_the_run(tmp_path):
    only_topic_1 = _full("Run01", topics=["1"])
    assert _errors(tmp_path, only_topic_1) == ["Run01 topicID 2 is missing."]
    lacks = "".join(line + "\n" for line in _full("Run01").splitlines() if not line.startswith("1 Q0 3 "))
    assert _errors(tmp_path, lacks) == ["Run01 topicID 1 lacks 1 candidate model: 3."]


def test_a_triple_may_appear_once(tmp_path):
    text = _full("Run01") + "1 Q0 2 4 0.01 Run01\n"
    assert _errors(tmp_path, text) == ["Line 7: duplicate (Run01, 1, 2); first on line 2."]
    # the same topic and model under another RunID is another run, not a duplicate
    assert _errors(tmp_path, _full("Run01") + _full("Run02")) == []


def test_rank_column_must_follow_score_order_ties_by_line_order(tmp_path):
    topics = ["5"]
    ok = "5 Q0 1 1 0.9 Run03\n5 Q0 2 2 0.7 Run03\n5 Q0 3 2 0.7 Run03\n"   # tie, equal ranks: fine
    assert _errors(tmp_path, ok, topics=topics) == []
    swapped = "5 Q0 1 2 0.7 Run03\n5 Q0 2 1 0.7 Run03\n5 Q0 3 3 0.1 Run03\n"  # tie, but rank says line 2 first
    assert _errors(tmp_path, swapped, topics=topics) == ["Run03 topicID 5 rank order does not match score order."]
    inverted = "5 Q0 1 1 0.1 Run03\n5 Q0 2 2 0.9 Run03\n5 Q0 3 3 0.05 Run03\n"
    assert _errors(tmp_path, inverted, topics=topics) == ["Run03 topicID 5 rank order does not match score order."]


def test_field_checks_each_with_the_spec_message(tmp_path):
    lines = _full("Run01").splitlines()   # 6 good lines
    bad = [
        "1 Q0 1 1 0.9",                 # 7: five fields
        "1 q0 1 1 0.9 Run02",           # 8: field 2 not Q0
        "1 Q0 1 0 0.9 Run03",           # 9: rank 0
        "1 Q0 1 1.5 0.9 Run03",         # 10: rank not an integer
        "1 Q0 1 1 high Run03",          # 11: score not numeric
        "1 Q0 1 1 0.9 Run01 extra",     # 12: seven fields
        "9 Q0 1 1 0.9 Run03",           # 13: unknown topic
        "1 Q0 42 1 0.9 Run03",          # 14: unknown model
        "1 Q0 1 1 nan Run03",           # 15: nan is not a usable score
    ]
    assert _errors(tmp_path, "\n".join(lines + bad) + "\n") == [
        "Line 7: expected 6 fields, found 5.",
        "Line 8: field 2 must be Q0, found 'q0'.",
        "Line 9: Rank '0' is not a positive integer.",
        "Line 10: Rank '1.5' is not a positive integer.",
        "Line 11: Score 'high' is not numeric.",
        "Line 12: expected 6 fields, found 7.",
        "Line 13: unknown topicID '9'.",
        "Line 14: unknown model id '42'.",
        "Line 15: Score 'nan' is not numeric.",
    ]


def test_blank_lines_ignored_and_line_numbers_kept(tmp_path):
    text = "\n  \n" + _full("Run01")
    assert _errors(tmp_path, text) == []
    assert _errors(tmp_path, "\n\t\n1 Q0 1 1 0.9\n")[0] == "Line 3: expected 6 fields, found 5."
    assert _errors(tmp_path, " \n\n") == ["File has no run lines."]


def test_report_lists_the_first_errors_and_the_total(tmp_path):
    path = tmp_path / "many.run"
    path.write_text("".join(f"1 Q0 {m} 1 0.5\n" for m in range(1, 14)))   # 13 lines of 5 fields
    text = check_ntcir(path, "ntcir-a", TOPICS, None).text().splitlines()
    assert text[:10] == [f"Line {n}: expected 6 fields, found 5." for n in range(1, 11)]
    assert text[10:] == ["… 3 more", f"{path}: INVALID NTCIR run: 13 errors"]


def test_files_over_10_mb_are_refused(tmp_path):
    path = tmp_path / "big.run"
    with open(path, "wb") as fh:
        fh.truncate(MAX_BYTES + 1)
    message = "File is 10.0 MB; files over 10 MB are refused."
    assert [e.spec for e in check_ntcir(path, "ntcir-a").errors] == [message]


def test_subtask_b_ignores_png_suffix_and_left_zeros(tmp_path):
    qrels = tmp_path / "b.qrels"
    qrels.write_text("test-0001.png 0 2 1\ntest-0002 0 0003 1\n")
    run = tmp_path / "b.run"
    run.write_text("test-0001 Q0 0001 1 0.9 B1\ntest-0001 Q0 0002 2 0.8 B1\ntest-0001 Q0 3 3 0.7 B1\n"
                   "test-0002.png Q0 3 1 0.9 B1\ntest-0002.png Q0 1 2 0.5 B1\ntest-0002.png Q0 02 3 0.4 B1\n")
    evs = evaluate_profile_files(run, qrels, "ntcir-b")
    assert evs["B1"].per_query == {"test-0001": {"mrr": 0.5}, "test-0002": {"mrr": 1.0}}
    assert evs["B1"].means["mrr"] == 0.75
    models = ["1", "2", "3"]
    assert [e.spec for e in check_ntcir(run, "ntcir-b", ["test-0001.png", "test-0002"], models).errors] == []
    # Subtask A compares ids as written
    assert _errors(tmp_path, "1 Q0 01 1 0.9 A1\n", "ntcir-a", ["1"], ["1"]) == ["Line 1: unknown model id '01'."]


def test_a_rejected_file_is_one_line_error_in_eval_never_a_score(run_cli, monkeypatch, capsys, files):
    run, qrels = files
    run.write_text(GOOD.replace("2 Q0 3 3 0.2 Run01\n", ""))   # Run01 topic 2 lacks model 3
    code, _, err = run_cli("eval", run, qrels, "--profile", "ntcir-a")
    assert code == 2
    assert err.strip().replace("\n", " ") == (
        f"error: {run}:4: run rejected: Run01 topicID 2 lacks 1 candidate model: 3.")
    with pytest.raises(EngineError, match="run rejected: Run01 topicID 2 lacks 1 candidate model: 3"):
        check_written(run, "ntcir-a", TOPICS, MODELS)
    check_written(_write(qrels.parent, GOOD), "ntcir-a", TOPICS, MODELS)  # valid: no error


def _write(folder, text):
    path = folder / "ok.run"
    path.write_text(text)
    return path


def test_compare_gives_one_row_per_runid(run_cli, monkeypatch, capsys, files):
    run, qrels = files
    code, out, _ = run_cli("compare", qrels, run, "--profile", "ntcir-a", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["baseline"] == "Run01" and list(data["runs"]) == ["Run01", "Run02"]
    # nDCG_exp@1 per topic: Run01 1, 0; Run02 0, 1 → one win, one loss
    assert (data["runs"]["Run02"]["ndcg_exp@1"]["wins"], data["runs"]["Run02"]["ndcg_exp@1"]["losses"]) == (1, 1)
