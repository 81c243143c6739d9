"""Per-query metrics against values worked out by hand (the ir_measures parity is in test_evaluate.py)."""
from __future__ import annotations

import math

import pytest

from engine.errors import EngineError
from engine.eval.metrics import (EVENTA_EPS, Metric, average_precision, eventa_overall, eventa_parts, exp_gain, ndcg,
                            parse_metric, parse_metrics, precision, recall, reciprocal_rank, score_query, trec_order)

# One query: the run ranks grades [3, 0, 2, 1, 0]; a fifth judged doc (grade 1) is never retrieved and
# one judged doc has grade 0. Relevant (grade >= 1): 4 docs.
RELS = [3, 0, 2, 1, 0]
JUDGED = [3, 2, 1, 1, 0, 0]
NUM_REL = 4


def test_average_precision_divides_by_all_relevant():
    # relevant at ranks 1, 3, 4: (1/1 + 2/3 + 3/4) / 4 = 29/48
    assert average_precision(RELS, NUM_REL) == pytest.approx(29 / 48, abs=1e-15)
    # map_cut.3 keeps the denominator 4: (1 + 2/3) / 4 = 5/12
    assert average_precision(RELS, NUM_REL, 3) == pytest.approx(5 / 12, abs=1e-15)
    assert average_precision(RELS, 0) == 0.0


def test_reciprocal_rank_and_cutoff():
    assert reciprocal_rank([0, 0, 2, 1]) == pytest.approx(1 / 3)
    assert reciprocal_rank([0, 0, 2, 1], 2) == 0.0
    assert reciprocal_rank([0, -1, 0]) == 0.0


def test_recall_and_precision():
    assert recall(RELS, NUM_REL, 3) == 0.5          # 2 of 4 relevant in the top 3
    assert precision(RELS, 3) == pytest.approx(2 / 3)
    assert precision(RELS, 10) == 0.3              # 3 relevant / 10, though only 5 retrieved
    assert recall(RELS, 0, 5) == 0.0


def test_ndcg_linear_gain_by_hand():
    # DCG@3 = 3/log2(2) + 0 + 2/log2(4) = 4 ; ideal grades [3, 2, 1]: 3 + 2/log2(3) + 1/2 = 4.7618595…
    assert ndcg(RELS, JUDGED, 3) == pytest.approx(0.8400080, abs=1e-7)
    assert ndcg(RELS, JUDGED, 3) == pytest.approx(4 / (3.5 + 2 / math.log2(3)), abs=1e-15)
    assert ndcg([0, 0], [0, 0]) == 0.0  # no relevant doc: 0, as trec_eval


def test_ndcg_exp_gain_by_hand():
    # gains 2^rel - 1: ranked [7, 0, 3]: DCG@3 = 7 + 3/2 = 8.5 ; ideal [7, 3, 1]: 7 + 3/log2(3) + 1/2 = 9.3927892…
    assert ndcg(RELS, JUDGED, 3, exp_gain) == pytest.approx(0.9049495, abs=1e-7)
    assert ndcg(RELS, JUDGED, 3, exp_gain) == pytest.approx(8.5 / (7.5 + 3 / math.log2(3)), abs=1e-15)
    # NTCIR-A style: grades 0..3, @1 is gain of the top model over the best gain
    assert ndcg([2, 3], [3, 2, 1], 1, exp_gain) == pytest.approx(3 / 7)
    assert exp_gain(-1) == 0.0 and exp_gain(0) == 0.0 and exp_gain(4) == 15.0


def test_score_query_uses_trec_eval_order_not_given_order():
    # tie at 0.5 between b and c: trec_eval puts the larger docid first (c), so c (relevant) is rank 2
    scores = {"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1}
    assert trec_order(scores) == ["a", "c", "b", "d"]
    got = score_query(scores, {"c": 1, "zz": 2}, parse_metrics("mrr,p@2,recall@2,map"))
    assert got == {"mrr": 0.5, "p@2": 0.5, "recall@2": 0.5, "map": 0.25}


def test_trec_order_compares_docids_as_strings():
    assert trec_order({"d9": 1.0, "d10": 1.0, "d100": 1.0}) == ["d9", "d100", "d10"]


def test_eventa_parts_one_correct_image():
    assert eventa_parts([0, 0, 0, 1], 1) == {"eventa.map": 0.25, "eventa.mrr": 0.25, "eventa.r@1": 0.0,
                                             "eventa.r@5": 1.0, "eventa.r@10": 1.0}
    assert eventa_parts([0] * 11 + [1], 1) == dict.fromkeys(
        ["eventa.map", "eventa.mrr", "eventa.r@1", "eventa.r@5", "eventa.r@10"], 0.0)


def test_eventa_overall_by_hand():
    # means over 3 answered queries (ranks 1, 4, miss): mAP = MRR = 5/12, R@1 = 1/3, R@5 = R@10 = 2/3
    # Σ w/m = .3·2.4 + .2·2.4 + .2·3 + .15·1.5 + .15·1.5 = 2.25 → HM = 4/9 ; r = 3/4 → Overall = 1/3
    parts = {"eventa.map": 5 / 12, "eventa.mrr": 5 / 12, "eventa.r@1": 1 / 3, "eventa.r@5": 2 / 3,
             "eventa.r@10": 2 / 3}
    assert eventa_overall(parts, 0.75) == pytest.approx(1 / 3, abs=1e-8)
    assert eventa_overall(dict.fromkeys(parts, 1.0)) == pytest.approx(1.0, abs=1e-7)
    assert eventa_overall(dict.fromkeys(parts, 0.0)) == pytest.approx(EVENTA_EPS)


@pytest.mark.parametrize("text,expected", [
    ("ndcg@10", Metric("ndcg", 10)), ("NDCG_cut.5", Metric("ndcg", 5)), ("ndcg_exp@3", Metric("ndcg_exp", 3)),
    ("map", Metric("map")), ("map_cut_10", Metric("map", 10)), ("AP@5", Metric("map", 5)),
    ("recip_rank", Metric("mrr")), ("MRR@10", Metric("mrr", 10)), ("R@100", Metric("recall", 100)),
    ("P_10", Metric("p", 10)), ("p@1", Metric("p", 1)), ("eventa", Metric("eventa")), ("ndcg", Metric("ndcg")),
])
def test_parse_metric_names_and_aliases(text, expected):
    assert parse_metric(text) == expected


@pytest.mark.parametrize("text,message", [
    ("bpref", "unknown metric"), ("recall", "needs a cutoff"), ("p", "needs a cutoff"),
    ("eventa@5", "takes no cutoff"), ("ndcg@0", "at least 1"),
])
def test_parse_metric_rejects(text, message):
    with pytest.raises(EngineError, match=message):
        parse_metric(text)


def test_parse_metrics_list_keeps_order_and_drops_duplicates():
    assert [m.name for m in parse_metrics("ndcg@10, map ,ndcg_cut.10,,p@5")] == ["ndcg@10", "map", "p@5"]
    with pytest.raises(EngineError, match="no metrics"):
        parse_metrics(" , ")


# ---------------------------------------------------------------- the registry

@pytest.mark.parametrize("spelling,name", [
    ("ndcg@10", "ndcg@10"), ("NDCG_CUT.10", "ndcg@10"), ("ndcg_cut_5", "ndcg@5"), ("ndcg", "ndcg"),
    ("ndcg_exp@3", "ndcg_exp@3"), ("map_cut.5", "map@5"), ("ap@5", "map@5"), ("P_10", "p@10"),
    ("precision@3", "p@3"), ("r@5", "recall@5"), ("recall.10", "recall@10"), ("recip_rank", "mrr"),
    ("rr@10", "mrr@10"), ("eventa", "eventa")])
def test_every_spelling_of_the_registry_parses(spelling, name):
    assert parse_metric(spelling).name == name


def test_cutoff_rules_come_from_the_registry():
    with pytest.raises(EngineError, match="needs a cutoff, e.g. p@10"):
        parse_metric("p")
    with pytest.raises(EngineError, match="takes no cutoff"):
        parse_metric("eventa@10")
    with pytest.raises(EngineError, match=r"unknown metric 'bleu'; known: ndcg, ndcg@k, .*p@k.*, eventa"):
        parse_metric("bleu")


def test_a_new_metric_is_one_function_and_one_line(monkeypatch):
    """What docs/eval.md shows: register a function and every name, parser and evaluator knows it."""
    from engine.eval import metrics as M
    from engine.eval.evaluate import evaluate
    monkeypatch.setattr(M, "REGISTRY", dict(M.REGISTRY))

    @M.metric("success", M.REQUIRED, aliases=("s",), help="1 if a relevant doc is in the top k")
    def success(q: M.Judged, k):
        return float(any(r >= M.RELEVANT for r in q.rels[:k]))

    assert parse_metric("s_2").name == "success@2" and "success@k" in M.known_metrics()
    run = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"a": 1.0}}
    qrels = {"q1": {"c": 1}, "q2": {"b": 2}}
    means = evaluate(run, qrels, "success@2,success@3").means
    assert means == {"success@2": 0.0, "success@3": 0.5}
