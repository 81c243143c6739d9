"""Prefix sharing for pointwise LLM reranking: a query's prompt head (system turn, instruction, query: every
token before the document) is the same for all of its candidates, so it runs once and its key/value cache is
reused for each candidate, which then costs only its own tokens and the tail.

A batch may mix queries: each row's cache is its query's head, right-aligned to the batch's longest head (the
gap zero and masked out), its candidate tokens left-padded after it, positions continuing from its own head's
length — the positions, the attended tokens and so the scores of the plain forward pass over the whole prompt.
Where the model's logits are a plain linear reading of the last hidden state, the log-odds are that state times
the one row `W_yes − W_no` (no vocabulary projection).

Only models whose every layer attends to the whole past share (a sliding window or a recurrent state would
need its own cache layout): `shares(model)` says which.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

import numpy as np

Group = tuple[list[int], Sequence[list[int]]]
"""(head token ids, each candidate's own token ids: document and tail) of one query."""


@dataclass(frozen=True)
class Batching:
    """How prompts are grouped into forward passes: `size` rows at most, or, with `tokens`, as many rows as keep
    rows × padded width within that many tokens (a GPU's memory bound: long prompts in small batches, short
    ones in large); always at least one row."""
    size: int
    tokens: int | None = None

    def cut(self, order: Sequence[int], widths: Sequence[tuple[int, int]]) -> list[list[int]]:
        """`order` (longest first) cut into batches; `widths[i]`: (row i's shared head, its own tokens), the
        padded width of a batch being its longest head plus its longest own part."""
        out: list[list[int]] = []
        batch: list[int] = []
        head = own = 0
        for i in order:
            h, o = max(head, widths[i][0]), max(own, widths[i][1])
            full = (len(batch) >= self.size if self.tokens is None else (len(batch) + 1) * (h + o) > self.tokens)
            if batch and full:
                out.append(batch)
                batch, (h, o) = [], widths[i]
            batch.append(i)
            head, own = h, o
        if batch:
            out.append(batch)
        return out


def shares(model) -> bool:
    """Whether a head's cache can be reused as it is: every layer full attention, a DynamicCache-style model."""
    config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    kinds = getattr(config, "layer_types", None)
    if kinds is not None and any(k != "full_attention" for k in kinds):
        return False
    if kinds is None and getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    return bool(getattr(model, "_supports_cache_class", True)) and hasattr(model, "base_model_prefix")


def yes_no_row(model, yes: int, no: int):
    """(body, W_yes − W_no, b_yes − b_no) where the logits are `lm_head(last hidden state)` with nothing after
    (no soft-capping, no scale); None otherwise (the full model's logits are read instead)."""
    import torch
    config = model.config
    head = model.get_output_embeddings()
    if (not isinstance(head, torch.nn.Linear) or getattr(config, "final_logit_softcapping", None)
            or getattr(config, "logit_scale", None) not in (None, 1, 1.0)):
        return None
    body = getattr(model, model.base_model_prefix, None)
    if body is None:
        return None
    w = (head.weight[yes] - head.weight[no]).detach()
    b = (head.bias[yes] - head.bias[no]).detach() if head.bias is not None else None
    return body, w, b


class PrefixScorer:
    """Log-odds of "yes" over "no" with each query's head run once; rows of a batch may come from any query."""

    def __init__(self, model, yes: int, no: int, pad: int, batching: Batching) -> None:
        self.model, self.yes, self.no, self.pad, self.batching = model, yes, no, pad, batching
        self.row = yes_no_row(model, yes, no)
        body = self.row[0] if self.row else model
        self.cache_arg = "cache" if "cache" in inspect.signature(body.forward).parameters else "past_key_values"

    def head_cache(self, head: list[int]) -> list[tuple]:
        """Each layer's (keys, values) of one head, shape (1, heads, len(head), dim)."""
        import torch
        ids = torch.tensor([head], dtype=torch.long, device=self.model.device)
        body = self.row[0] if self.row else self.model
        with torch.inference_mode():
            out = body(input_ids=ids, use_cache=True)
        cache = getattr(out, "cache", None)
        cache = out.past_key_values if cache is None else cache
        return [(layer.keys, layer.values) for layer in cache.layers]

    def log_odds(self, groups: Sequence[Group]) -> np.ndarray:
        """One score per candidate, the groups' candidates in order."""
        from engine.progress import advance
        rows = [(g, s) for g, (_, suffixes) in enumerate(groups) for s in suffixes]
        out = np.zeros(len(rows), dtype=np.float64)
        if not rows:
            return out
        heads = [self.head_cache(h) if len(s) else None for h, s in groups]
        lengths = [len(h) for h, _ in groups]
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][1]))
        for batch in self.batching.cut(order, [(lengths[g], len(s)) for g, s in rows]):
            out[batch] = self.batch_log_odds([rows[i] for i in batch], heads, lengths)
            advance(len(batch))
        return out

    def batch_log_odds(self, rows: list[tuple[int, list[int]]], heads: list, lengths: list[int]) -> np.ndarray:
        import torch
        from transformers import DynamicCache
        device = self.model.device
        width = max(lengths[g] for g, _ in rows)
        tail = max(len(s) for _, s in rows)
        ids = torch.full((len(rows), tail), self.pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width + tail), dtype=torch.long)
        positions = torch.zeros((len(rows), tail), dtype=torch.long)
        for n, (g, s) in enumerate(rows):
            ids[n, tail - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[n, width - lengths[g]:width] = 1
            mask[n, width + tail - len(s):] = 1
            positions[n, tail - len(s):] = torch.arange(lengths[g], lengths[g] + len(s))
        layers = []
        for layer, (k0, v0) in enumerate(heads[rows[0][0]]):
            if all(g == rows[0][0] for g, _ in rows):  # one query: its head, expanded across the batch
                k, v = k0.expand(len(rows), -1, -1, -1), v0.expand(len(rows), -1, -1, -1)
            else:
                k = k0.new_zeros((len(rows), k0.shape[1], width, k0.shape[3]))
                v = v0.new_zeros((len(rows), v0.shape[1], width, v0.shape[3]))
                for n, (g, _) in enumerate(rows):
                    hk, hv = heads[g][layer]
                    k[n, :, width - lengths[g]:] = hk[0]
                    v[n, :, width - lengths[g]:] = hv[0]
            layers.append((k, v))
        inputs = dict(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                      use_cache=True, **{self.cache_arg: DynamicCache(layers)})
        with torch.inference_mode():
            if self.row:
                body, w, b = self.row
                last = body(**inputs).last_hidden_state[:, -1, :]
                diff = last @ w + (b if b is not None else 0)
            else:
                logits = self.model(**inputs, logits_to_keep=1).logits[:, -1, :]
                diff = logits[:, self.yes] - logits[:, self.no]
        return diff.float().cpu().numpy()
