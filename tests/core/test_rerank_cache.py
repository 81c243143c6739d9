"""A reranker known by what computes it, and its scores kept per pair: fingerprints that follow a model's files
(and nothing else) without loading it; `rerank(…)` in a pipeline with a stage cache scoring only the pairs it
has not seen, equal to a fresh uncached run; a replaced model scored again; a served model's garbage answers
counted, said and never kept; a spec parsed once for a pipeline run end to end."""
from __future__ import annotations

import json
import shutil
import threading
from http.server import ThreadingHTTPServer

import numpy as np
import pytest
from fixtures.json_stub import JsonHandler

from engine.errors import EngineError

WORDS = ["river", "flood", "rain", "school", "bridge", "city", "storm", "team", "cup", "music", "bread", "stars"]


@pytest.fixture()
def docs(tmp_path, fake_encoder):
    """40 texts in a collection (the fake encoder: no model), and three queries."""
    from engine.core.collection import Collection
    rng = np.random.default_rng(0)
    src = tmp_path / "docs.csv"
    src.write_text("id,text\n" + "".join(f"d{i},{' '.join(rng.choice(WORDS, 6))} number {i}\n" for i in range(40)))
    Collection.build("docs", texts=src, root=tmp_path / "idx", batch_size=16)
    return tmp_path / "idx"


def queries(*texts: str):
    from engine.core.ranking.pipeline import Query
    return [Query(f"q{n}", t) for n, t in enumerate(texts, 1)]


QS = ("river flood", "school bridge", "storm and rain")


def rerank_stage(ctx, stage):
    """The rerank stage of a parsed pipeline `first >> rerank(…)` and what it reported."""
    rr = stage.second if stage.name == "then" else stage
    return rr, ctx.counts.get(id(rr), {}), ctx.degraded.get(id(rr), [])


def run(root, text, qs, cache=None):
    from engine.core.ranking.pipeline import Context
    from engine.core.ranking.pipeline.cache import StageCache
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.run import run_pipeline
    ctx = Context(root=root, cache=StageCache(cache) if cache is not None else None)
    stage = parse_pipeline(text)
    out = run_pipeline(stage, qs, ctx)
    return out, ctx, stage


def same(a, b) -> None:
    assert a.keys() == b.keys()
    for q in a:
        assert a[q].ids == b[q].ids
        np.testing.assert_allclose(a[q].scores, b[q].scores, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- fingerprints

def model_folder(path, weights: bytes = b"w" * 3_000_000):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text('{"model_type": "bert"}')
    (path / "model.safetensors").write_bytes(weights)
    return path


@pytest.mark.parametrize("kind", ["cross", "llm", "llm-list", "vlm", "embed"])
def test_fingerprint_follows_the_model_files_and_loads_nothing(kind, tmp_path, monkeypatch):
    import os

    from engine.core.ranking.rerankers import registry
    from engine.core.ranking.rerankers.fingerprint import fingerprint
    from engine.core.ranking.rerankers.spec import RerankerSpec
    monkeypatch.setattr(registry, "build", lambda spec: pytest.fail("a fingerprint loaded the model"))
    folder = model_folder(tmp_path / "model")
    spec = RerankerSpec.parse(f"{kind}:sbert:{folder}" if kind == "embed" else f"{kind}:{folder}")
    first = fingerprint(spec)
    (tmp_path / "elsewhere.bin").write_bytes(b"x")   # a file outside the model's folder
    os.utime(folder)                                  # the folder itself touched, its files not
    assert fingerprint(spec) == first
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes())         # the weights rewritten (a retrained model, same size)
    assert fingerprint(spec) != first
    second = fingerprint(spec)
    data = bytearray(weights.read_bytes())
    data[len(data) - 10] ^= 1                         # one byte of the last MiB changed, size and mtime kept
    stat = weights.stat()
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    from engine.core.ranking.rerankers import fingerprint as module
    module._HASHES.clear()                            # (another process: the hash is read again)
    assert fingerprint(spec) != second


def test_fingerprint_of_a_served_model_and_of_the_options(tmp_path):
    from engine.core.ranking.rerankers.fingerprint import fingerprint
    from engine.core.ranking.rerankers.spec import RerankerSpec
    fp = lambda text, **o: fingerprint(RerankerSpec.parse(text, **o))  # noqa: E731
    served = "llm:http://127.0.0.1:9/v1#judge-7b"
    assert fp(served) == fp(served)
    assert fp(served) != fp("llm:http://127.0.0.1:9/v1#judge-8b") != fp("llm:http://127.0.0.2:9/v1#judge-8b")
    assert fp(served) != fp(served, instruction="Find it") != fp(served, instruction="Find that")
    template = tmp_path / "t.txt"
    template.write_text("{query} {document}")
    a = fp(served, template=str(template))
    template.write_text("Q: {query} D: {document}")
    assert fp(served, template=str(template)) != a
    assert fp(served) != fp("llm-list:http://127.0.0.1:9/v1#judge-7b")
    import engine.version
    released = fp(served)
    engine_version, engine.version.__version__ = engine.version.__version__, "0.0.0-test"
    try:
        assert fp(served) != released            # another engine version: another fingerprint
    finally:
        engine.version.__version__ = engine_version


# ---------------------------------------------------------------- pair scores kept

@pytest.fixture()
def counted(monkeypatch):
    """How many (query, document) pairs the cross-encoder was asked to score."""
    from engine.core.ranking.rerankers import cross
    seen = [0]
    real = cross.relevance

    def relevance(model, pairs, batch_size):
        seen[0] += len(pairs)
        return real(model, pairs, batch_size)

    monkeypatch.setattr(cross, "relevance", relevance)
    return seen


def test_deeper_depth_scores_only_the_new_pairs(docs, tiny_cross, counted, tmp_path):
    ce = f"cross:{tiny_cross}"
    cache = tmp_path / "cache"
    qs = queries(*QS)
    text = 'retrieve("docs", mode="dense", k=40) >> rerank("{ce}", depth={d})'
    out20, ctx, stage = run(docs, text.format(ce=ce, d=20), qs, cache)
    _, counts, degraded = rerank_stage(ctx, stage)
    assert counts == {"pairs_scored": 60, "pairs_cached": 0} and counted[0] == 60 and not degraded
    out30, ctx, stage = run(docs, text.format(ce=ce, d=30), qs, cache)
    assert rerank_stage(ctx, stage)[1] == {"pairs_scored": 30, "pairs_cached": 60} and counted[0] == 90
    fresh30, _, _ = run(docs, text.format(ce=ce, d=30), qs)           # no cache at all
    same(out30, fresh30)
    assert counted[0] == 180
    fresh20, _, _ = run(docs, text.format(ce=ce, d=20), qs)
    same(out20, fresh20)
    assert counted[0] == 240
    # a new query set scores only its new queries' pairs
    more = queries(*QS, "music and stars")
    _, ctx, stage = run(docs, text.format(ce=ce, d=30), more, cache)
    assert rerank_stage(ctx, stage)[1] == {"pairs_scored": 30, "pairs_cached": 90}
    assert (cache / "scores").is_dir()


def test_all_pairs_kept_loads_no_model(docs, tiny_cross, tmp_path, monkeypatch):
    from engine.core.ranking.rerankers import registry
    ce = f"cross:{tiny_cross}"
    text = f'retrieve("docs", mode="dense", k=40) >> rerank("{ce}", depth=10)'
    qs = queries(*QS)
    run(docs, text, qs, tmp_path / "cache")
    monkeypatch.setattr(registry, "cached_loaded", lambda *spec: pytest.fail("the model was loaded"))
    # the same pairs under another stage text (its texts read from the collection: the stage is run again)
    out, ctx, stage = run(docs, f'retrieve("docs", mode="dense", k=40) >> rerank("{ce}", depth=10, docs="docs")',
                          qs, tmp_path / "cache")
    assert rerank_stage(ctx, stage)[1] == {"pairs_scored": 0, "pairs_cached": 30}
    assert all(len(r) == 40 for r in out.values())


def test_a_replaced_model_is_scored_again(docs, tiny_cross, tmp_path, counted):
    import torch
    from transformers import AutoModelForSequenceClassification

    model = tmp_path / "ce"
    shutil.copytree(tiny_cross, model)
    ce = f"cross:{model}"
    qs = queries(*QS)
    text = 'retrieve("docs", mode="dense", k=40) >> rerank("{ce}", depth={d})'
    cache = tmp_path / "cache"
    _, ctx, stage = run(docs, text.format(ce=ce, d=20), qs, cache)
    before = rerank_stage(ctx, stage)[0].fingerprint(ctx)
    old, _, _ = run(docs, text.format(ce=ce, d=25), qs)    # the old model's ranking, no cache
    net = AutoModelForSequenceClassification.from_pretrained(model)
    with torch.no_grad():
        net.classifier.weight.mul_(-3.0)
    net.save_pretrained(model)                         # retrained in place: same path, other weights
    got, ctx, stage = run(docs, text.format(ce=ce, d=25), qs, cache)
    assert rerank_stage(ctx, stage)[0].fingerprint(ctx) != before
    assert rerank_stage(ctx, stage)[1] == {"pairs_scored": 75, "pairs_cached": 0}
    fresh, _, _ = run(docs, text.format(ce=ce, d=25), qs)
    same(got, fresh)
    assert all(got[q].ids[:25] != old[q].ids[:25] for q in got)


def test_a_replaced_model_behind_the_same_stage_text_is_never_served_from_the_stage_cache(docs, tiny_cross,
                                                                                       tmp_path, counted):
    """The stage cache knows a stage by what computes it: the same `rerank("cross:DIR")` text over a model
    retrained in place (same folder) is computed again, and equals a fresh run of the new model."""
    import torch
    from transformers import AutoModelForSequenceClassification

    model = tmp_path / "ce"
    shutil.copytree(tiny_cross, model)
    text = f'retrieve("docs", mode="dense", k=40) >> rerank("cross:{model}", depth=20)'
    qs, cache = queries(*QS), tmp_path / "cache"
    old, ctx, _ = run(docs, text, qs, cache)
    assert [r.cached for r in ctx.log] == [False, False]
    again, ctx, _ = run(docs, text, qs, cache)
    assert [r.cached for r in ctx.log] == [True] and counted[0] == 60     # the whole run read back
    same(again, old)
    net = AutoModelForSequenceClassification.from_pretrained(model)
    with torch.no_grad():
        net.classifier.weight.mul_(-3.0)
    net.save_pretrained(model)
    got, ctx, stage = run(docs, text, qs, cache)
    assert [r.cached for r in ctx.log] == [True, False]                   # retrieval read back, rerank computed
    assert rerank_stage(ctx, stage)[1] == {"pairs_scored": 60, "pairs_cached": 0}
    fresh, _, _ = run(docs, text, qs)
    same(got, fresh)
    assert all(got[q].ids[:20] != old[q].ids[:20] for q in got)


# ---------------------------------------------------------------- served garbage

GARBAGE = {"nan": float("nan"), "inf": float("-inf"), "positive": 0.7, "word": "-0.5"}


class Judge(JsonHandler):
    """An OpenAI-compatible stub: a "yes"/"no" logprob pair from the document's text, garbage for a document
    naming a kind of garbage (GARBAGE, or "neither": no yes/no token listed), or for every one (`all_bad`)."""
    all_bad = False
    ranking = "[2] > [1]"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/chat/completions") and not body.get("logprobs"):
            return self.answer({"choices": [{"message": {"content": Judge.ranking}}]})
        text = body.get("prompt") or body["messages"][-1]["content"]
        doc = text.split("<Document>: ")[-1]
        bad = next((g for g in [*GARBAGE, "neither"] if f"garbage-{g} " in doc), None)
        if Judge.all_bad:
            bad = "neither"
        yes = -float(len(doc) % 7) - 0.1
        if bad == "neither":
            top = {"maybe": -0.1, "perhaps": -2.0}
        elif bad:
            top = {"yes": GARBAGE[bad], "no": -1.0}
        else:
            top = {"yes": yes, "no": -1.0}
        return self.answer({"choices": [{"text": "yes", "logprobs": {"top_logprobs": [top]}}]})


@pytest.fixture()
def judge():
    Judge.all_bad, Judge.ranking = False, "[2] > [1]"
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1#judge"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture()
def garbage_docs(tmp_path, fake_encoder):
    from engine.core.collection import Collection
    src = tmp_path / "g.csv"
    rows = [f"g{n},a river text garbage-{g} here" for n, g in enumerate([*GARBAGE, "neither"])]
    rows += [f"d{i},a river text number {i} {'x' * i}" for i in range(7)]
    src.write_text("id,text\n" + "\n".join(rows) + "\n")
    Collection.build("docs", texts=src, root=tmp_path / "idx", batch_size=16)
    return tmp_path / "idx"


def test_unreadable_served_answers_are_counted_said_and_never_kept(garbage_docs, judge, tmp_path):
    from engine.core.ranking.rerankers.fingerprint import fingerprint
    from engine.core.ranking.rerankers.score_cache import ScoreCache, content_key
    text = f'retrieve("docs", mode="dense", k=12) >> rerank("llm:{judge}", depth=12, template="qwen3-reranker")'
    out, ctx, stage = run(garbage_docs, text, queries("river"), tmp_path / "cache")
    rr, counts, degraded = rerank_stage(ctx, stage)
    assert counts == {"pairs_scored": 12, "pairs_cached": 0}
    assert degraded == [f"5 of 12 answers of llm:{judge} could not be read: those candidates were ranked last"]
    assert set(out["q1"].ids[-5:]) == {f"g{n}" for n in range(5)}   # the unreadable ones, last
    kept = ScoreCache(tmp_path / "cache" / "scores", fingerprint(rr.spec))
    from engine.core.collection import Collection
    col = Collection.open("docs", garbage_docs)
    from engine.core.ranking.rerankers.candidates import item_fields
    hits = col.search(text="river", k=12)
    texts = {h.id: f["text"] for h, f in zip(hits, item_fields(col, [{**h.meta, "id": h.id} for h in hits]))}
    found = kept.pairs("river", [content_key(texts[d], "text") for d in sorted(texts)])
    assert len(found) == 7 and all(sorted(texts)[i].startswith("d") for i in found)
    # the next run (another stage text) asks the server again for the unreadable ones only
    _, ctx, stage = run(garbage_docs, text.replace('template=', 'docs="docs", template='), queries("river"),
                        tmp_path / "cache")
    assert rerank_stage(ctx, stage)[1] == {"pairs_scored": 5, "pairs_cached": 7}
    assert rerank_stage(ctx, stage)[2]


def test_every_answer_unreadable_is_refused(garbage_docs, judge, tmp_path):
    Judge.all_bad = True
    text = f'retrieve("docs", mode="dense", k=5) >> rerank("llm:{judge}", depth=5, template="qwen3-reranker")'
    with pytest.raises(EngineError, match="none of the 5 candidates .* could be scored.*logprobs") as exc:
        run(garbage_docs, text, queries("river"), tmp_path / "cache")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("top, readable", [
    ([("yes", -0.2), ("no", -1.5)], True),
    ([("yes", -0.2)], True),                           # "no" unlisted: bounded by the lowest listed
    ([("yes", float("nan")), ("no", -1.0)], False),
    ([("yes", float("inf")), ("no", -1.0)], False),
    ([("yes", 0.4), ("no", -1.0)], False),            # a positive "logprob"
    ([("yes", "-0.2"), ("no", -1.0)], False),         # not a number
    ([("yes", None), ("no", -1.0)], False),
    ([("maybe", -0.1), ("sure", -0.3)], False),       # neither yes nor no
    ([], False),
])
def test_log_odds_reads_only_real_log_probabilities(top, readable):
    from engine.core.ranking.rerankers.endpoint import log_odds
    assert bool(np.isfinite(log_odds(top))) is readable


# ---------------------------------------------------------------- listwise

@pytest.mark.parametrize("answer", ["Sorry, I cannot rank these 20 passages.", "There are 2 relevant ones.",
                                    "Passage 3 is best"])
def test_listwise_prose_with_a_number_is_not_a_ranking(answer):
    from engine.core.ranking.rerankers.listwise import parse_ranking
    assert parse_ranking(answer, 20) is None
    assert parse_ranking("3, 1, 2", 3) == [2, 0, 1] and parse_ranking("2 > 1.", 3) == [1, 0, 2]


def test_listwise_prose_degrades_the_stage_and_is_not_kept(docs, judge, tmp_path):
    from engine.core.ranking.rerankers.fingerprint import fingerprint
    from engine.core.ranking.rerankers.score_cache import ScoreCache
    text = f'retrieve("docs", mode="dense", k=30) >> rerank("llm-list:{judge}", depth=30)'
    out, ctx, stage = run(docs, text, queries("river"), tmp_path / "cache")   # windows [10,30) and [0,20)
    rr, counts, degraded = rerank_stage(ctx, stage)
    assert not degraded and counts == {"pairs_scored": 30, "pairs_cached": 0}
    kept = ScoreCache(tmp_path / "cache" / "scores", fingerprint(rr.spec))
    assert kept.db().execute("SELECT COUNT(*) FROM lists").fetchone()[0] == 1
    Judge.ranking = "Sorry, I cannot rank these 20 passages."
    with pytest.raises(EngineError, match="no answer about the query 'flood' named a candidate"):
        run(docs, text, queries("flood"), tmp_path / "cache")
    # the query read before is answered from the kept scores; a window of prose for a new one is said
    calls = {"n": 0}
    real = Judge.do_POST

    def half(self):   # the first window's answer is read, the second is prose
        calls["n"] += 1
        Judge.ranking = "[2] > [1]" if calls["n"] == 1 else "Sorry, I cannot rank these 20 passages."
        return real(self)

    Judge.do_POST = half
    try:
        _, ctx, stage = run(docs, text, queries("river", "rain"), tmp_path / "cache")
    finally:
        Judge.do_POST = real
    rr, counts, degraded = rerank_stage(ctx, stage)
    assert counts == {"pairs_scored": 30, "pairs_cached": 30}
    assert degraded == [f"1 of 2 windows of llm-list:{judge}'s answers could not be read (no candidate named): "
                        "they kept their input order"]
    assert kept.db().execute("SELECT COUNT(*) FROM lists").fetchone()[0] == 1   # the degraded list: not kept


# ---------------------------------------------------------------- parsed once

@pytest.mark.parametrize("cache", [False, True])
def test_a_pipeline_file_parses_its_reranker_spec_once(run_cli, docs, tiny_cross, tmp_path, cache):
    from engine.core.ranking.rerankers import spec
    (tmp_path / "q.tsv").write_text("q1\triver flood\nq2\tschool\n")
    pipe = tmp_path / "p.toml"
    pipe.write_text(f"pipeline = 'retrieve(\"docs\", mode=\"dense\", k=20) >> rerank(\"cross:{tiny_cross}\", "
                    "depth=10) % 5'\n")
    before = spec.PARSES[0]
    code, _, err = run_cli("pipeline", "run", pipe, "--queries", tmp_path / "q.tsv", "--root", docs,
                           "--out", tmp_path / "p.run", *(["--cache", tmp_path / "c"] if cache else ["--no-cache"]))
    assert code == 0, err
    assert spec.PARSES[0] == before + 1
    assert len((tmp_path / "p.run").read_text().splitlines()) == 10


def test_a_parsed_spec_passed_to_the_stage_prints_and_runs_as_its_text(docs, tiny_cross):
    from engine.core.ranking.pipeline.rerank import Rerank
    from engine.core.ranking.rerankers import spec as spec_module
    from engine.core.ranking.rerankers.spec import RerankerSpec
    parsed = RerankerSpec.parse(f"llm:{tiny_cross}", keywords=True, instruction="Find it")
    before = spec_module.PARSES[0]
    stage = Rerank(parsed, depth=7)
    assert str(stage) == f'rerank("llm:{tiny_cross}", depth=7, instruction="Find it")'
    assert stage.spec is parsed and spec_module.PARSES[0] == before
    text = f'rerank("cross:{tiny_cross}", depth=7)'
    from engine.core.ranking.pipeline.parse import parse_pipeline
    assert str(parse_pipeline(text)) == text


def test_each_command_parses_its_reranker_spec_once(run_cli, docs, tiny_cross, tmp_path):
    from engine.core.ranking.rerankers import spec
    (tmp_path / "q.tsv").write_text("q1\triver flood\nq2\tschool\n")
    src = tmp_path / "d.tsv"
    src.write_text("id\ttext\n" + "".join(f"d{i}\ttext {i}\n" for i in range(40)))
    commands = [
        ("search", "docs", "--queries", tmp_path / "q.tsv", "--out", tmp_path / "r.run", "-k", "3"),
        ("search", "docs", "river", "-k", "3"),
    ]
    for command in commands:
        before = spec.PARSES[0]
        code, _, err = run_cli(*command, "--rerank", f"cross:{tiny_cross}", "--rerank-depth", "6", "--root", docs)
        assert code == 0, err
        assert spec.PARSES[0] == before + 1, command
    before = spec.PARSES[0]
    code, _, err = run_cli("rerank", tmp_path / "r.run", "--queries", tmp_path / "q.tsv", "--docs", src,
                           "--model", f"cross:{tiny_cross}", "--depth", "3", "--out", tmp_path / "x.run", "-q")
    assert code == 0, err
    assert spec.PARSES[0] == before + 1


def test_score_cache_takes_concurrent_writers(tmp_path):
    """Writers that share the folder (experiments run side by side) each keep all their pairs; NaN never."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.core.ranking.rerankers.score_cache import ScoreCache

    def write(n: int) -> None:
        cache = ScoreCache(tmp_path / "scores", "fp")
        for batch in range(5):
            cache.put_pairs([(f"q{n}", f"t:doc {batch} {i}", float(n * 1000 + batch * 100 + i)) for i in range(40)]
                            + [(f"q{n}", "t:unread", float("nan"))])
        cache.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(4)))
    cache = ScoreCache(tmp_path / "scores", "fp")
    for n in range(4):
        got = cache.pairs(f"q{n}", [f"t:doc {b} {i}" for b in range(5) for i in range(40)] + ["t:unread"])
        assert got == {b * 40 + i: float(n * 1000 + b * 100 + i) for b in range(5) for i in range(40)}
    assert ScoreCache(tmp_path / "scores", "other").pairs("q0", ["t:doc 0 0"]) == {}   # another reranker
