"""`llm-list:NAME_OR_DIR`: a chat LLM as a listwise reranker (RankGPT's sliding window, or grouped voting with
`rounds`), generating greedily here with transformers or asking a served model (`llm-list:http://…/v1#MODEL`).
The windowing and the parsing live in `engine.core.ranking.rerankers.listwise`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.core.ranking.rerankers.base import Reranker
from engine.core.ranking.rerankers.listwise import Listwise

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec

WARN_AT = (1, 10, 100, 1000, 10_000)
"""Queries with an unreadable window after which the running count is reported (a bounded number of lines)."""


def local_answer(name: str, identity: str = ""):
    """(messages, most new tokens) → the greedy answer of a causal LM loaded here (its chat template, or the
    turns' plain text for a model without one)."""
    import torch

    from engine.core.encoders.device import resolve_device
    from engine.core.ranking.rerankers.llm import load_causal_lm
    model, tokenizer = load_causal_lm(name, resolve_device(), identity)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def answer(messages: list[dict], max_new_tokens: int) -> str:
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = "\n\n".join(m["content"] for m in messages) + "\n\n"
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).to(model.device)
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
        return tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)

    return answer


class ListwiseReranker(Reranker):
    """`llm-list:NAME_OR_DIR` or `llm-list:http://HOST:PORT/v1#MODEL`; `rounds` switches the sliding window
    for grouped voting. Scores are n − position (window) or votes (voting); a window whose answer names no
    candidate keeps its input order and is counted (`unread`)."""

    pointwise = False

    def __init__(self, spec: "RerankerSpec") -> None:
        from engine.core.ranking.rerankers.endpoint import Endpoint, is_served
        o = spec.kwargs
        if is_served(spec.arg):
            answer = Endpoint.parse(spec.arg).chat
        else:
            from engine.core.ranking.rerankers.fingerprint import model_key
            answer = local_answer(spec.arg, model_key(spec))
        self.lister = Listwise(answer, o.get("instruction"))
        self.rounds = o.get("rounds")
        self.affected = 0
        super().__init__(spec, rounds=self.rounds, lister=self.lister)

    def _score(self, query: str, docs: list[str], kind: str) -> np.ndarray:
        from engine.progress import warn
        before = self.lister.unparsed
        out = self.lister.scores(query, docs, self.rounds)
        if self.lister.unparsed > before:
            self.affected += 1
            if self.affected in WARN_AT:
                warn(f"{self.spec}: {self.lister.unparsed} of {self.lister.windows} windows so far ({self.affected} "
                     "queries) had an answer naming no candidate; they kept their input order")
        return out

    def unread(self) -> tuple[int, int]:
        return self.lister.unparsed, self.lister.windows


def llm_list_reranker(spec: "RerankerSpec") -> Reranker:
    return ListwiseReranker(spec)
