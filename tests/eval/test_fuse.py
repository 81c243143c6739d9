"""`engine fuse`: runs in, a fused TREC run out (hand-computed RRF), weights given or tuned on qrels, and
one-line errors for bad input."""
from __future__ import annotations

import pytest

from engine.errors import EngineError
from engine.eval.fuse import FuseOptions, fuse_files, parse_weights, tune_weights
from engine.io.runs import read_run


@pytest.fixture()
def runs(tmp_path):
    a, b = tmp_path / "a.run", tmp_path / "b.run"
    a.write_text("q1 Q0 d1 1 9.0 A\nq1 Q0 d2 2 5.0 A\nq1 Q0 d3 3 1.0 A\nq2 Q0 x 1 1.0 A\nq2 Q0 y 2 0.5 A\n")
    b.write_text("q1 Q0 d3 1 0.9 B\nq1 Q0 d1 2 0.8 B\nq1 Q0 d2 3 0.1 B\nq2 Q0 y 1 3.0 B\nq2 Q0 x 2 1.0 B\n")
    qrels = tmp_path / "q.qrels"
    qrels.write_text("q1 0 d3 1\nq2 0 y 1\n")
    return a, b, qrels


def test_fuse_cli_writes_hand_computed_rrf(run_cli, monkeypatch, capsys, runs, tmp_path):
    a, b, _ = runs
    out = tmp_path / "f.run"
    code, text, _ = run_cli("fuse", a, b, "--out", out)
    assert code == 0 and text.strip() == f"{out}: 5 lines, 2 queries, rrf"
    fused = read_run(out)
    # q1: d1 = 1/61 + 1/62, d3 = 1/63 + 1/61, d2 = 1/62 + 1/63 (scores printed at 6 decimals)
    assert fused["q1"]["d1"] == pytest.approx(1 / 61 + 1 / 62, abs=1e-6)
    assert fused["q1"]["d3"] == pytest.approx(1 / 63 + 1 / 61, abs=1e-6)
    assert fused["q1"]["d2"] == pytest.approx(1 / 62 + 1 / 63, abs=1e-6)
    assert out.read_text().splitlines()[0] == "q1 Q0 d1 1 0.032522 fused"


def test_fuse_weights_and_tuning(run_cli, monkeypatch, capsys, runs, tmp_path):
    a, b, qrels = runs
    out = tmp_path / "w.run"
    code, text, _ = run_cli("fuse", a, b, "--method", "wsum", "--weights", "0,1", "--out", out)
    assert code == 0 and text.strip().endswith("wsum; weights 0, 1")
    assert [d for d, _ in sorted(read_run(out)["q1"].items(), key=lambda kv: -kv[1])][:2] == ["d3", "d1"]
    # run B puts the relevant doc first in both queries, A never; equal weights rank d1 first in q1
    # (min-max: d1 1 + .875, d3 0 + 1), so tuning must lean on B
    weights, best = tune_weights([read_run(a), read_run(b)], {"q1": {"d3": 1}, "q2": {"y": 1}},
                                 FuseOptions(method="wsum", metric="mrr"))
    assert best == 1.0 and weights[1] > weights[0]
    code, text, err = run_cli("fuse", a, b, "--method", "combsum", "--tune", qrels,
                              "--metric", "mrr", "--out", out)
    assert code == 0 and "(tuned: mrr 1.0000 on the tuning qrels)" in text and "optimistic" in err


@pytest.mark.parametrize("args,message", [
    (["--method", "wsum"], "fusion method wsum needs one weight per system (give --weights or --tune)"),
    (["--weights", "1,x"], "--weights '1,x': give comma-separated numbers, one per run"),
    (["--weights", "0,0"], "--weights '0,0': weights must be finite, non-negative and not all 0"),
    (["--weights", "1"], "1 weights for 2 runs; give one weight per run"),
    (["--method", "borda"], "unknown fusion method 'borda'; use one of rrf, combsum, combmnz, wsum"),
    (["--norm", "rank"], "unknown score normalization 'rank'; use one of minmax, zscore, sum, none"),
])
def test_fuse_errors_are_one_line(run_cli, monkeypatch, capsys, runs, tmp_path, args, message):
    a, b, _ = runs
    code, _, err = run_cli("fuse", a, b, "--out", tmp_path / "x.run", *args)
    assert code == 2 and message in err.replace("\n", " ") and "Traceback" not in err
    assert not (tmp_path / "x.run").exists()


def test_fuse_bad_run_line_names_file_and_line(run_cli, monkeypatch, capsys, runs, tmp_path):
    a, _, _ = runs
    bad = tmp_path / "bad.run"
    bad.write_text("q1 Q0 d1 1 9.0 A\nq1 Q0 d2 2 high A\n")
    code, _, err = run_cli("fuse", a, bad, "--out", tmp_path / "x.run")
    assert code == 2 and f"{bad}:2: score 'high' is not a number" in err
    with pytest.raises(EngineError, match="not both"):
        fuse_files([a, a], tmp_path / "y.run", weights=[1, 1], tune=a)
    assert parse_weights("0.5, 2") == [0.5, 2.0]
