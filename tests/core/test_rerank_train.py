"""`engine rerank train`: a folder `cross:DIR` loads, scores equal to `CrossEncoder.predict` of that folder,
a held-out gain on a planted pairs file (never fitted on), every bad input one line before any model loads."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fixtures.planted_pairs import planted_pairs, vocab_words  # noqa: F401



def test_train_writes_a_folder_cross_loads(run_cli, tiny_cross, tmp_path, monkeypatch, capsys):
    import torch
    from sentence_transformers import CrossEncoder

    from engine.core.ranking.rerankers.spec import load_reranker
    rows = planted_pairs(tmp_path / "pairs.csv", 20)
    out = tmp_path / "ce"
    code, o, err = run_cli("rerank", "train", "--pairs", tmp_path / "pairs.csv", "--base",
                           tiny_cross, "--out", out, "--epochs", "1", "--lr", "0.001", "--batch-size", "4",
                           "--device", "cpu")
    assert code == 0, err
    assert "held-out MRR" in err and f"cross:{out}" in err
    report = json.loads((out / "rerank-train.json").read_text())
    # the guard: BM25 finds each planted word's document; a random tiny model does not: warned, numbers last
    assert report["held_out_mrr_first_stage"] == 1.0 and report["beats_first_stage"] is False
    assert report["fresh_head"] is False  # the tiny model was saved with its head: trained at --lr
    last = err.strip().splitlines()[-1]
    assert "BM25 1.000" in last and f"→ {report['held_out_mrr_after']:.3f}" in last, last
    assert "warning:" in err and "not above BM25's 1.000" in err
    assert report["queries_fitted"] + report["queries_held_out"] == 20 and report["queries_held_out"] >= 1
    assert report["held_out_mrr_after"] >= report["held_out_mrr_before"]  # the best epoch (0: the base) is kept
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ce")]  # no temporary folder left
    pairs = [(q, d) for q, d in rows[:6]]
    got = load_reranker(f"cross:{out}").score(pairs[0][0], [d for _, d in pairs])
    want = CrossEncoder(str(out), device="cpu").predict([(pairs[0][0], d) for _, d in pairs],
                                                        activation_fn=torch.nn.Identity())  # raw logits
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # `engine rerank RUN …` (the group's default command) still works beside `train`
    (tmp_path / "q.tsv").write_text(f"q1\t{rows[0][0]}\n")
    (tmp_path / "docs.tsv").write_text("id\ttext\n" + "".join(f"d{i}\t{d}\n" for i, (_, d) in enumerate(rows)))
    (tmp_path / "a.run").write_text("".join(f"q1 Q0 d{i} {i + 1} {20 - i} x\n" for i in range(5)))
    code, o, err = run_cli("rerank", tmp_path / "a.run", "--queries", tmp_path / "q.tsv",
                           "--docs", tmp_path / "docs.tsv", "--model", f"cross:{out}", "--depth", "5", "--out",
                           tmp_path / "b.run")
    assert code == 0, err and (tmp_path / "b.run").read_text().count("\n") == 5


@pytest.mark.slow
def test_training_improves_held_out_ranking(tmp_path):
    """From the installed MiniLM (a bare encoder: a fresh head, so ranking starts at chance), training with the
    default rates (--lr 1e-4, --head-lr 1e-3) on the planted pairs ranks the held-out queries' documents (never
    fitted) clearly better than the base. (A tiny random-weight BERT does not learn a query–document interaction
    in a few CPU epochs: measured.)"""
    from engine.core.ranking.rerankers.train import TrainOptions, train_cross_encoder
    planted_pairs(tmp_path / "pairs.csv", 60)
    r = train_cross_encoder(tmp_path / "pairs.csv", "all-MiniLM-L6-v2", tmp_path / "ce",
                            TrainOptions(epochs=4, holdout=0.25, batch_size=4, max_length=32))
    assert r["queries_held_out"] == 15 and r["fresh_head"]
    # measured at lr 1e-4 (seed 0, 2 epochs, head at 1e-4): 0.083 → 0.271 among 20 candidates (chance ≈ 0.18)
    assert r["held_out_mrr_after"] > r["held_out_mrr_before"] + 0.15 and r["best_epoch"] >= 1
    assert r["held_out_mrr_first_stage"] == 1.0 and not r["beats_first_stage"]  # BM25 finds a planted word


def good_args(tmp_path: Path, tiny: Path) -> dict:
    planted_pairs(tmp_path / "pairs.csv", 10)
    return {"--pairs": tmp_path / "pairs.csv", "--base": tiny, "--out": tmp_path / "ce"}


@pytest.mark.parametrize("change, message", [
    ({"--lr": "0"}, "--lr must be"),
    ({"--lr": "0.5"}, "--lr must be"),
    ({"--head-lr": "0"}, "--head-lr must be"),
    ({"--head-lr": "1"}, "--head-lr must be"),
    ({"--head-lr": "nan"}, "--head-lr"),
    ({"--epochs": "0"}, "--epochs must be"),
    ({"--holdout": "0.9"}, "--holdout must be"),
    ({"--batch-size": "0"}, "--batch-size must be"),
    ({"--batch-size": "auto"}, "--batch-size"),
    ({"--negatives": "64"}, "--negatives must be"),
    ({"--seed": "-1"}, "--seed must be"),
    ({"--base": "/no/such/model"}, "not a model folder"),
    ({"pairs": "text,image\na,b.jpg\n"}, "b.jpg not found"),
    ({"pairs": "query,doc\na,b\n"}, "needs the columns"),
    ({"pairs": "query,document\na,\n"}, "pairs.csv:2: empty document"),
    ({"pairs": "query,document\n" + "".join(f"q,d{i}\n" for i in range(5))}, "queries left to fit"),
    ({"out": "full"}, "not empty"),
])
def test_train_bad_input_is_one_line_before_any_model(run_cli, change, message, tiny_cross, tmp_path, monkeypatch,
                                                      capsys):
    import engine.core.ranking.rerankers.train as train
    monkeypatch.setattr(train, "load_base", lambda *a: pytest.fail("a model loaded before the input was checked"))
    args = good_args(tmp_path, tiny_cross)
    if "pairs" in change:
        (tmp_path / "pairs.csv").write_text(change["pairs"])
    if change.get("out") == "full":
        (tmp_path / "ce").mkdir()
        (tmp_path / "ce" / "keep.txt").write_text("mine")
    args.update({k: v for k, v in change.items() if k.startswith("--")})
    code, out, err = run_cli("rerank", "train", *[x for kv in args.items() for x in kv])
    text = (out + err).strip()
    assert code != 0 and message in text and len(text.splitlines()) <= 2 and "Traceback" not in text, text
    if change.get("out") == "full":
        assert (tmp_path / "ce" / "keep.txt").read_text() == "mine"


def test_reciprocal_rank_is_its_expectation_over_tied_orders():
    """Ties are broken by no listing order: the mean of 1/rank over every order of the tied candidates."""
    from itertools import permutations

    from engine.core.ranking.rerankers.train import reciprocal_rank
    rng = np.random.default_rng(0)
    for _ in range(30):
        scores = rng.integers(0, 3, 6).astype(float)
        rel = rng.random(6) < 0.3
        rel[rng.integers(6)] = True
        want = np.mean([1.0 / (1 + next(r for r, i in enumerate(sorted(perm, key=lambda i: -scores[i])) if rel[i]))
                        for perm in permutations(range(6))])
        assert reciprocal_rank(scores, rel) == pytest.approx(want)


def test_fresh_head_gets_its_own_learning_rate(tiny_cross):
    """A bare encoder's added head trains at --head-lr, the encoder at --lr; a saved head is not fresh."""
    from transformers import BertConfig, BertForSequenceClassification

    from engine.core.ranking.rerankers.train import TrainOptions, param_groups
    net = BertForSequenceClassification(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1,
                                                   num_attention_heads=2, intermediate_size=16, num_labels=1))
    net.config.architectures = ["BertModel"]  # as loaded from a bare encoder's folder
    groups, fresh = param_groups(net, TrainOptions(lr=1e-5, head_lr=1e-2))
    assert fresh and [g["lr"] for g in groups] == [1e-5, 1e-2]
    assert {id(p) for p in groups[1]["params"]} == {id(net.classifier.weight), id(net.classifier.bias)}
    assert sum(len(g["params"]) for g in groups) == len(list(net.parameters()))
    net.config.architectures = ["BertForSequenceClassification"]
    groups, fresh = param_groups(net, TrainOptions(lr=1e-5, head_lr=1e-2))
    assert not fresh and [g["lr"] for g in groups] == [1e-5]
