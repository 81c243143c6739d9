"""Prefix sharing of `llm:` pointwise rerankers: each query's head run once and its key/value cache reused for
its candidates gives the scores of transformers' own forward pass over each whole prompt (tiny random Qwen3 and
Llama models, several queries, documents of different lengths, batches that mix queries); the yes − no row
reading equals the vocabulary projection's; a template with the document before the query falls back to whole
prompts and says so once."""
from __future__ import annotations

import numpy as np
import pytest

from fixtures.llm_reference import PUBLISHED, reference_log_odds

QUERIES = ["a question about animals", "food and drink", "travel by water with boats and trains on rivers", "maps"]
DOCS = [["cats", "dogs and cats in the rain", "music"],
        ["cheese and bread", "a", "the document is about rivers stars maps and a photo of a caption", "drink"],
        ["boats", "trains to the water", "stars", "chess", "title of a photo"],
        ["maps of rivers", "image"]]
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def prompts() -> list[str]:
    return [PUBLISHED.format(instruction=INSTRUCTION, query=q, doc=d) for q, docs in zip(QUERIES, DOCS) for d in docs]


@pytest.mark.parametrize("model", ["tiny_lm", "tiny_llama"])
@pytest.mark.parametrize("batch_size", [2, 5, 64])
def test_shared_prefix_scores_equal_the_whole_forward_pass(model, batch_size, request):
    from engine.core.ranking.rerankers.spec import load_reranker
    folder = request.getfixturevalue(model)
    reranker = load_reranker(f"llm:{folder}", template="qwen3-reranker", batch_size=batch_size)
    lm = reranker.info["scorer"]
    assert lm.sharing is not None and lm.sharing.row is not None  # shared, read through the yes − no row
    got = reranker.score_batch([(q, d, "text") for q, d in zip(QUERIES, DOCS)])
    ref = reference_log_odds(folder, prompts())
    flat = np.concatenate(got)
    assert np.ptp(ref) > 1e-3
    np.testing.assert_allclose(flat, ref, atol=1e-4, rtol=0)
    plain = lm.log_odds([s for q, d in zip(QUERIES, DOCS) for s in lm.encode(q, d)])
    np.testing.assert_allclose(flat, plain, atol=1e-4, rtol=0)
    one = np.concatenate([reranker.score(q, d) for q, d in zip(QUERIES, DOCS)])  # one query at a time
    np.testing.assert_allclose(one, flat, atol=1e-4, rtol=0)


def test_mixed_batches_hold_several_queries_and_the_head_runs_once_per_query(tiny_lm, monkeypatch):
    from engine.core.ranking.rerankers.spec import load_reranker
    lm = load_reranker(f"llm:{tiny_lm}", template="qwen3-reranker", batch_size=4).info["scorer"]
    heads, batches = [], []
    head_cache, batch_log_odds = lm.sharing.head_cache, lm.sharing.batch_log_odds
    monkeypatch.setattr(lm.sharing, "head_cache", lambda h: heads.append(len(h)) or head_cache(h))
    monkeypatch.setattr(lm.sharing, "batch_log_odds",
                        lambda rows, *a: batches.append({g for g, _ in rows}) or batch_log_odds(rows, *a))
    lm.score_queries(list(zip(QUERIES, DOCS)))
    assert len(heads) == len(QUERIES) and len(set(heads)) > 1  # heads of different lengths, each run once
    assert any(len(b) > 1 for b in batches)  # a batch mixes queries
    assert len(batches) == -(-sum(len(d) for d in DOCS) // 4)  # the candidates in batches of 4, across queries


def test_row_reading_equals_the_vocabulary_projection(tiny_lm):
    from engine.core.ranking.rerankers.spec import load_reranker
    lm = load_reranker(f"llm:{tiny_lm}", template="qwen3-reranker", batch_size=3).info["scorer"]
    groups = [lm.parts(q, d) for q, d in zip(QUERIES, DOCS)]
    by_row = lm.sharing.log_odds(groups)
    row, lm.sharing.row = lm.sharing.row, None
    try:
        by_logits = lm.sharing.log_odds(groups)
    finally:
        lm.sharing.row = row
    np.testing.assert_allclose(by_row, by_logits, atol=1e-5, rtol=0)


def test_document_before_query_runs_whole_prompts_and_says_so_once(tiny_lm, tmp_path, capsys):
    from engine.core.ranking.rerankers import llm
    from engine.core.ranking.rerankers.spec import load_reranker
    template = tmp_path / "doc-first.txt"
    template.write_text("the document is {document} and the question is {query} yes or no")
    llm.SAID.clear()
    for instruction in ("one", "two"):  # two loads of the same model and template: one line
        reranker = load_reranker(f"llm:{tiny_lm}", template=str(template), instruction=instruction)
        assert reranker.info["scorer"].sharing is None
    err = capsys.readouterr().err
    assert err.count("run whole") == 1 and "query after the document" in err
    got = np.concatenate(reranker.score_batch([(q, d, "text") for q, d in zip(QUERIES, DOCS)]))
    ref = reference_log_odds(tiny_lm, [f"the document is {d} and the question is {q} yes or no"
                                       for q, docs in zip(QUERIES, DOCS) for d in docs])
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)


def test_batches_by_token_budget_keep_the_scores_and_the_budget(tiny_lm, monkeypatch):
    from engine.core.ranking.rerankers.spec import load_reranker
    budget = 200
    reranker = load_reranker(f"llm:{tiny_lm}", template="qwen3-reranker", batch_tokens=budget)
    lm = reranker.info["scorer"]
    shapes = []
    batch_log_odds = lm.sharing.batch_log_odds

    def spy(rows, heads, lengths):
        shapes.append((len(rows), max(lengths[g] for g, _ in rows) + max(len(s) for _, s in rows)))
        return batch_log_odds(rows, heads, lengths)
    monkeypatch.setattr(lm.sharing, "batch_log_odds", spy)
    got = np.concatenate(reranker.score_batch([(q, d, "text") for q, d in zip(QUERIES, DOCS)]))
    np.testing.assert_allclose(got, reference_log_odds(tiny_lm, prompts()), atol=1e-4, rtol=0)
    assert sum(n for n, _ in shapes) == sum(len(d) for d in DOCS) and len(shapes) > 1
    assert all(n * width <= budget or n == 1 for n, width in shapes)
    plain = lm.batches(lm.encode(QUERIES[1], DOCS[1]))  # the whole-prompt path cuts by the same budget
    seqs = lm.encode(QUERIES[1], DOCS[1])
    assert all(len(b) * max(len(seqs[i]) for i in b) <= budget or len(b) == 1 for b in plain)


def test_batching_cut_fills_each_batch_up_to_the_budget():
    from engine.core.ranking.rerankers.llm_prefix import Batching
    widths = [(10, 30), (10, 20), (40, 5), (10, 5), (10, 5)]
    assert Batching(2).cut(range(5), widths) == [[0, 1], [2, 3], [4]]
    # 2 rows × (10 + 30) = 80 fit 140; a third widens the heads to 40: 3 × (40 + 30) > 140; then 3 × 45 fit
    assert Batching(99, tokens=140).cut(range(5), widths) == [[0, 1], [2, 3, 4]]
    assert Batching(99, tokens=1).cut(range(3), widths) == [[0], [1], [2]]  # one row each, however long


def test_batch_tokens_is_checked_before_any_model_loads():
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.errors import EngineError
    with pytest.raises(EngineError, match="batch_tokens"):
        RerankerSpec.parse("llm:x", batch_tokens=0)
    with pytest.raises(EngineError, match="batch_tokens goes with"):
        RerankerSpec.parse("cross:x", batch_tokens=512)


@pytest.mark.parametrize("args, message", [
    (["--rerank", "llm:x", "--rerank-batch-tokens", "0"], "--rerank-batch-tokens must be a whole number"),
    (["--rerank", "cross:x", "--rerank-batch-tokens", "512"], "--rerank-batch-tokens goes with a llm:"),
    (["--rerank-batch-tokens", "512"], "goes with --rerank"),
])
def test_bad_batch_tokens_flag_is_one_line(run_cli, args, message, tmp_path):
    code, out, err = run_cli("search", "docs", "cats", *args, "--root", tmp_path / "idx")
    text = (out + err).strip()
    assert code == 2 and message in text and "Traceback" not in text and len(text.splitlines()) <= 2, text


def test_rerank_command_takes_batch_tokens(run_cli, tiny_lm, tmp_path):
    from engine.io.runs import read_run, write_run
    docs = tmp_path / "docs.tsv"
    docs.write_text("id\ttext\n" + "".join(f"d{i}\t{d}\n" for i, d in enumerate(DOCS[1])))
    queries = tmp_path / "q.tsv"
    queries.write_text(f"q1\t{QUERIES[1]}\n")
    write_run(tmp_path / "a.run", {"q1": [(f"d{i}", 9.0 - i) for i in range(len(DOCS[1]))]}, "a")
    outs = []
    for extra in ([], ["--rerank-batch-tokens", "64"]):
        out = tmp_path / f"out{len(outs)}.run"
        code, _, err = run_cli("rerank", tmp_path / "a.run", "--queries", queries, "--docs", docs, "--model",
                               f"llm:{tiny_lm}", "--rerank-template", "qwen3-reranker", "--depth", "4",
                               "--out", out, "-q", *extra)
        assert code == 0, err
        outs.append(read_run(out)["q1"])
    assert sorted(outs[0], key=lambda d: -outs[0][d]) == sorted(outs[1], key=lambda d: -outs[1][d])
    ref = reference_log_odds(tiny_lm, [PUBLISHED.format(instruction=INSTRUCTION, query=QUERIES[1], doc=d)
                                       for d in DOCS[1]])
    assert sorted(outs[0], key=lambda d: -outs[0][d]) == [f"d{i}" for i in np.argsort(-ref, kind="stable")]


def test_bf16_prefix_sharing_runs_and_stays_near_the_whole_prompts(tiny_lm):
    """The GPU's dtype, on the CPU: a bf16 model shares prefixes (cache, row reading) and scores within bf16's
    precision of its own whole-prompt forward pass."""
    import torch

    from engine.core.ranking.rerankers.llm import PointwiseLM, load_causal_lm
    from engine.core.ranking.rerankers.prompts import QWEN3_RERANKER, Prompt
    model, tok = load_causal_lm(str(tiny_lm), "cpu", "bf16-test")
    lm = PointwiseLM(model.to(torch.bfloat16), tok, Prompt.from_template(QWEN3_RERANKER, INSTRUCTION), str(tiny_lm),
                     3, 1024)
    assert lm.sharing is not None and lm.sharing.row[1].dtype == torch.bfloat16
    shared = lm.score_queries(list(zip(QUERIES, DOCS)))
    whole = lm.log_odds([s for q, d in zip(QUERIES, DOCS) for s in lm.encode(q, d)])
    assert np.isfinite(shared).all()
    assert np.abs(shared - whole).max() <= 0.03 * max(1.0, float(np.abs(whole).max()))
