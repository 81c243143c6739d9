"""`engine eval submission.zip labeled.csv`: an EVENTA submission scored against the labeled caption CSV,
equal to scoring its TREC run against the qrels `engine convert eventa-qrels` writes (and to ir_measures)."""
from __future__ import annotations

import csv

import pytest

from engine.tasks.eventa.submission import write_eventa_submission


def labeled(path):
    rows = [("q1", "a red bus in the city", "img3"), ("q2", "a cat on a roof", "img1"),
            ("q3", "snow on the mountains", "img9")]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["query_index", "caption", "retrieved_article_id", "retrieved_image_id"])
        w.writerows([(q, t, "a1", img) for q, t, img in rows])
    return path


def test_eval_scores_a_submission_zip_against_the_labeled_csv(run_cli, tmp_path, monkeypatch, capsys):
    gold = labeled(tmp_path / "labeled.csv")
    rankings = {"q1": ["img3", "img2"], "q2": ["img2", "img1", "img3"], "q3": ["img4"]}
    _, zip_path = write_eventa_submission(tmp_path / "sub", rankings)
    code, out, err = run_cli("eval", zip_path, gold, "--metrics", "mrr@10,recall@10", "--json")
    assert code == 0, err
    direct = out
    code, out, err = run_cli("convert", "eventa-qrels", gold, tmp_path / "qrels.txt")
    assert code == 0, err
    assert (tmp_path / "qrels.txt").read_text().splitlines() == ["q1 0 img3 1", "q2 0 img1 1", "q3 0 img9 1"]
    code, out, err = run_cli("eval", zip_path, tmp_path / "qrels.txt", "--metrics",
                             "mrr@10,recall@10", "--json")
    assert code == 0 and out == direct, err
    import json
    means = json.loads(direct)
    assert means["mrr@10"] == pytest.approx(0.5) and means["recall@10"] == pytest.approx(2 / 3)
    ir_measures = pytest.importorskip("ir_measures")
    run = {q: {d: float(len(ds) - i) for i, d in enumerate(ds)} for q, ds in rankings.items()}
    qrels = {"q1": {"img3": 1}, "q2": {"img1": 1}, "q3": {"img9": 1}}
    ref = ir_measures.calc_aggregate([ir_measures.RR @ 10, ir_measures.R @ 10], qrels, run)
    assert ref[ir_measures.RR @ 10] == pytest.approx(means["mrr@10"])
    assert ref[ir_measures.R @ 10] == pytest.approx(means["recall@10"])
