"""Listwise reranking with any model that answers a ranking prompt: RankGPT's sliding window and DSEBench's
grouped voting, and the parsing of answers such as `[3] > [1] > [2]`.

The model is a function from prompts (chat messages, most new tokens) to their answer texts, asked many
independent prompts at once (a backend batches them: `Answers`); everything else here is plain bookkeeping,
so no candidate is ever lost or duplicated whatever the model says: an answer is read as the identifiers it
names (each once, in range), the ones it leaves out follow in their input order, and an answer that names
none keeps its window's input order (counted, so the caller can warn).
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
Ask = tuple[list[dict], int]               # one prompt: (chat messages, most new tokens)
Answers = Callable[[Sequence[Ask]], list[str]]
"""Many independent prompts → their answers, in order: what a backend implements (one batched `generate` per
batch of a local model, concurrent requests to a served one); it counts each answer on the progress meter."""
CHUNK = 256
"""Prompts handed to the backend at once: every independent prompt of a step goes, in chunks of this many (the
texts of a large stage's voting rounds are not all held at once)."""


def one_at_a_time(answer: Answer) -> Answers:
    """A function that answers one prompt as `Answers`: each prompt asked alone, in order."""
    def answers(asks: Sequence[Ask]) -> list[str]:
        from engine.progress import advance
        out = []
        for messages, tokens in asks:
            out.append(answer(messages, tokens))
            advance(1)
        return out
    return answers


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
class Listed:
    """One query's scores and what its windows' answers were (`unread`: windows whose answer named no candidate)."""
    scores: np.ndarray
    unread: int = 0
    windows: int = 0


@dataclass
class _List:
    """A query's state while its windows are asked: the sliding window's order and next window's end, or the
    voting's votes."""
    query: str
    docs: Sequence[str]
    order: list[int]
    end: int
    votes: np.ndarray
    unread: int = 0
    windows: int = 0


@dataclass
class Listwise:
    """Orders queries' candidates by asking `answers` about windows of them. The windows of one query's
    sliding window depend on each other (each window's best rise into the next), those of different queries
    do not, nor do the groups of the voting rounds: so every window of a step, across all the queries (and
    every group of every round), goes to `answers` together, and the backend batches them."""
    answers: Answers
    instruction: str | None = None
    window: int = WINDOW
    step: int = STEP
    unparsed: int = 0   # windows whose answer named no passage, since this object was made
    windows: int = 0

    def ask(self, asks: Sequence[tuple[_List, list[int]]]) -> list[list[int] | None]:
        """Each (query, window of candidate positions) asked together; each window reordered, or None (input
        order kept) where its answer cannot be read (counted on the query and here)."""
        out: list[list[int] | None] = []
        for lo in range(0, len(asks), CHUNK):
            chunk = asks[lo:lo + CHUNK]
            texts = self.answers([(window_messages(s.query, [s.docs[i] for i in ids], self.instruction),
                                   answer_tokens(len(ids))) for s, ids in chunk])
            for (s, ids), text in zip(chunk, texts):
                s.windows += 1
                self.windows += 1
                order = parse_ranking(text, len(ids))
                if order is None:
                    s.unread += 1
                    self.unparsed += 1
                out.append(None if order is None else [ids[i] for i in order])
        return out

    def slide(self, lists: list[_List]) -> None:
        """RankGPT: windows of `window` from the bottom of each list up, `step` apart; the best of each window
        rises into the next. Every position is in some window (the last one starts at the top). Step by step:
        the next window of every query still going is asked together."""
        live = [s for s in lists if s.end > 0]
        while live:
            asks = [(s, s.order[max(0, s.end - self.window):s.end]) for s in live]
            for (s, ids), ranked in zip(asks, self.ask(asks)):
                start = s.end - len(ids)
                if ranked is not None:
                    s.order[start:s.end] = ranked
                s.end = 0 if start == 0 else s.end - self.step
            live = [s for s in live if s.end > 0]

    def vote(self, lists: list[_List], rounds: int, seed: int = SEED) -> None:
        """Grouped voting: each round shuffles a query's candidates (seeded per query) into groups of at most
        `window` (near-equal sizes), and each candidate the model places in its group's top half gets a vote;
        an unreadable answer gives its group none. Every group of every round of every query is asked
        together."""
        asks: list[tuple[_List, list[int]]] = []
        for s in lists:
            n = len(s.docs)
            rng = np.random.default_rng(seed)
            groups = max(1, -(-n // self.window))
            for _ in range(rounds):
                for group in np.array_split(rng.permutation(n), groups):
                    if len(group) >= 2:
                        asks.append((s, [int(i) for i in group]))
        for (s, ids), ranked in zip(asks, self.ask(asks)):
            if ranked is not None:
                s.votes[ranked[: len(ids) // 2]] += 1

    def rank(self, items: Sequence[tuple[str, Sequence[str]]], rounds: int | None = None) -> list[Listed]:
        """Each (query, candidates) scored, higher is better: votes with `rounds`, else n − position in the
        sliding window's order (ties keep the first stage's order in the stage that sorts them)."""
        lists = [_List(q, docs, list(range(len(docs))), len(docs), np.zeros(len(docs), dtype=np.float64))
                 for q, docs in items]
        going = [s for s in lists if len(s.docs)]
        if rounds:
            self.vote(going, rounds)
        else:
            self.slide(going)
        out = []
        for s in lists:
            scores = s.votes
            if not rounds:
                scores = np.zeros(len(s.docs), dtype=np.float64)
                scores[s.order] = np.arange(len(s.docs), 0, -1, dtype=np.float64)
            out.append(Listed(scores, s.unread, s.windows))
        return out

    def sliding(self, query: str, docs: Sequence[str]) -> list[int]:
        """One query's sliding-window order (positions, best first)."""
        s = _List(query, docs, list(range(len(docs))), len(docs), np.zeros(len(docs)))
        self.slide([s])
        return s.order

    def votes(self, query: str, docs: Sequence[str], rounds: int, seed: int = SEED) -> np.ndarray:
        """One query's votes over `rounds` rounds."""
        s = _List(query, docs, [], 0, np.zeros(len(docs), dtype=np.float64))
        self.vote([s], rounds, seed)
        return s.votes

    def scores(self, query: str, docs: Sequence[str], rounds: int | None = None) -> np.ndarray:
        """One query's scores (`rank`)."""
        return self.rank([(query, docs)], rounds)[0].scores
