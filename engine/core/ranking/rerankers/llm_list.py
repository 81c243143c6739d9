"""`llm-list:NAME_OR_DIR`: a chat LLM as a listwise reranker (RankGPT's sliding window, or grouped voting with
`rounds`), generating greedily here with transformers or asking a served model (`llm-list:http://…/v1#MODEL`).
The windowing and the parsing live in `engine.core.ranking.rerankers.listwise`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from engine.core.ranking.rerankers.base import Item, Reranker
from engine.core.ranking.rerankers.listwise import Answers, Ask, Listed, Listwise

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.endpoint import Endpoint
    from engine.core.ranking.rerankers.llm_prefix import Batching
    from engine.core.ranking.rerankers.spec import RerankerSpec

WARN_AT = (1, 10, 100, 1000, 10_000)
"""Queries with an unreadable window after which the running count is reported (a bounded number of lines)."""


BATCH_ROWS = 16   # prompts of one local generate call (`batch_size`; `batch_tokens`: cut by tokens instead)
CALLS = [0]
"""Backend calls made in this process: local generate calls, or served requests (what batching reduces)."""


def stop_ids(model) -> set[int]:
    """The token ids that end a generation (the model's generation config's end of sequence)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return set() if eos is None else {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


def local_answers(name: str, identity: str, batching: "Batching") -> Answers:
    """Prompts → the greedy answers of a causal LM loaded here (its chat template, or the turns' plain text for
    a model without one): prompts with the same most new tokens, sorted by length, in batches of `batching`
    (rows, or a token budget), each batch one `generate` call over left-padded rows, each row cut after its
    own end of sequence — the answer each prompt gets alone, greedy decoding being per row."""
    import torch

    from engine.core.encoders.device import resolve_device
    from engine.core.ranking.rerankers.llm import left_padded, load_causal_lm
    from engine.progress import advance
    model, tokenizer = load_causal_lm(name, resolve_device(), identity)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stops = stop_ids(model)

    def prompt_ids(messages: list[dict]) -> list[int]:
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = "\n\n".join(m["content"] for m in messages) + "\n\n"
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def answers(asks: Sequence[Ask]) -> list[str]:
        rows = [prompt_ids(messages) for messages, _ in asks]
        widths = [(0, len(r) + tokens) for r, (_, tokens) in zip(rows, asks)]
        out = [""] * len(asks)
        for tokens in sorted({t for _, t in asks}):
            order = sorted((i for i, (_, t) in enumerate(asks) if t == tokens), key=lambda i: -len(rows[i]))
            for batch in batching.cut(order, widths):
                ids, mask, _ = left_padded([rows[i] for i in batch], int(pad or 0), model.device)
                with torch.inference_mode():
                    new = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens,
                                         do_sample=False, pad_token_id=pad)[:, ids.shape[1]:]
                for i, row in zip(batch, new.tolist()):
                    end = next((n + 1 for n, t in enumerate(row) if t in stops), len(row))
                    out[i] = tokenizer.decode(row[:end], skip_special_tokens=True)
                CALLS[0] += 1
                advance(len(batch))
        return out

    return answers


def served_answers(endpoint: "Endpoint", in_flight: int) -> Answers:
    """Prompts → a served model's answers, `in_flight` requests at once (the server batches them)."""
    from engine.progress import advance

    def ask(one: Ask) -> str:
        text = endpoint.chat(*one)
        CALLS[0] += 1
        advance(1)
        return text

    return lambda asks: endpoint.each(ask, asks, in_flight)


class ListwiseReranker(Reranker):
    """`llm-list:NAME_OR_DIR` or `llm-list:http://HOST:PORT/v1#MODEL`; `rounds` switches the sliding window
    for grouped voting. Scores are n − position (window) or votes (voting); a window whose answer names no
    candidate keeps its input order and is counted (`unread`)."""

    pointwise = False

    def __init__(self, spec: "RerankerSpec") -> None:
        from engine.core.ranking.rerankers.endpoint import IN_FLIGHT, Endpoint, is_served
        o = spec.kwargs
        rows = o.get("batch_size")
        if is_served(spec.arg):
            answers = served_answers(Endpoint.parse(spec.arg), min(IN_FLIGHT, rows or IN_FLIGHT))
        else:
            from engine.core.ranking.rerankers.fingerprint import model_key
            from engine.core.ranking.rerankers.llm_prefix import Batching
            answers = local_answers(spec.arg, model_key(spec),
                                    Batching(rows or BATCH_ROWS, o.get("batch_tokens")))
        self.lister = Listwise(answers, o.get("instruction"))
        self.rounds = o.get("rounds")
        self.affected = 0
        super().__init__(spec, rounds=self.rounds, lister=self.lister)

    def rank(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[Listed]:
        """Each (query, candidates) ranked, every independent window of a step asked together; a query with a
        window whose answer named no candidate is counted, and said after the 1st, 10th, 100th … such query
        (the counts so far as if the queries had been ranked one after another)."""
        from engine.progress import warn
        unparsed, windows = self.lister.unparsed, self.lister.windows
        out = self.lister.rank(items, self.rounds)
        for listed in out:
            unparsed, windows = unparsed + listed.unread, windows + listed.windows
            if listed.unread:
                self.affected += 1
                if self.affected in WARN_AT:
                    warn(f"{self.spec}: {unparsed} of {windows} windows so far ({self.affected} queries) had an "
                         "answer naming no candidate; they kept their input order")
        return out

    def _score(self, query: str, docs: list[str], kind: str) -> np.ndarray:
        return self.rank([(query, docs)])[0].scores

    def _score_batch(self, items: list[Item]) -> list[np.ndarray]:
        return [listed.scores for listed in self.rank([(q, docs) for q, docs, _ in items])]

    def unread(self) -> tuple[int, int]:
        return self.lister.unparsed, self.lister.windows


def llm_list_reranker(spec: "RerankerSpec") -> Reranker:
    return ListwiseReranker(spec)
