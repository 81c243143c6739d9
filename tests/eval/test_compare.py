"""`engine compare` and its tests: t-test p-values equal scipy's ttest_rel, the randomization test equals an
exact enumeration of sign flips (and ranx's Monte Carlo within its tolerance), Holm by hand, wins/ties/losses
and the four output formats."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from scipy.stats import ttest_rel

from engine.errors import EngineError
from engine.eval.compare import CompareOptions, compare, render
from engine.eval.significance import adjust, paired_t, randomization


def _exact_randomization(a, b) -> float:
    """Every one of the 2^n sign assignments of the differences: share with |mean| ≥ the observed |mean|."""
    d = np.asarray(b, float) - np.asarray(a, float)
    observed = abs(d.mean())
    signs = np.array(list(itertools.product([1, -1], repeat=len(d))))
    return float(np.mean(np.abs((signs * d).mean(axis=1)) >= observed - 1e-12))


def test_paired_t_is_scipys_ttest_rel():
    rng = np.random.default_rng(3)
    a = rng.random(25)
    b = a + rng.normal(0.04, 0.1, 25)
    assert paired_t(a, b) == ttest_rel(b, a).pvalue
    assert paired_t([0.5, 0.2, 0.1], [0.5, 0.2, 0.1]) == 1.0   # identical runs: no evidence (scipy says nan)


def test_randomization_is_exact_on_a_tiny_case():
    a = [0.2, 0.5, 0.1, 0.9, 0.3, 0.4, 0.0, 0.6]
    b = [0.4, 0.5, 0.3, 1.0, 0.1, 0.7, 0.2, 0.6]
    exact = _exact_randomization(a, b)
    assert randomization(a, b) == pytest.approx(exact)          # 2^8 < resamples: scipy enumerates
    mc = randomization(a, b, resamples=100)                       # Monte Carlo, fixed seed: reproducible
    assert mc == randomization(a, b, resamples=100) and abs(mc - exact) < 0.15


def test_one_shared_query_has_no_evidence_either_way():
    # one query: both sign assignments give the same |difference|, so the exact p-value is 1 (scipy refuses n = 1)
    assert randomization([0.2], [0.9]) == _exact_randomization([0.2], [0.9]) == 1.0


def test_randomization_monte_carlo_within_tolerance_of_the_exact_value():
    rng = np.random.default_rng(7)
    a = rng.random(16)
    b = a + rng.normal(0.05, 0.15, 16)
    exact = _exact_randomization(a, b)   # 65,536 assignments
    p = randomization(a, b, resamples=20_000, seed=1)
    assert abs(p - exact) < 4 * np.sqrt(exact * (1 - exact) / 20_000) + 1e-4


@pytest.mark.slow
def test_randomization_agrees_with_ranx():
    from ranx.statistical_tests import fisher_randomization_test
    rng = np.random.default_rng(11)
    a = rng.random(40)
    b = a + rng.normal(0.04, 0.15, 40)
    ours = randomization(a, b, resamples=20_000)
    theirs, _ = fisher_randomization_test(a, b, n_permutations=20_000, max_p=1.0, random_seed=42)
    assert abs(ours - theirs) < 4 * np.sqrt(2 * theirs * (1 - theirs) / 20_000)   # two estimates, 4 sd


def test_holm_and_bonferroni_by_hand():
    # sorted .01 .02 .04 → ×3, ×2, ×1 = .03 .04 .04 (running max), back in the given order
    assert adjust([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert adjust([0.04, 0.01, 0.02], "bonferroni") == pytest.approx([0.12, 0.03, 0.06])
    assert adjust([0.5, 0.6]) == [1.0, 1.0]   # 2 × .5 = 1, max(1, .6) = 1
    assert adjust([0.3], "none") == [0.3]
    with pytest.raises(EngineError, match="unknown correction 'fdr'"):
        adjust([0.1], "fdr")


QRELS = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}, "q4": {"d": 1}}
BASE = {"q1": {"a": 2.0, "x": 1.0}, "q2": {"x": 2.0, "b": 1.0}, "q3": {"x": 2.0, "c": 1.0}, "q4": {"d": 1.0}}
# per-query MRR: base 1, .5, .5, 1; better 1, 1, 1, 1 (2 wins, 2 ties); worse .5, .5, 0, 1 (2 losses, 2 ties)
BETTER = {"q1": {"a": 2.0}, "q2": {"b": 2.0}, "q3": {"c": 2.0}, "q4": {"d": 1.0}}
WORSE = {"q1": {"x": 2.0, "a": 1.0}, "q2": {"x": 2.0, "b": 1.0}, "q3": {"x": 1.0}, "q4": {"d": 1.0}}


def test_compare_means_tests_and_win_tie_loss():
    cmp = compare({"base": BASE, "better": BETTER, "worse": WORSE}, QRELS, "mrr")
    assert cmp.means["base"]["mrr"] == 0.75 and cmp.means["better"]["mrr"] == 1.0
    assert cmp.means["worse"]["mrr"] == pytest.approx(0.5)
    t = cmp.tests["better"]["mrr"]
    assert (t.wins, t.ties, t.losses) == (2, 2, 0)
    w = cmp.tests["worse"]["mrr"]
    assert (w.wins, w.ties, w.losses) == (0, 2, 2)   # q1 1 → .5, q3 .5 → 0; q2, q4 equal
    base = [1, 0.5, 0.5, 1]
    assert t.t_p == ttest_rel([1, 1, 1, 1], base).pvalue
    # differences 0, .5, .5, 0 (mean .25): of the 16 sign assignments, the 8 giving the two .5s the same sign
    # reach |mean| .25, so p = 8/16; `worse` (differences -.5, 0, -.5, 0) the same
    assert t.rand_p == pytest.approx(_exact_randomization(base, [1, 1, 1, 1])) == pytest.approx(0.5)
    assert w.rand_p == pytest.approx(0.5)
    # Holm over the two runs: equal p-values p, p → 2p, max(2p, p) = 2p (capped at 1)
    assert t.rand_p_adj == w.rand_p_adj == 1.0
    assert t.t_p_adj == pytest.approx(2 * t.t_p) and w.t_p_adj == pytest.approx(2 * t.t_p)
    assert "base" not in cmp.tests


def test_render_formats():
    cmp = compare({"base": BASE, "better": BETTER}, QRELS, "mrr", CompareOptions(alpha=0.3))
    table = render(cmp, "table").splitlines()
    assert table[0].split() == ["run", "mrr", "mrr", "p(t)", "mrr", "p(rand)", "mrr", "W/T/L"]
    assert table[2].split()[:2] == ["better", "1.0000†"]     # t-test p .18 < .3; randomization p .5 is not
    md = render(cmp, "markdown")
    assert md.startswith("| run | mrr | mrr p(t) |") and "| base | 0.7500 | — | — | — |" in md
    latex = render(cmp, "latex")
    assert latex.splitlines()[0] == r"\begin{tabular}{lrrrr}" and r"\bottomrule" in latex
    data = json.loads(render(cmp, "json"))
    assert data["baseline"] == "base" and data["runs"]["better"]["mrr"]["wins"] == 2
    assert data["runs"]["better"]["mrr"]["randomization_p"] == pytest.approx(0.5)
    better = data["runs"]["better"]["mrr"]
    assert better["significant_t"] and not better["significant_randomization"]
    with pytest.raises(EngineError, match="unknown format 'html'"):
        render(cmp, "html")


def test_compare_needs_two_runs_and_sane_options():
    with pytest.raises(EngineError, match="at least 2 runs"):
        compare({"base": BASE}, QRELS, "mrr")
    with pytest.raises(EngineError, match="alpha must be at most 0.5, not 1.5"):
        CompareOptions(alpha=1.5)
    with pytest.raises(EngineError, match="alpha must be greater than 0, not 0"):
        CompareOptions(alpha=0)


def test_compare_cli(run_cli, monkeypatch, capsys, tmp_path):
    qrels = tmp_path / "q.qrels"
    qrels.write_text("".join(f"{q} 0 {d} 1\n" for q, j in QRELS.items() for d in j))
    paths = []
    for name, run in (("base", BASE), ("better", BETTER)):
        p = tmp_path / f"{name}.run"
        p.write_text("".join(f"{q} Q0 {d} 1 {s} x\n" for q, docs in run.items() for d, s in docs.items()))
        paths.append(p)
    code, out, _ = run_cli("compare", qrels, *paths, "-m", "mrr", "--format", "json")
    assert code == 0 and json.loads(out)["runs"]["better"]["mrr"]["mean"] == 1.0
    bad = tmp_path / "bad.run"
    bad.write_text("q1 Q0 a 1\n")
    code, _, err = run_cli("compare", qrels, *paths, "--alpha", "1")
    assert code == 2 and "--alpha must be at most 0.5, not 1.0" in err
    code, _, err = run_cli("compare", qrels, paths[0], bad)
    assert code == 2 and f"{bad}:1: expected 6 fields" in err
    one = tmp_path / "one.qrels"
    one.write_text("q1 0 a 1\n")
    code, out, err = run_cli("compare", one, *paths, "-m", "mrr", "--format", "json")
    assert code == 0 and "Traceback" not in err
    assert json.loads(out)["runs"]["better"]["mrr"]["randomization_p"] == 1.0


@pytest.fixture(scope="session")
def dsebench(shared_data):
    return shared_data / "dsebench"


@pytest.mark.shared
def test_dsebench_baselines_through_the_profile_and_compare(dsebench, run_cli, monkeypatch, capsys, tmp_path):
    """The published rows (Baselines/evaluation_results.md) through `--profile dsebench`, then compared."""
    if not dsebench.is_dir():
        pytest.skip("../shared/data/dsebench is absent")
    qrels = tmp_path / "dse.qrels"
    assert run_cli("convert", "dsebench-qrels",
                   dsebench / "Data" / "human_annotated_judgments.json", qrels)[0] == 0
    published = {"BM25": [0.3059, 0.3416, 0.0982, 0.1739, 0.1705, 0.2769],
                 "GTE": [0.3267, 0.3649, 0.1104, 0.1921, 0.1820, 0.2983]}   # NDCG@5,@10, MAP@5,@10, R@5,@10
    runs = []
    for name, row in published.items():
        run = tmp_path / f"{name}.run"
        assert run_cli("convert", "dsebench-run",
                       dsebench / "Baselines" / "Retrieval" / f"{name}_results.json", run)[0] == 0
        code, out, _ = run_cli("eval", run, qrels, "--profile", "dsebench", "--json")
        assert code == 0 and [round(v, 4) for v in json.loads(out).values()] == row
        runs.append(run)
    code, out, _ = run_cli("compare", qrels, *runs, "--profile", "dsebench", "-m", "ndcg@10",
                           "--format", "json")
    gte = json.loads(out)["runs"]["GTE"]["ndcg@10"]
    assert code == 0 and (gte["wins"], gte["ties"], gte["losses"]) == (56, 59, 26)
    assert gte["t_p"] == pytest.approx(0.0032, abs=1e-4) and gte["significant_randomization"]
