"""`llm-list:` windows asked together: every independent window of a step (the sliding window's next window of
each query, every group of every voting round) goes to the backend at once — one batched `generate` per batch
of a local model, concurrent requests to a served one — and the rankings are those of one window at a time: the
same answers on tiny random Qwen3 and Llama models (left padding, greedy), the same scores and the same counted
unreadable windows through a stub server; fewer generate calls, as many requests in flight as allowed."""
from __future__ import annotations

import json
import re
import threading
import time
import zlib
from http.server import ThreadingHTTPServer

import numpy as np
import pytest
from fixtures.json_stub import JsonHandler
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.ranking.rerankers.listwise import Listwise, answer_tokens, one_at_a_time, window_messages

WORDS = "cats dogs boats trains cheese rain music chess bread rivers stars maps".split()


def lists(sizes: list[int], seed: int = 0) -> list[tuple[str, list[str]]]:
    """(query, candidates) of the given sizes, in words the tiny models' tokenizer knows."""
    rng = np.random.default_rng(seed)
    def doc(i: int) -> str:
        return f"document {i} about {' '.join(rng.choice(WORDS, int(rng.integers(1, 6))))}"
    return [(" ".join(rng.choice(WORDS, 2)), [doc(i) for i in range(n)]) for n in sizes]


def hashed(messages: list[dict], max_new_tokens: int) -> str:
    """A deterministic answer of any kind from the prompt: an order, a partial one, or prose."""
    user = messages[-1]["content"]
    n = len(re.findall(r"^\[\d+\] ", user, re.M))
    h = zlib.crc32(user.encode())
    if h % 5 == 0:
        return "I cannot rank these passages."
    order = np.random.default_rng(h).permutation(n)[: max(1, n - h % 3)] + 1
    return " > ".join(f"[{i}]" for i in order)


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 45), min_size=1, max_size=6), rounds=st.sampled_from([None, 1, 3]))
def test_asking_a_step_together_is_asking_one_window_at_a_time(sizes, rounds):
    """The bookkeeping alone: the windows of all queries asked step by step give each query the scores and the
    counts it gets alone, whatever the answers (orders, partial orders, prose)."""
    items = lists(sizes)
    calls: list[list[int]] = []

    def together(asks):
        calls.append([t for _, t in asks])
        return [hashed(m, t) for m, t in asks]

    batched = Listwise(together).rank(items, rounds)
    for (q, docs), got in zip(items, batched):
        alone = Listwise(one_at_a_time(hashed))
        np.testing.assert_array_equal(got.scores, alone.scores(q, docs, rounds))
        assert (got.unread, got.windows) == (alone.unparsed, alone.windows)
    steps = max((Listwise(one_at_a_time(hashed)).rank([it], rounds)[0].windows for it in items), default=0)
    assert len(calls) == (min(steps, 1) if rounds else steps)   # one call a step (voting: one step)


# ---------------------------------------------------------------- a local model

def small_windows(reranker, window: int = 6, step: int = 3):
    """The reranker with windows of 6, 3 apart (short answers: a fast test of several steps)."""
    reranker.lister.window, reranker.lister.step = window, step
    return reranker


@pytest.mark.parametrize("model", ["tiny_lm", "tiny_llama"])
def test_batched_generate_answers_as_each_prompt_alone(model, request):
    """Prompts of different lengths and answer sizes, batched with left padding: each answer is the one its
    prompt gets alone (greedy, the same most new tokens), and a batch of a few rows is one generate call."""
    from engine.core.ranking.rerankers import llm_list
    from engine.core.ranking.rerankers.spec import load_reranker
    folder = request.getfixturevalue(model)
    asks = [(window_messages(q, docs), answer_tokens(len(docs))) for q, docs in lists([6, 3, 5, 6, 2, 6])]
    alone = load_reranker(f"llm-list:{folder}", batch_size=1).lister.answers
    together = load_reranker(f"llm-list:{folder}", batch_size=2).lister.answers
    before = llm_list.CALLS[0]
    want = alone(asks)
    assert llm_list.CALLS[0] - before == len(asks)
    before = llm_list.CALLS[0]
    got = together(asks)
    assert llm_list.CALLS[0] - before == 5   # answer sizes of 6 (three: two calls of ≤ 2 rows), 3, 5 and 2
    assert got == want
    assert len(set(want)) > 3 and all(want)   # the model says different things, not nothing


@pytest.mark.parametrize("rounds", [None, 2])
def test_local_rankings_equal_one_window_at_a_time(tiny_lm, rounds):
    from engine.core.ranking.rerankers import llm_list
    from engine.core.ranking.rerankers.listwise import window_count
    from engine.core.ranking.rerankers.spec import load_reranker
    items = lists([13, 4, 8, 6], seed=3)
    one = small_windows(load_reranker(f"llm-list:{tiny_lm}", batch_size=1, rounds=rounds))
    before = llm_list.CALLS[0]
    want = [one.score(q, docs) for q, docs in items]
    calls_one = llm_list.CALLS[0] - before
    many = small_windows(load_reranker(f"llm-list:{tiny_lm}", rounds=rounds))
    before = llm_list.CALLS[0]
    got = many.score_batch([(q, docs, "text") for q, docs in items])
    calls_many = llm_list.CALLS[0] - before
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert many.unread() == one.unread()
    assert calls_one == one.unread()[1] == sum(window_count(len(d), rounds, 6, 3) for _, d in items)
    # sliding, one step at a time, one call per window size of the step: {6, 4}, {6, 5}, {6}, {4} (13
    # candidates take four windows); voting, every group of every round at once: sizes {5, 4, 6}
    assert calls_many == (6 if rounds is None else 3) < calls_one


def test_progress_counts_windows_as_batches_finish(tiny_lm):
    from engine import progress
    from engine.core.ranking.rerankers.listwise import window_count
    from engine.core.ranking.rerankers.spec import load_reranker
    items = lists([13, 4, 8], seed=4)
    reranker = small_windows(load_reranker(f"llm-list:{tiny_lm}", batch_size=2))
    total = sum(window_count(len(d), None, 6, 3) for _, d in items)
    seen = []
    with progress.meter("windows", total, "windows") as m:
        real = m.advance
        m.advance = lambda n=1: seen.append(n) or real(n)   # type: ignore[method-assign]
        reranker.rank(items)
    assert m.done == total and len(seen) > 1 and max(seen) <= 2   # counted per generate call of ≤ 2 rows


# ---------------------------------------------------------------- a served model

class Judge(JsonHandler):
    """An OpenAI-compatible chat endpoint answering each window by the relevance written in its passages
    (`doc R`), prose for a window holding the word "garbage"; it records how many requests were in flight."""
    lock = threading.Lock()
    now = 0
    most = 0
    requests = 0
    hold = False   # a request waits (up to 0.5 s) for another to be in flight with it

    def do_POST(self):
        with Judge.lock:
            Judge.now += 1
            Judge.requests += 1
            Judge.most = max(Judge.most, Judge.now)
        try:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            user = body["messages"][-1]["content"]
            until = time.monotonic() + (0.5 if Judge.hold else 0)
            while Judge.now < 2 and time.monotonic() < until:   # requests sent together: wait for a second one
                time.sleep(0.005)
        finally:
            with Judge.lock:   # out of flight before the answer is sent (the next request may follow at once)
                Judge.now -= 1
        found = re.findall(r"^\[(\d+)\] doc (\d+)", user, re.M)
        text = ("I would rather not say." if "garbage" in user else
                " > ".join(f"[{i}]" for i, _ in sorted(found, key=lambda p: -int(p[1]))))
        self.answer({"choices": [{"message": {"role": "assistant", "content": text}}]})


@pytest.fixture()
def judge():
    Judge.now = Judge.most = Judge.requests = 0
    Judge.hold = False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def served_items(garbage: int | None = None) -> list[tuple[str, list[str], str]]:
    rng = np.random.default_rng(5)
    out = []
    for n, size in enumerate([30, 12, 45, 8]):
        docs = [f"doc {r}" for r in rng.permutation(size)]
        if n == garbage:
            docs[-1] += " garbage"   # only the first window of this query holds it
        out.append((f"query {n}", docs, "text"))
    return out


@pytest.mark.parametrize("rounds", [None, 3])
def test_served_requests_in_flight_together_rank_as_one_at_a_time(judge, rounds):
    from engine.core.ranking.rerankers.endpoint import IN_FLIGHT
    from engine.core.ranking.rerankers.spec import load_reranker
    items = served_items()
    one = load_reranker(f"llm-list:{judge}#judge-7b", rounds=rounds, batch_size=1)
    want = [one.score(q, d) for q, d, _ in items]
    assert Judge.most == 1 and Judge.requests == one.unread()[1]
    Judge.most = Judge.requests = 0
    Judge.hold = True
    many = load_reranker(f"llm-list:{judge}#judge-7b", rounds=rounds)
    got = many.score_batch(items)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert Judge.requests == one.unread()[1] and 1 < Judge.most <= IN_FLIGHT
    if rounds is None:   # the judge knows the answer: the best ten of each query come first
        for (_, docs, _), g in zip(items, got):
            top = [int(docs[i].split()[1]) for i in np.argsort(-g, kind="stable")[:10]]
            assert top == list(range(len(docs) - 1, max(-1, len(docs) - 11), -1))


def test_a_garbage_answer_in_a_batch_is_counted_and_degrades_the_stage(judge, capsys):
    from engine.core.ranking.rerankers.scoring import score_items
    from engine.core.ranking.rerankers.spec import RerankerSpec
    spec = RerankerSpec.parse(f"llm-list:{judge}#judge-7b")
    items = served_items(garbage=2)
    scored = score_items(spec, spec.load, items)
    from engine.core.ranking.rerankers.listwise import window_count
    windows = sum(window_count(len(d), None) for _, d, _ in items)   # 2 + 1 + 4 + 1
    assert (scored.unread, scored.asked, scored.scored) == (1, windows, sum(len(d) for _, d, _ in items))
    assert scored.degraded(spec) == (f"1 of {windows} windows of {spec}'s answers could not be read (no candidate "
                                     "named): they kept their input order")
    err = " ".join(capsys.readouterr().err.split())
    # said as one query after another would have: query 2's windows come after those of queries 0 and 1
    assert "1 of 7 windows so far (1 queries)" in err and err.count("warning") == 1
    # a query none of whose windows could be read is refused, named, whatever else its batch held
    from engine.errors import EngineError
    bad = served_items()
    bad[1] = ("query 1", [d + " garbage" for d in bad[1][1]], "text")
    with pytest.raises(EngineError, match="no answer about the query 'query 1' named a candidate"):
        score_items(spec, spec.load, bad)
