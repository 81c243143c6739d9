"""Run-level evaluation: parity with ir_measures (trec_eval) on random runs with ties, missing queries and
graded qrels; EVENTA aggregation and groups by hand; the `engine eval` command and its errors."""
from __future__ import annotations

import json
import math
import random

import ir_measures
import pytest
from ir_measures import AP, P, R, RR, nDCG

from engine.eval.evaluate import evaluate, evaluate_files, format_table, to_json
from engine.eval.groups import read_groups
from engine.eval.metrics import EVENTA_WEIGHTS, eventa_overall
from engine.io.runs import read_qrels, read_run, write_qrels

EXP_GAINS = {r: 2 ** r - 1 for r in range(0, 5)}

# our name → the ir_measures measure (all computed by pytrec_eval, i.e. trec_eval itself)
PYTREC_EVAL = {
    "ndcg@5": nDCG @ 5, "ndcg@10": nDCG @ 10, "ndcg": nDCG,
    "ndcg_exp@5": nDCG(gains=EXP_GAINS) @ 5, "ndcg_exp@10": nDCG(gains=EXP_GAINS) @ 10,
    "map": AP, "map@5": AP @ 5, "map@10": AP @ 10, "mrr": RR,
    "recall@1": R @ 1, "recall@5": R @ 5, "recall@10": R @ 10, "p@1": P @ 1, "p@5": P @ 5, "p@10": P @ 10,
}


def random_case(seed: int) -> tuple[dict, dict]:
    """Graded qrels (−1..4) and a run with many tied scores, queries missing from the run, a run query
    missing from the qrels, and a qrels query with no relevant doc."""
    rng = random.Random(seed)
    docs = sorted({f"d{rng.randint(0, 80)}" for _ in range(120)})  # d7 < d70 < d8 as strings
    qrels: dict = {}
    run: dict = {}
    for q in range(30):
        qid = f"q{q}"
        qrels[qid] = {d: rng.choice([-1, 0, 0, 0, 1, 1, 2, 3, 4]) for d in rng.sample(docs, rng.randint(1, 20))}
        if rng.random() < 0.2:
            continue  # answered by no line of the run
        run[qid] = {d: rng.choice([round(rng.uniform(-2, 5), 1), 1.0, 0.5])
                    for d in rng.sample(docs, rng.randint(1, 40))}
    qrels["nothing_relevant"] = {docs[0]: 0, docs[1]: -1}
    run["nothing_relevant"] = {docs[0]: 3.0, docs[2]: 1.0}
    run["not_judged"] = {docs[0]: 1.0}
    return run, qrels


def write_files(tmp_path, run: dict, qrels: dict):
    """The case as TREC files, scores printed exactly (repr) and ranks deliberately meaningless."""
    run_path, qrels_path = tmp_path / "run.txt", tmp_path / "qrels.txt"
    with open(run_path, "w") as fh:
        for qid, scores in run.items():
            for i, (doc, score) in enumerate(scores.items()):
                fh.write(f"{qid} Q0 {doc} {i % 3} {score!r} sys\n")
    write_qrels(qrels_path, qrels)
    return run_path, qrels_path


def reversed_docids(run: dict, qrels: dict) -> tuple[dict, dict]:
    """Rename docs so string order flips: ir_measures' msmarco provider (its only RR@k) breaks ties by docid
    ascending, trec_eval by docid descending; after the renaming both mean the same ranking."""
    docs = sorted({d for r in run.values() for d in r} | {d for j in qrels.values() for d in j})
    new = {d: f"x{len(docs) - i:06d}" for i, d in enumerate(docs)}
    return ({q: {new[d]: s for d, s in r.items()} for q, r in run.items()},
            {q: {new[d]: g for d, g in j.items()} for q, j in qrels.items()})


@pytest.mark.parametrize("seed", range(6))
def test_parity_with_trec_eval_via_ir_measures(tmp_path, seed):
    run, qrels = random_case(seed)
    run_path, qrels_path = write_files(tmp_path, run, qrels)
    ev = evaluate_files(run_path, qrels_path, ",".join(PYTREC_EVAL))

    # one measure per call: given together, ir_measures' pytrec_eval provider may apply nDCG(gains=…) to the
    # plain nDCG measures too, depending on set order (PYTHONHASHSEED), so the oracle itself was flaky
    oracle_means: dict = {}
    oracle_pq: dict = {}
    for measure in PYTREC_EVAL.values():
        oracle_means.update(ir_measures.calc_aggregate([measure], qrels, run))
        for m in ir_measures.iter_calc([measure], qrels, run):
            oracle_pq.setdefault(m.query_id, {})[m.measure] = m.value
    assert set(ev.per_query) == set(oracle_pq) == set(qrels)  # every qrels query counted, run-only ignored
    for name, measure in PYTREC_EVAL.items():
        assert ev.means[name] == pytest.approx(oracle_means[measure], abs=1e-12), name
        for qid in qrels:
            assert ev.per_query[qid][name] == pytest.approx(oracle_pq[qid][measure], abs=1e-12), (name, qid)


@pytest.mark.parametrize("seed", range(6))
def test_mrr_at_k_parity(tmp_path, seed):
    run, qrels = random_case(seed)
    ours = evaluate(run, qrels, "mrr@1,mrr@3,mrr@10")
    rrun, rqrels = reversed_docids(run, qrels)
    oracle = ir_measures.calc_aggregate([RR @ 1, RR @ 3, RR @ 10], rqrels, rrun)
    for k in (1, 3, 10):
        assert ours.means[f"mrr@{k}"] == pytest.approx(oracle[RR @ k], abs=1e-12)


def test_eventa_parts_parity_over_answered_queries():
    rng = random.Random(7)
    images = [f"img{i}" for i in range(40)]
    qrels = {f"c{i}": {rng.choice(images): 1} for i in range(50)}  # one correct image per caption
    run = {q: {im: rng.choice([1.0, 2.0, 3.0, rng.random()]) for im in rng.sample(images, 15)}
           for q in list(qrels)[:40]}  # 40 of 50 captions answered
    ev = evaluate(run, qrels, "eventa")
    answered = {q: j for q, j in qrels.items() if q in run}
    oracle = ir_measures.calc_aggregate([AP @ 10, R @ 1, R @ 5, R @ 10], answered, run)
    oracle.update(ir_measures.calc_aggregate([RR @ 10], *reversed(reversed_docids(run, answered))))
    expected = {"eventa.map": oracle[AP @ 10], "eventa.mrr": oracle[RR @ 10], "eventa.r@1": oracle[R @ 1],
                "eventa.r@5": oracle[R @ 5], "eventa.r@10": oracle[R @ 10]}
    for part, value in expected.items():
        assert ev.means[part] == pytest.approx(value, abs=1e-12), part
    assert ev.means["eventa.map"] == pytest.approx(ev.means["eventa.mrr"])  # one correct image: AP = RR
    assert ev.means["eventa.coverage"] == 0.8
    assert ev.means["eventa"] == pytest.approx(0.8 * eventa_overall(expected), abs=1e-12)


def test_eventa_overall_by_hand():
    # 4 captions; the run ranks the correct image 1st, 4th, 12th, and skips one: Overall = 3/4 × 4/9 = 1/3
    qrels = {"a": {"A": 1}, "b": {"B": 1}, "c": {"C": 1}, "d": {"D": 1}}
    far = {f"x{i}": 100.0 - i for i in range(11)}
    run = {"a": {"A": 9.0, "x": 1.0}, "b": {"p": 4.0, "q": 3.0, "r": 2.0, "B": 1.0}, "c": {**far, "C": 0.0}}
    ev = evaluate(run, qrels, "eventa,mrr@10")
    assert ev.columns == ["eventa", *EVENTA_WEIGHTS, "eventa.coverage", "mrr@10"]
    assert ev.means["eventa.map"] == pytest.approx(5 / 12)
    assert ev.means["eventa.r@1"] == pytest.approx(1 / 3)
    assert ev.means["eventa.r@5"] == pytest.approx(2 / 3)
    assert ev.means["eventa"] == pytest.approx(1 / 3, abs=1e-8)
    assert ev.means["mrr@10"] == pytest.approx(1.25 / 4)  # ordinary metrics count the skipped caption as 0
    assert ev.missing == ["d"]


def test_missing_query_scores_zero_and_unjudged_run_query_is_ignored(capsys):
    qrels = {"1": {"a": 1}, "2": {"b": 2}}
    run = {"1": {"a": 1.0}, "9": {"a": 1.0}}
    ev = evaluate(run, qrels, "map,ndcg@10")
    assert ev.means == {"map": 0.5, "ndcg@10": 0.5}
    assert ev.per_query["2"] == {"map": 0.0, "ndcg@10": 0.0}
    assert ev.ignored == ["9"]
    assert "1 run query is not in the qrels and ignored: 9" in capsys.readouterr().err


def test_groups_add_a_mean_per_group(tmp_path, capsys):
    qrels = {"1": {"a": 1}, "2": {"a": 1}, "3": {"a": 1}, "4": {"a": 1}}
    run = {"1": {"a": 1.0}, "2": {"a": 1.0, "b": 2.0}, "3": {"b": 1.0}}
    groups_file = tmp_path / "groups.tsv"
    groups_file.write_text("qid\tgroup\n1\thigh\n2\thigh\n3\tlow\n99\tlow\n")
    groups = read_groups(groups_file)
    assert groups == {"1": "high", "2": "high", "3": "low", "99": "low"}
    ev = evaluate(run, qrels, "mrr", groups)
    assert ev.means["mrr"] == pytest.approx(1.5 / 4)
    assert ev.groups == {"high": {"mrr": 0.75}, "low": {"mrr": 0.0}}
    assert ev.group_sizes == {"high": 2, "low": 1}
    assert "1 qrels query has no group: 4" in capsys.readouterr().err
    table = format_table(ev)
    assert table.splitlines()[0].split() == ["metric", "all", "(4)", "high", "(2)", "low", "(1)"]
    assert table.splitlines()[1].split() == ["mrr", "0.3750", "0.7500", "0.0000"]
    assert to_json(ev)["groups"] == {"high": {"mrr": 0.75}, "low": {"mrr": 0.0}}


def test_read_groups_rejects_conflicts(tmp_path):
    bad = tmp_path / "g.tsv"
    bad.write_text("1\thigh\n1\tlow\n")
    from engine.errors import EngineError
    with pytest.raises(EngineError, match=r"g.tsv:2: query '1' is in group 'low' here and in 'high' on line 1"):
        read_groups(bad)


# ---------------------------------------------------------------- the command


@pytest.fixture()
def small_files(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("1 0 a 2\n1 0 b 0\n2 0 c 1\n")
    run = tmp_path / "run.txt"
    run.write_text("1 Q0 b 1 2.5 sys\n1 Q0 a 2 1.5 sys\n")
    return run, qrels


def test_cli_eval_json_and_per_query(run_cli, monkeypatch, capsys, small_files):
    run, qrels = small_files
    code, out, _ = run_cli("eval", run, qrels, "--metrics", "mrr,p@1,map", "--json",
                           "--per-query")
    assert code == 0
    got = json.loads(out)
    assert got["mrr"] == 0.25 and got["p@1"] == 0.0 and got["map"] == 0.25
    assert got["per_query"] == {"1": {"mrr": 0.5, "p@1": 0.0, "map": 0.5}, "2": {"mrr": 0.0, "p@1": 0.0, "map": 0.0}}


def test_cli_eval_table_with_default_metrics(run_cli, monkeypatch, capsys, small_files):
    run, qrels = small_files
    code, out, _ = run_cli("eval", run, qrels, "--per-query")
    assert code == 0
    lines = out.splitlines()
    assert [ln.split()[0] for ln in lines[1:6]] == ["ndcg@10", "map", "mrr", "recall@10", "p@10"]
    assert lines[3].split() == ["mrr", "0.2500"]
    assert lines[7].split() == ["qid", "ndcg@10", "map", "mrr", "recall@10", "p@10"]


@pytest.mark.parametrize("run_text,qrels_text,message", [
    ("1 Q0 a 1 1.0 sys\n", "1 0 a 2\n2 0 c\n", "qrels.txt:2: expected 4 fields `qid 0 docid rel`, found 3"),
    ("1 Q0 a 1 1.0 sys\n1 Q0 b 2 nan sys\n", "1 0 a 2\n", "run.txt:2: score 'nan' is not a finite number"),
    ("1 Q0 a 1 1.0 sys\n1 Q0 b 2 high sys\n", "1 0 a 2\n", "run.txt:2: score 'high' is not a number"),
    ("", "1 0 a 2\n", "run.txt: empty run"),
    ("1 Q0 a 1 1.0 sys\n", "", "qrels.txt: empty qrels"),
    ("1 0 a 2\n", "1 0 a 2\n", "run.txt:1: expected 6 fields `qid Q0 docid rank score runid`, found 4 "
                               "(is this a qrels file?)"),
    ("1 Q0 a 1 1.0 sys\n", "1 0 a high\n", "qrels.txt:1: relevance 'high' is not an integer"),
])
def test_cli_eval_bad_input_is_one_line_naming_file_and_line(run_cli, monkeypatch, capsys, tmp_path, run_text, qrels_text,
                                                             message):
    (tmp_path / "run.txt").write_text(run_text)
    (tmp_path / "qrels.txt").write_text(qrels_text)
    code, out, err = run_cli("eval", tmp_path / "run.txt", tmp_path / "qrels.txt")
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_cli_eval_profile_picks_the_benchmarks_metrics(run_cli, monkeypatch, capsys, small_files):
    run, qrels = small_files
    # NTCIR rejects a run that misses a topic or a candidate (trec_eval would score the topic 0)
    code, _, err = run_cli("eval", run, qrels, "--profile", "ntcir-a")
    assert code == 2 and f"{run}:1: run rejected: sys topicID 1 lacks 1 candidate model: c." in err
    full = run.with_name("full.run")
    full.write_text("1 Q0 b 1 2.5 sys\n1 Q0 a 2 1.5 sys\n1 Q0 c 3 0.5 sys\n"
                    "2 Q0 a 1 0.9 sys\n2 Q0 b 2 0.8 sys\n2 Q0 c 3 0.7 sys\n")
    code, out, _ = run_cli("eval", full, qrels, "--profile", "ntcir-a", "--json")
    assert code == 0 and list(json.loads(out)["sys"]) == ["ndcg_exp@1", "ndcg_exp@3", "ndcg_exp@5"]
    # query 1 ranks b (grade 0) above a (grade 2): DCG@3 = 3/log2(3) of the ideal 3; query 2 has c (grade 1)
    # third: 1/2 of the ideal 1
    assert json.loads(out)["sys"]["ndcg_exp@3"] == pytest.approx((1 / math.log2(3) + 1 / 2) / 2)
    code, out, _ = run_cli("eval", run, qrels, "--profile", "dsebench", "--metrics", "mrr",
                           "--json")
    assert code == 0 and json.loads(out) == {"mrr": 0.25}  # --metrics overrides the profile
    code, _, err = run_cli("eval", run, qrels, "--profile", "msmarco")
    assert code == 2 and "unknown scoring profile 'msmarco'; known: trec, eventa" in err


def test_cli_eval_bad_metric_and_missing_file(run_cli, monkeypatch, capsys, small_files, tmp_path):
    run, qrels = small_files
    code, _, err = run_cli("eval", run, qrels, "--metrics", "ndcg@10,bleu")
    assert code == 2 and "unknown metric 'bleu'" in err
    code, _, err = run_cli("eval", tmp_path / "nope.txt", qrels)
    assert code == 2 and "nope.txt: no such file" in err and "Traceback" not in err


def test_read_run_lists_how_many_more_problems(tmp_path):
    from engine.errors import EngineError
    p = tmp_path / "r.txt"
    p.write_text("1 Q0 a 1 1.0 s\n\n1 Q0 a 2 0.5 s\n1 Q0 b 3 inf s\n")
    with pytest.raises(EngineError) as exc:
        read_run(p)
    assert str(exc.value) == (f"{p}:2: blank line (and 2 more problems; `engine validate run {p}` lists them)")
    q = tmp_path / "q.txt"
    q.write_text("1 0 a 1\n1 0 a 2\n")
    with pytest.raises(EngineError, match=r"q.txt:2: doc 'a' judged twice for query '1' \(first on line 1\)"):
        read_qrels(q)
