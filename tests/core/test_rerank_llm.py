"""`llm:` pointwise rerankers: the log-odds of "yes" against an independent transformers computation of the
published Qwen3-Reranker format (a tiny random Qwen3 and a word-level tokenizer built in conftest, loaded by
path), batched and padded; the chat and FILE templates; truncation of the document alone; options and bad
specs refused in one line before any model loads."""
from __future__ import annotations

import numpy as np
import pytest
from fixtures.llm_reference import PUBLISHED, reference_log_odds


DOCS = [f"document {i} about {w}" for i, w in enumerate(
    ["cats", "dogs", "boats", "trains", "cheese", "rain", "music", "chess", "bread", "rivers", "stars", "maps"])]
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
def test_order_equals_the_published_format_computed_independently(tiny_lm):
    from engine.core.ranking.rerankers.spec import load_reranker
    query = "a question about animals"
    reranker = load_reranker(f"llm:{tiny_lm}", template="qwen3-reranker", batch_size=3)
    got = reranker.score(query, DOCS)
    ref = reference_log_odds(tiny_lm, [PUBLISHED.format(instruction=INSTRUCTION, query=query, doc=d) for d in DOCS])
    assert np.ptp(ref) > 1e-3  # the documents are told apart, so the order below means something
    np.testing.assert_allclose(got, ref, atol=2e-4, rtol=1e-4)
    assert list(np.argsort(-got, kind="stable")) == list(np.argsort(-ref, kind="stable"))


def test_chat_template_and_file_template(tiny_lm, tmp_path):
    from transformers import AutoTokenizer

    from engine.core.ranking.rerankers.spec import load_reranker
    query, instruction = "food and drink", "Find the document about a meal"
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    judge = PUBLISHED.split("system\n")[1].split("<|im_end|>")[0]
    chat = [tok.apply_chat_template([{"role": "system", "content": judge}, {"role": "user", "content":
            f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {d}"}], tokenize=False,
            add_generation_prompt=True) for d in DOCS]
    got = load_reranker(f"llm:{tiny_lm}", instruction=instruction).score(query, DOCS)  # chat: the default here
    np.testing.assert_allclose(got, reference_log_odds(tiny_lm, chat), atol=2e-4, rtol=1e-4)
    template = tmp_path / "t.txt"
    template.write_text("{instruction} : the question is {query} and the document is {document} yes or no")
    got = load_reranker(f"llm:{tiny_lm}", template=str(template), instruction="title").score(query, DOCS)
    ref = reference_log_odds(tiny_lm, [f"title : the question is {query} and the document is {d} yes or no"
                                       for d in DOCS])
    np.testing.assert_allclose(got, ref, atol=2e-4, rtol=1e-4)


def test_max_length_cuts_the_document_only(tiny_lm):
    from transformers import AutoTokenizer

    from engine.core.ranking.rerankers.spec import load_reranker
    query = "a question about water and rivers"
    long_doc = " ".join(["music"] * 30 + ["cats"] * 30)
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    whole = PUBLISHED.format(instruction=INSTRUCTION, query=query, doc="")
    fixed = len(tok(whole, add_special_tokens=False)["input_ids"])
    reranker = load_reranker(f"llm:{tiny_lm}", template="qwen3-reranker", max_length=fixed + 7)
    scorer = reranker.info["scorer"]
    ids = scorer.encode(query, [long_doc, "cats"])
    assert len(ids[0]) == fixed + 7 and len(ids[1]) == fixed + 1
    text = tok.decode(ids[0])
    assert query.split()[-1] in text and text.count("music") == 7 and "cats" not in text
    tail = tok.decode(tok(PUBLISHED.split("{doc}")[1], add_special_tokens=False)["input_ids"])
    assert text.endswith(tail)  # the tail (the turn's end, the opened answer) is kept whole
    cut = PUBLISHED.format(instruction=INSTRUCTION, query=query, doc=" ".join(["music"] * 7))
    np.testing.assert_allclose(reranker.score(query, [long_doc]), reference_log_odds(tiny_lm, [cut]), atol=2e-4)


def test_default_template_follows_the_model_name():
    from engine.core.ranking.rerankers.prompts import default_template
    assert default_template("Qwen/Qwen3-Reranker-0.6B") == "qwen3-reranker"
    assert default_template("/models/llama-3-8b-instruct") == "chat"


def test_search_cli_passes_template_and_instruction(run_cli, tiny_lm, tmp_path, monkeypatch, capsys):
    import csv

    from engine.core.collection import Collection
    src = tmp_path / "docs.csv"
    with src.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text"])
        w.writerows([f"d{i}", d] for i, d in enumerate(DOCS))
    col = Collection.build("docs", texts=src, root=tmp_path / "idx", batch_size=8)
    query = "travel by water"
    first = col.search(text=query, k=len(DOCS))
    ref = reference_log_odds(tiny_lm, [PUBLISHED.format(instruction="title", query=query, doc=h.meta["text"])
                                       for h in first])
    want = [first[i].id for i in np.argsort(-ref, kind="stable")][:4]
    code, out, err = run_cli("search", "docs", query, "-k", "4", "--json", "--rerank",
                             f"llm:{tiny_lm}", "--rerank-depth", str(len(DOCS)), "--rerank-template",
                             "qwen3-reranker", "--rerank-instruction", "title", "--root", tmp_path / "idx", "-q")
    assert code == 0, err
    import json
    assert [h["id"] for h in json.loads(out)["hits"]] == want


@pytest.mark.parametrize("args, message", [
    (["--rerank", "llm:/no/such/folder"], "no such folder"),
    (["--rerank", "llm:http://127.0.0.1:9/v1"], "#MODEL"),
    (["--rerank", "llm:x", "--rerank-template", "nope.txt"], "no such file"),
    (["--rerank", "cross:x", "--rerank-template", "chat"], "--rerank-template goes with"),
    (["--rerank", "llm:x", "--rerank-rounds", "3"], "--rerank-rounds goes with"),
    (["--rerank", "llm-list:x", "--rerank-rounds", "0"], "--rerank-rounds must be"),
    (["--rerank", "llm:x", "--rerank-instruction", " "], "--rerank-instruction must be"),
    (["--rerank-template", "chat"], "goes with --rerank"),
])
def test_bad_llm_options_are_one_line_before_any_model_loads(run_cli, args, message, tmp_path, monkeypatch, capsys):
    """No collection exists here: each is refused before anything is opened or loaded."""
    code, out, err = run_cli("search", "docs", "cats", *args, "--root", tmp_path / "idx")
    text = (out + err).strip()
    assert code == 2 and message in text and "Traceback" not in text and len(text.splitlines()) <= 2, text


def test_template_file_must_hold_query_and_document(tmp_path):
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.errors import EngineError
    bad = tmp_path / "t.txt"
    bad.write_text("{query} only")
    with pytest.raises(EngineError, match="exactly once"):
        RerankerSpec.parse("llm:x", template=str(bad))


def test_loaded_reranker_is_shared_by_spec_and_options(tiny_lm):
    from engine.core.ranking.rerankers.spec import RerankerSpec
    a = RerankerSpec.parse(f"llm:{tiny_lm}", instruction="one").load()
    assert RerankerSpec.parse(f"llm:{tiny_lm}", instruction="one").load() is a
    assert RerankerSpec.parse(f"llm:{tiny_lm}", instruction="two").load() is not a


@pytest.fixture()
def llm_docs(tmp_path):
    import csv

    from engine.core.collection import Collection
    src = tmp_path / "docs.csv"
    with src.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text"])
        w.writerows([f"d{i}", d] for i, d in enumerate(DOCS))
    return Collection.build("docs", texts=src, root=tmp_path / "idx", batch_size=8)


def test_pipeline_rerank_stage_passes_its_options_to_the_loader(tiny_lm, llm_docs, tmp_path, monkeypatch):
    """`rerank("llm:DIR", depth=…, template=…, instruction=…)`: the options reach `llm_reranker` as keyword
    arguments, and the order is the published format's with that instruction, computed independently."""
    import engine.core.ranking.rerankers.llm as llm
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.run import run_pipeline
    seen = []
    real = llm.llm_reranker
    monkeypatch.setattr(llm, "llm_reranker", lambda spec: seen.append((spec.arg, spec.kwargs)) or real(spec))
    query = "cats and dogs"
    text = (f'retrieve("docs", mode="dense", k=12) >> rerank("llm:{tiny_lm}", depth=12, template="qwen3-reranker", '
            'instruction="Find the document about a pet") % 5')
    run = run_pipeline(parse_pipeline(text), [Query("q1", query)], Context(root=tmp_path / "idx"))
    assert seen == [(str(tiny_lm), {"template": "qwen3-reranker", "instruction": "Find the document about a pet"})]
    first = llm_docs.search(text=query, k=12)
    ref = reference_log_odds(tiny_lm, [PUBLISHED.format(instruction="Find the document about a pet", query=query,
                                                        doc=h.meta["text"]) for h in first])
    assert list(run["q1"].ids) == [first[i].id for i in np.argsort(-ref, kind="stable")][:5]
    text = f'rerank("llm:{tiny_lm}", depth=20, template="chat", instruction="Find a pet")'
    run_pipeline(parse_pipeline(f'retrieve("docs", k=20) >> {text}'), [Query("q1", query)],
                 Context(root=tmp_path / "idx"))
    assert seen[-1] == (str(tiny_lm), {"template": "chat", "instruction": "Find a pet"})


@pytest.mark.parametrize("stage, message", [
    ('rerank("cross:x", depth=5, template="chat")', "template goes with a llm: reranker, not cross:"),
    ('rerank("llm:x", depth=5, rounds=2)', "rounds goes with a llm-list: reranker"),
    ('rerank("llm-list:x", depth=5, rounds=0)', "rounds must be a whole number of at least 1, not 0"),
    ('rerank("llm:x", depth=5, temperature=2)', "temperature: no reranker takes this option"),
])
def test_pipeline_rerank_options_are_checked_when_parsed(stage, message):
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.errors import EngineError
    with pytest.raises(EngineError, match=message) as err:
        parse_pipeline(f'retrieve("docs", k=5) >> {stage}')
    assert "\n" not in str(err.value)


def test_task_pipelines_tell_an_llm_reranker_their_instruction():
    """EVENTA and DSE pass their own instruction to kinds that take one, and nothing to a cross-encoder."""
    from dataclasses import replace

    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.tasks.dse.stages import INSTRUCTION as DSE, default_pipeline
    from engine.tasks.eventa.rank import RankParams
    from engine.tasks.eventa.stages import RERANK_INSTRUCTION as EVENTA, parts
    assert f'instruction="{DSE}"' in default_pipeline(rerank="llm:x")
    assert "instruction" not in default_pipeline(rerank="cross:x")
    reranked = parts(replace(RankParams(), rerank="llm-list:x"))["_reranked"]
    assert f'instruction="{EVENTA}"' in reranked
    parse_pipeline(reranked)  # the options are ones the kind takes
    assert "instruction" not in parts(replace(RankParams(), rerank="cross:x"))["_reranked"]
