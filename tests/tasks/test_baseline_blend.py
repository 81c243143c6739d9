"""The guarded blend: it stays the baseline when the method carries no signal or hurts a guarded metric, and
follows the method when its gain is shown (weights fitted inside the training rows only)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from engine.tasks.model_ranking import baseline_blend
from engine.tasks.model_ranking.transfer import rank_targets

N, M = 60, 10


def _truth(seed: int = 0) -> np.ndarray:
    """Candidate 0 is best for half the queries, candidate q % M + 1 … for the rest: the baseline (mean rank)
    gets the first half right, only a query-aware method gets the second."""
    rng = np.random.default_rng(seed)
    t = rng.random((N, M)) * 0.5
    t[: N // 2, 0] = 1.0
    t[N // 2:, 0] = 0.8
    t[np.arange(N // 2, N), 1 + np.arange(N // 2, N) % (M - 1)] = 1.0
    return t


def _values(truth: np.ndarray):
    def values(pred: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
        hit = (pred.argmax(axis=1) == truth[rows].argmax(axis=1)).astype(float)
        return {"hit": hit, "miss": 1 - hit}
    return values


def _baseline(truth: np.ndarray):
    return lambda tr, te: np.tile(rank_targets(truth[tr]).mean(axis=0), (len(te), 1))


def _noise(seed: int):
    return lambda tr, te: np.random.default_rng([seed, len(tr), int(te[0])]).random((len(te), M))


def test_lower_bound_is_scipys_t_interval_widened_by_the_cv_correction():
    d = np.random.default_rng(0).normal(0.02, 0.05, 15)
    plain = stats.ttest_1samp(d, 0.0, alternative="greater").confidence_interval(0.95).low
    assert baseline_blend.corrected_lower_bound(d, 0.0, 0.05) == pytest.approx(plain)
    wider = baseline_blend.corrected_lower_bound(d, 0.2, 0.05)
    se = d.std(ddof=1) * np.sqrt(1 / 15 + 0.25)
    assert wider == pytest.approx(d.mean() - stats.t.ppf(0.95, 14) * se) and wider < plain
    assert baseline_blend.corrected_lower_bound(np.zeros(15), 0.2, 0.05) == -np.inf


@pytest.mark.parametrize("seed", range(4))
def test_no_signal_keeps_the_baseline(seed):
    truth = _truth(seed)
    fit = baseline_blend.fit_weight(_noise(seed), _baseline(truth), np.arange(N), _values(truth), ["hit"], ["hit"], M)
    assert fit.weight == 0.0
    assert all(lower["hit"] <= 0 for lower in fit.lower.values())


def test_a_method_that_hurts_a_guarded_metric_is_not_followed():
    truth = _truth()
    oracle = lambda tr, te: truth[te]  # noqa: E731
    fit = baseline_blend.fit_weight(oracle, _baseline(truth), np.arange(N), _values(truth), ["hit"], ["hit", "miss"], M)
    assert fit.weight == 0.0 and fit.gains[1.0]["hit"] > 0.2 and fit.lower[1.0]["hit"] > 0


def test_strong_signal_is_followed_and_beats_the_baseline_held_out():
    truth = _truth()
    oracle = lambda tr, te: truth[te] + np.random.default_rng(len(tr)).random((len(te), M)) * 0.3  # noqa: E731
    rows, values = np.arange(N), _values(truth)
    fit = baseline_blend.fit_weight(oracle, _baseline(truth), rows, values, ["hit"], ["hit"], M)
    assert fit.weight > 0 and fit.lower[fit.weight]["hit"] > 0
    assert fit.weight == max(fit.lower, key=lambda w: fit.lower[w]["objective"])
    chosen: list[float] = []
    train, test = rows[::2], rows[1::2]
    pred = baseline_blend.guarded(oracle, _baseline(truth), values, ["hit"], ["hit"], M, chosen)(train, test)
    assert chosen[0] > 0
    assert values(pred, test)["hit"].mean() > values(_baseline(truth)(train, test), test)["hit"].mean() + 0.2
    # and with noise it is the baseline, row for row
    chosen.clear()
    pred = baseline_blend.guarded(_noise(0), _baseline(truth), values, ["hit"], ["hit"], M, chosen)(train, test)
    assert chosen == [0.0]
    np.testing.assert_array_equal(pred.argmax(axis=1), _baseline(truth)(train, test).argmax(axis=1))


# ---------------------------------------------------------------- per rank position


def test_compose_takes_each_band_from_its_own_blend():
    method = np.array([[0.0, 3.0, 2.0, 1.0]])
    baseline = np.array([[3.0, 0.0, 1.0, 2.0]])
    same = baseline_blend.compose(method, baseline, (0.5, 0.5), (1, 4))
    assert np.array_equal(np.argsort(-same[0], kind="stable"),
                          np.argsort(-baseline_blend.mix(method, baseline, 0.5)[0], kind="stable"))
    # first place from the baseline (candidate 0), the rest in the method's order (1, 2, 3)
    got = baseline_blend.compose(method, baseline, (0.0, 1.0), (1, 4))
    assert list(np.argsort(-got[0], kind="stable")) == [0, 1, 2, 3]
    # first place from the method (candidate 1), the rest in the baseline's order (0, 3, 2)
    got = baseline_blend.compose(method, baseline, (1.0, 0.0), (1, 4))
    assert list(np.argsort(-got[0], kind="stable")) == [1, 0, 3, 2]


def _generalist_first(seed: int, signal: bool, topics: int = 12, per_topic: int = 12, m: int = 40):
    """Planted Million LLMs questions: a generalist (LLM 0) relevant to 75 % of questions and second-best when the
    topic's expert (70 %) is relevant too; a second generalist (LLM 1) 45 %. With `signal`, the question's
    embedding tells its topic; without, the experts are spread over every topic alike (no question signal)."""
    from fixtures.planted_llms import topic_questions
    emb, grades = topic_questions(seed, signal, topics, per_topic, m, noise=0.5, first_expert=2,
                                  relevant=(0.7, 0.75, 0.45))
    return emb, grades


def test_per_position_keeps_the_prior_first_and_the_methods_gain_below(seed: int = 0):
    """The previous rule threw the method's nDCG gain away because its MRR did not gain; per rank position the
    prior keeps the first place (a generalist, usually right), the method fills the rest (the experts): nDCG@10
    well above the prior out of fold, MRR not below it. Without question signal: the prior (a weight qualifies
    by chance in at most one fold: the rule's level), never below it beyond noise."""
    from engine.tasks.model_ranking import mllm
    from engine.tasks.model_ranking.study import out_of_fold
    from engine.tasks.model_ranking.transfer import TransferParams, column_prior, transfer
    gain = {0: 0.0, 1: 1.0, 2: 0.7}
    for signal in (True, False):
        emb, grades = _generalist_first(seed, signal)
        scores = np.vectorize(gain.get, otypes=[float])(grades)
        n, m = grades.shape
        method = lambda tr, te: transfer(emb[te] @ emb[tr].T, scores[tr], column_prior(scores[tr]),  # noqa: E731
                                         TransferParams(10, 0.1, 0.0))
        prior = lambda tr, te: np.tile(column_prior(scores[tr]), (len(te), 1))  # noqa: E731
        chosen: list = []
        guarded = mllm.guarded_positions(method, scores, grades, gain, m, chosen)
        got = mllm.scores_of(grades, gain, out_of_fold(guarded, n, m, 5, seed))
        base = mllm.scores_of(grades, gain, out_of_fold(prior, n, m, 5, seed))
        if signal:
            assert got["ndcg@10"] >= base["ndcg@10"] + 0.1, (got, base, chosen)
            assert got["mrr"] >= base["mrr"] - 1e-9, (got, base, chosen)
            assert all(rest > 0 for _, rest in chosen), chosen
        else:
            assert sum(w != (0.0, 0.0) for w in chosen) <= 1, chosen
            assert got["ndcg@10"] >= base["ndcg@10"] - 0.01 and got["mrr"] >= base["mrr"] - 0.01, (got, base)


# ---------------------------------------------------------------- among several methods


def test_among_methods_each_band_takes_the_one_whose_gain_is_shown():
    """A noise method beside a good one: the good one is chosen, at a level shared by both methods' weights
    (its lower bound no higher than when it is alone); two noise methods: the baseline; the composed ranking
    takes each band from the method its fit names."""
    truth = _truth()
    good = lambda tr, te: truth[te] + np.random.default_rng(len(tr)).random((len(te), M)) * 0.3  # noqa: E731
    rows, values, base = np.arange(N), _values(truth), _baseline(truth)
    alone = baseline_blend.fit_positions(good, base, rows, values, ["hit"], M)[0]
    both = baseline_blend.fit_positions([_noise(1), good], base, rows, values, ["hit"], M)[0]
    assert both.method == 1 and both.weight > 0 and alone.weight > 0
    assert both.lower[both.weight]["hit"] <= alone.lower[both.weight]["hit"]
    none = baseline_blend.fit_positions([_noise(1), _noise(2)], base, rows, values, ["hit"], M)[0]
    assert none.weight == 0.0
    chosen, picked = [], []
    train, test = rows[::2], rows[1::2]
    pred = baseline_blend.guarded_positions([_noise(1), good], base, values, ["hit", "hit"], (1, M), chosen=chosen,
                                            picked=picked)(train, test)
    # the second band cannot move the first place `hit` reads: no gain of its own, so it keeps the baseline
    assert picked[0][0] == 1 and chosen[0][0] > 0 and chosen[0][1] == 0.0
    assert values(pred, test)["hit"].mean() > values(base(train, test), test)["hit"].mean() + 0.2


def test_compose_takes_one_prediction_per_band():
    first = np.array([[0.0, 3.0, 2.0, 1.0]])
    rest = np.array([[0.0, 1.0, 2.0, 3.0]])
    baseline = np.array([[3.0, 0.0, 1.0, 2.0]])
    got = baseline_blend.compose([first, rest], baseline, (1.0, 1.0), (1, 4))
    assert list(np.argsort(-got[0], kind="stable")) == [1, 3, 2, 0]
    assert np.array_equal(baseline_blend.compose([first, first], baseline, (1.0, 1.0), (1, 4)),
                          baseline_blend.compose(first, baseline, (1.0, 1.0), (1, 4)))


# ---------------------------------------------------------------- no band may cost another reported metric


def _trap(seed: int = 0, n: int = 120, m: int = 8):
    """The baseline's first place (candidate 0) is right for half the questions and its second (candidate 1)
    whenever the first is wrong; a question's own candidate (2 + q % 6) is relevant for half the questions. A
    method that knows it puts it second: `top3` (relevant ones in the first three) gains, but where the first place
    is wrong and the own candidate is not relevant the right answer drops to third (reciprocal rank 1/2 → 1/3)."""
    rng = np.random.default_rng(seed)
    first_right = rng.random(n) < 0.5
    own = 2 + np.arange(n) % (m - 2)
    relevant = np.zeros((n, m), bool)
    relevant[first_right, 0] = True
    relevant[~first_right, 1] = True
    relevant[np.arange(n), own] = rng.random(n) < 0.5
    prior = np.tile(np.linspace(1.0, 0.0, m), (n, 1))
    method = np.zeros((n, m))
    method[:, 0], method[np.arange(n), own], method[:, 1] = 3.0, 2.0, 1.0

    def values(pred: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
        order = np.argsort(-pred, axis=1, kind="stable")
        hits = np.take_along_axis(relevant[rows], order, axis=1)
        return {"rr": 1.0 / (hits.argmax(axis=1) + 1), "top3": hits[:, :3].sum(axis=1).astype(float)}
    noise = rng.random((n, m)) * 1e-3
    return (lambda tr, te: method[te] + noise[te]), (lambda tr, te: prior[te]), values, n, m


def test_a_band_that_costs_the_first_band_s_metric_is_not_taken():
    """Decided alone, the rest band follows the method (its own metric gains) and the composed ranking loses
    MRR; decided on the composed ranking with the no-loss bound, the ranking keeps the baseline's MRR (a weight
    that gains `top3` without moving the second place may still be taken)."""
    method, base, values, n, m = _trap()
    rows = np.arange(n)

    def composed_values(fits):
        parts = [method(rows, rows) if f.weight > 0 else base(rows, rows) for f in fits]
        return values(baseline_blend.compose(parts, base(rows, rows), [f.weight for f in fits], (1, m)), rows)
    prior = values(base(rows, rows), rows)
    alone = baseline_blend.fit_positions(method, base, rows, values, ["rr", "top3"], m,
                                         baseline_blend.InnerCV(keep=None), cuts=(1, m))
    assert alone[0].weight == 0.0 and alone[1].weight > 0
    assert composed_values(alone)["rr"].mean() < prior["rr"].mean()
    composed = baseline_blend.fit_positions(method, base, rows, values, ["rr", "top3"], m, cuts=(1, m))
    assert composed[0].weight == 0.0 and composed[1].weight < alone[1].weight
    got = composed_values(composed)
    assert got["rr"].mean() >= prior["rr"].mean() and got["top3"].mean() >= prior["top3"].mean()


def test_no_loss_bound_is_the_mean_at_one_half_and_no_change_is_no_loss():
    d = np.random.default_rng(1).normal(-0.01, 0.05, 15)
    assert baseline_blend.no_loss_bound(d, 0.2, 0.5) == pytest.approx(d.mean())
    assert baseline_blend.no_loss_bound(d, 0.2, 0.05) < d.mean()
    assert baseline_blend.no_loss_bound(np.zeros(15), 0.2, 0.05) == 0.0


# ---------------------------------------------------------------- a real gain is not thrown away


def _moderate(seed: int, n: int = 80, share: float = 0.2):
    """`_truth`'s construction over `n` questions and a method that knows the right answer for a random `share`
    of them (the prior's order elsewhere): a real gain on some of the queries the baseline gets wrong, small
    against the folds' spread."""
    rng = np.random.default_rng(seed)
    truth = rng.random((n, M)) * 0.5
    truth[: n // 2, 0], truth[n // 2:, 0] = 1.0, 0.8
    truth[np.arange(n // 2, n), 1 + np.arange(n // 2, n) % (M - 1)] = 1.0
    knows = np.random.default_rng(100 + seed).random(n) < share

    def method(tr, te):
        pred = np.tile(rank_targets(truth[tr]).mean(axis=0), (len(te), 1))
        pred[knows[te]] = 10 * truth[te][knows[te]]
        return pred
    return truth, method


def test_a_real_gain_the_bonferroni_level_gave_up_is_kept():
    """One method at four weights is four strongly correlated candidates: the Bonferroni level over them and the
    largest lower bound (the rule before) leave the baseline where the method's gain is real; Million LLMs'
    rule (`mllm.GUARD`: each candidate's own metric at ALPHA, the largest mean gain) takes it, and out of fold
    the ranking gains; noise methods still leave the baseline."""
    from engine.tasks.model_ranking import mllm
    from engine.tasks.model_ranking.study import out_of_fold
    truth, method = _moderate(2)
    n, rows, values = len(truth), np.arange(len(truth)), _values(truth)
    base = _baseline(truth)
    before = baseline_blend.fit_positions(method, base, rows, values, ["hit", "hit"], M, baseline_blend.InnerCV(),
                                          cuts=(1, M))
    now = baseline_blend.fit_positions(method, base, rows, values, ["hit", "hit"], M, mllm.GUARD, cuts=(1, M))
    assert before[0].weight == 0.0 and now[0].weight > 0
    held = {name: values(out_of_fold(baseline_blend.guarded_positions(method, base, values, ["hit", "hit"], (1, M),
                                                                      cv), n, M, 5, 0), rows)["hit"].mean()
            for name, cv in (("before", baseline_blend.InnerCV()), ("now", mllm.GUARD))}
    prior = values(out_of_fold(base, n, M, 5, 0), rows)["hit"].mean()
    assert held["now"] > prior >= held["before"] - 1e-12, (held, prior)
    for seed in range(3):
        noise = [_noise(seed * 3 + s) for s in range(3)]
        fits = baseline_blend.fit_positions(noise, base, rows, values, ["hit", "hit"], M, mllm.GUARD, cuts=(1, M))
        assert [f.weight for f in fits] == [0.0, 0.0], seed
