"""`llm-list:` listwise reranking: answers parsed robustly; RankGPT's sliding window and grouped voting with a
model that knows the answer; and a model that answers garbage keeps the first stage's order and set, for any
number of candidates (a property test), with the unreadable windows counted in one warning line."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.ranking.rerankers.listwise import Listwise, one_at_a_time, parse_ranking, window_messages


@pytest.mark.parametrize("answer, n, want", [
    ("[3] > [1] > [2]", 3, [2, 0, 1]),
    ("[ 3 ] > [ 1 ] > [ 2 ]", 3, [2, 0, 1]),
    ("The ranking is: [2] > [3]", 3, [1, 2, 0]),          # the unnamed follow in input order
    ("[2] > [2] > [9] > [0] > [1]", 3, [1, 0, 2]),        # repeats and out-of-range identifiers dropped
    ("3 > 1 > 2", 3, [2, 0, 1]),                          # bare numbers when nothing is bracketed
    ("I cannot rank these.", 3, None),
    ("", 4, None),
    ("[7] > [8]", 3, None),
])
def test_parse_ranking(answer, n, want):
    assert parse_ranking(answer, n) == want


def passage_ids(messages: list[dict]) -> list[tuple[int, int]]:
    """(identifier in the window, hidden relevance) of each passage line `[i] doc R`."""
    return [(int(i), int(r)) for i, r in re.findall(r"^\[(\d+)\] doc (\d+)", messages[-1]["content"], re.M)]


def oracle(messages: list[dict], max_new_tokens: int) -> str:
    """A model that orders each window by the relevance written in its passages."""
    return " > ".join(f"[{i}]" for i, _ in sorted(passage_ids(messages), key=lambda p: -p[1]))


def test_sliding_window_brings_the_top_ten_up_from_the_bottom():
    rng = np.random.default_rng(1)
    relevance = rng.permutation(45)
    docs = [f"doc {r}" for r in relevance]
    lister = Listwise(one_at_a_time(oracle))
    order = lister.sliding("q", docs)
    assert sorted(order) == list(range(45))
    assert [int(relevance[i]) for i in order[:10]] == list(range(44, 34, -1))
    assert lister.windows == 4 and lister.unparsed == 0   # windows [25,45) [15,35) [5,25) [0,15)


def test_grouped_voting_ranks_the_best_first():
    relevance = np.random.default_rng(2).permutation(30)
    docs = [f"doc {r}" for r in relevance]
    votes = Listwise(one_at_a_time(oracle)).votes("q", docs, rounds=5)
    assert votes[int(np.argmax(relevance))] == 5
    assert votes[int(np.argmin(relevance))] == 0
    assert votes.sum() == 5 * (15 // 2 * 2)   # two groups of 15 a round, 7 votes each


def test_prompt_numbers_every_passage_and_cuts_long_ones():
    messages = window_messages("cats", ["a b c", "word " * 500], instruction="Find the photo's article")
    user = messages[-1]["content"]
    assert "[1] a b c" in user and "[2] word" in user and user.startswith("Task: Find the photo's article.")
    assert len(user.split("[2] ")[1].split("\n")[0].split()) == 100


GARBAGE = st.text(alphabet=st.characters(blacklist_categories=("Nd", "No", "Nl", "Cs")), max_size=80)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 70), answers=st.lists(GARBAGE, min_size=1, max_size=5), rounds=st.sampled_from([None, 1, 3]))
def test_garbage_answers_keep_the_first_stage_order_and_set(n, answers, rounds):
    calls = []

    def garbage(messages, max_new_tokens):
        calls.append(1)
        return answers[len(calls) % len(answers)]

    lister = Listwise(one_at_a_time(garbage))
    scores = lister.scores("q", [f"doc {i}" for i in range(n)], rounds)
    assert len(scores) == n
    order = list(np.argsort(-scores, kind="stable"))
    assert order == list(range(n))
    assert lister.unparsed == lister.windows == len(calls)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 70), answer=st.text(max_size=120), rounds=st.sampled_from([None, 2]))
def test_any_answer_is_a_permutation(n, answer, rounds):
    lister = Listwise(one_at_a_time(lambda m, t: answer))
    scores = lister.scores("q", [f"doc {i}" for i in range(n)], rounds)
    assert len(scores) == n and np.all(np.isfinite(scores))
    if rounds is None:
        assert sorted(scores.tolist()) == list(range(1, n + 1))  # each position once: nothing lost or repeated


def test_local_model_keeps_the_set(tiny_lm):
    """The tiny random model answers whatever it answers: the candidates come back each exactly once."""
    from engine.core.ranking.rerankers.spec import load_reranker
    docs = [f"document {i} about {w}" for i, w in enumerate(["cats", "dogs", "boats", "trains", "cheese", "rain"]
                                                            * 5)]
    reranker = load_reranker(f"llm-list:{tiny_lm}")
    scores = reranker.score("animals", docs)
    assert sorted(scores.tolist()) == list(range(1, len(docs) + 1))
    assert reranker.info["lister"].windows == 2
