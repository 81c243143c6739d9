"""Listwise reranking with any model that answers a ranking prompt: RankGPT's sliding window and DSEBench's
grouped voting, and the parsing of answers such as `[3] > [1] > [2]`.

The model is a function from a prompt's chat messages to its answer text; everything else here is plain
bookkeeping, so no candidate is ever lost or duplicated whatever the model says: an answer is read as the
identifiers it names (each once, in range), the ones it leaves out follow in their input order, and an answer
that names none keeps its window's input order (counted, so the caller can warn).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

WINDOW = 20
STEP = 10
PASSAGE_WORDS = 100   # each candidate is cut to its first words in the prompt (20 of them must fit)
SEED = 0
SYSTEM = "You are RankGPT, an intelligent assistant that can rank passages based on their relevancy to the query."
INTRO = ("I will provide you with {n} passages, each indicated by a numerical identifier []. Rank the passages "
         "based on their relevance to the search query: {query}.")
OUTRO = ("Search Query: {query}.\nRank the {n} passages above based on their relevance to the search query. List "
         "them in descending order using identifiers, the most relevant first. The output format should be "
         "[] > [], e.g., [2] > [1]. Only respond with the ranking results, do not say any word or explain.")
RANKGPT_PROMPT_WORDS = " ".join((SYSTEM, INTRO, OUTRO, "Task"))
"""Every fixed word of the prompt (a test's word-level tokenizer is built to know them)."""

Answer = Callable[[list[dict], int], str]  # (chat messages, most new tokens) → the model's answer text


def window_messages(query: str, passages: Sequence[str], instruction: str | None = None) -> list[dict]:
    """RankGPT's prompt for one window as chat messages (system, one user turn)."""
    n = len(passages)
    lines = ([f"Task: {instruction}."] if instruction else []) + [INTRO.format(n=n, query=query), ""]
    lines += [f"[{i}] {' '.join(p.split()[:PASSAGE_WORDS])}" for i, p in enumerate(passages, 1)]
    lines += ["", OUTRO.format(n=n, query=query)]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def answer_tokens(n: int) -> int:
    """Enough new tokens for `[12] > ` n times."""
    return 6 * n + 8


_BRACKETED = re.compile(r"\[\s*(\d+)\s*\]")
_BARE = re.compile(r"(?<![\w.])(\d+)(?![\w.])")
_NUMBER_LIST = re.compile(r"\s*\d+(?:\s*(?:>|,|;|\s)\s*\d+)*\s*\.?\s*")


def parse_ranking(answer: str, n: int) -> list[int] | None:
    """The 0-based order an answer gives n passages: identifiers in brackets (or, where the whole answer is a
    list of bare numbers such as `3 > 1 > 2`, those), each kept once where first named, out-of-range ones
    dropped, the unnamed appended in input order; None when the answer names no passage (prose that merely
    holds a number, "I cannot rank these 20 passages", is no ranking)."""
    found = _BRACKETED.findall(answer)
    if not found and _NUMBER_LIST.fullmatch(answer):
        found = _BARE.findall(answer)
    seen: list[int] = []
    for word in found:
        i = int(word) - 1
        if 0 <= i < n and i not in seen:
            seen.append(i)
    if not seen:
        return None
    return seen + [i for i in range(n) if i not in seen]


def window_count(n: int, rounds: int | None, window: int = WINDOW, step: int = STEP) -> int:
    """How many windows `Listwise.scores` asks about for n candidates (what a progress meter counts)."""
    if n < 2 and not rounds:
        return 1 if n else 0
    if rounds:
        groups = np.array_split(np.arange(n), max(1, -(-n // window)))
        return rounds * sum(1 for g in groups if len(g) >= 2)
    count, end = 0, n
    while end > 0:
        count += 1
        if end - window <= 0:
            break
        end -= step
    return count


@dataclass
class Listwise:
    """Orders a query's candidates by asking `answer` about windows of them."""
    answer: Answer
    instruction: str | None = None
    window: int = WINDOW
    step: int = STEP
    unparsed: int = 0   # windows whose answer named no passage, since this object was made
    windows: int = 0

    def rank_window(self, query: str, docs: Sequence[str], ids: list[int]) -> list[int] | None:
        """The window's candidates reordered, or None (input order kept) when the answer cannot be read."""
        from engine.progress import advance
        self.windows += 1
        text = self.answer(window_messages(query, [docs[i] for i in ids], self.instruction), answer_tokens(len(ids)))
        advance(1)
        order = parse_ranking(text, len(ids))
        if order is None:
            self.unparsed += 1
            return None
        return [ids[i] for i in order]

    def sliding(self, query: str, docs: Sequence[str]) -> list[int]:
        """RankGPT: windows of `window` from the bottom of the list up, `step` apart; the best of each window
        rises into the next. Every position is in some window (the last one starts at the top)."""
        order = list(range(len(docs)))
        end = len(order)
        while end > 0:
            start = max(0, end - self.window)
            ranked = self.rank_window(query, docs, order[start:end])
            if ranked is not None:
                order[start:end] = ranked
            if start == 0:
                break
            end -= self.step
        return order

    def votes(self, query: str, docs: Sequence[str], rounds: int, seed: int = SEED) -> np.ndarray:
        """Grouped voting: each round shuffles the candidates into groups of at most `window` (near-equal
        sizes), and each candidate the model places in its group's top half gets a vote; an unreadable
        answer gives its group none."""
        n = len(docs)
        votes = np.zeros(n, dtype=np.float64)
        rng = np.random.default_rng(seed)
        groups = max(1, -(-n // self.window))
        for _ in range(rounds):
            for group in np.array_split(rng.permutation(n), groups):
                ids = [int(i) for i in group]
                if len(ids) < 2:
                    continue
                ranked = self.rank_window(query, docs, ids)
                if ranked is not None:
                    votes[ranked[: len(ids) // 2]] += 1
        return votes

    def scores(self, query: str, docs: Sequence[str], rounds: int | None = None) -> np.ndarray:
        """Higher is better: votes with `rounds`, else n − position in the sliding window's order (ties keep
        the first stage's order in the stage that sorts them)."""
        if not len(docs):
            return np.zeros(0)
        if rounds:
            return self.votes(query, docs, rounds)
        out = np.zeros(len(docs), dtype=np.float64)
        out[self.sliding(query, docs)] = np.arange(len(docs), 0, -1, dtype=np.float64)
        return out
