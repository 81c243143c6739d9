"""`llm:NAME_OR_DIR`: a causal LM as a pointwise reranker. Each (query, document) is scored by the log-odds
log P("yes") − log P("no") of the next token after the prompt (`engine.core.ranking.rerankers.prompts`): the order of
P("yes") that Qwen3-Reranker publishes, without the float saturation of a probability near 1.

Prompts are tokenized as head + document + tail, the document alone cut to the max length; a query's candidates
run in batches sorted by length, padded on the left (the last position is every row's next token), with
position ids that skip the padding, so a score does not depend on its batch. `llm:http://HOST:PORT/v1#MODEL`
asks a served model instead (`engine.core.ranking.rerankers.endpoint`).
"""
from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from engine.core.ranking.rerankers.base import Item, Reranker, split
from engine.core.ranking.rerankers.packaged import packaged_path
from engine.core.ranking.rerankers.prompts import DEFAULT_INSTRUCTION, Prompt, default_template, template_text
from engine.errors import EngineError, opt

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.llm_prefix import Batching
    from engine.core.ranking.rerankers.spec import RerankerSpec

BATCH_SIZE = 16
MAX_LENGTH = 1024          # tokens of a whole prompt; only the document is cut to fit
SERVED_CHARS_PER_TOKEN = 4  # a served model's document is cut by characters (no tokenizer here)


def model_dtype(device: str):
    """bf16 on a CUDA GPU that has it (fp16 otherwise), float32 elsewhere."""
    import torch
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def source_of(name: str) -> tuple[str, dict, bool]:
    """(folder or hub id, extra from_pretrained arguments, is local): a .gguf file loads from its folder."""
    path = Path(packaged_path(name)).expanduser()
    if path.suffix.lower() == ".gguf":
        return str(path.parent), {"gguf_file": path.name}, True
    return (str(path), {}, True) if path.exists() else (name, {}, False)


@functools.lru_cache(maxsize=2)
def load_causal_lm(name: str, device: str, identity: str = ""):
    """(model, tokenizer) of a causal LM, eval mode, on `device`; a load failure is one line. One per name,
    device and `identity` (`fingerprint.model_key`: replaced on disk, it is loaded again) per process."""
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    src, extra, local = source_of(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=local, **extra)
        model = AutoModelForCausalLM.from_pretrained(src, local_files_only=local, dtype=model_dtype(device), **extra)
    except Exception as exc:
        hint = "" if local else f" Without a network, give a local folder ({opt('rerank')} llm:/path/to/model)"
        raise EngineError(f"causal LM {name!r} could not be loaded ({type(exc).__name__}: {str(exc)[:200]}).{hint}"
                          ) from None
    tokenizer.padding_side = "left"
    return model.to(device).eval(), tokenizer


def answer_ids(tokenizer, name: str) -> tuple[int, int]:
    """The token ids of "yes" and "no" (each must be one token)."""
    ids = []
    for word in ("yes", "no"):
        i = tokenizer.convert_tokens_to_ids(word)
        if i is None or i == tokenizer.unk_token_id:
            enc = tokenizer.encode(word, add_special_tokens=False)
            if len(enc) != 1:
                raise EngineError(f"reranker model {name}: its tokenizer has no single token for {word!r}")
            i = enc[0]
        ids.append(int(i))
    return ids[0], ids[1]


def left_padded(rows: list[list[int]], pad: int, device):
    """Left-padded input ids, attention mask and position ids (0 at each row's first real token): every row's
    last position is its next token, and a row's positions and attended tokens are those it has alone."""
    import torch
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for n, r in enumerate(rows):
        if r:
            ids[n, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[n, width - len(r):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


SAID: set[tuple[str, str]] = set()
"""Templates whose fallback to whole prompts was said (once per process)."""


def prefix_scorer(lm: "PointwiseLM", name: str):
    """A `PrefixScorer` when the query comes before the document and the model's cache can be reused as it is;
    None (whole prompts, said once) otherwise."""
    from engine.core.ranking.rerankers.llm_prefix import PrefixScorer, shares
    why = ("its template puts the query after the document" if "{query}" in lm.prompt.tail else
           "" if shares(lm.model) else "its attention is not over the whole past")
    if why:
        if (name, why) not in SAID:
            SAID.add((name, why))
            from engine.progress import info
            info(f"reranker llm:{name}: every prompt is run whole ({why}, so no prefix is shared)")
        return None
    return PrefixScorer(lm.model, lm.yes, lm.no, lm.pad, lm.batching)


class PointwiseLM:
    """Prompt token ids and their batched log-odds (the two halves a benchmark times apart)."""

    def __init__(self, model, tokenizer, prompt: Prompt, name: str, batching: "Batching | int", max_length: int,
                 share_prefix: bool = True) -> None:
        from engine.core.ranking.rerankers.llm_prefix import Batching
        batching = Batching(batching) if isinstance(batching, int) else batching
        self.model, self.tokenizer, self.prompt = model, tokenizer, prompt
        self.batching, self.batch_size, self.max_length = batching, batching.size, max_length
        self.yes, self.no = answer_ids(tokenizer, name)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad = int(pad or 0)
        self.keep_one = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.sharing = prefix_scorer(self, name) if share_prefix else None

    def parts(self, query: str, docs: Sequence[str]) -> tuple[list[int], list[list[int]]]:
        """(head ids, each candidate's own ids: its document cut to what the max length leaves, then the tail)."""
        head, space, tail = self.prompt.parts(query)
        ids = lambda text: self.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        h, t = ids(head), ids(tail)
        room = max(0, self.max_length - len(h) - len(t))
        body = self.tokenizer([space + d for d in docs], add_special_tokens=False)["input_ids"] if docs else []
        return h, [d[:room] + t for d in body]

    def encode(self, query: str, docs: Sequence[str]) -> list[list[int]]:
        """head + document (cut to what the max length leaves) + tail, as token ids."""
        h, rest = self.parts(query, docs)
        return [h + r for r in rest]

    def batches(self, seqs: list[list[int]]) -> list[list[int]]:
        """Positions grouped into batches, longest first (less padding; a too-long batch fails first)."""
        by_length = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        return self.batching.cut(by_length, [(0, len(s)) for s in seqs])

    def padded(self, rows: list[list[int]]):
        return left_padded(rows, self.pad, self.model.device)

    def next_token_logits(self, rows: list[list[int]]):
        import torch
        ids, mask, positions = self.padded(rows)
        extra = {"logits_to_keep": 1} if self.keep_one else {}
        with torch.inference_mode():
            return self.model(input_ids=ids, attention_mask=mask, position_ids=positions, **extra).logits[:, -1, :]

    def log_odds(self, seqs: list[list[int]]) -> np.ndarray:
        out = np.zeros(len(seqs), dtype=np.float64)
        from engine.progress import advance
        for batch in self.batches(seqs):
            logits = self.next_token_logits([seqs[i] for i in batch]).float()
            out[batch] = (logits[:, self.yes] - logits[:, self.no]).cpu().numpy()
            advance(len(batch))
        return out

    def score_queries(self, items: Sequence[tuple[str, Sequence[str]]]) -> np.ndarray:
        """The scores of every (query, candidates), flat, in order: each query's head run once and shared by
        its candidates where the template and the model allow (`llm_prefix`), the whole prompts otherwise."""
        groups = [self.parts(q, docs) for q, docs in items]
        if self.sharing is not None and all(h for h, _ in groups):
            return self.sharing.log_odds(groups)
        return self.log_odds([h + r for h, rest in groups for r in rest])

    def score(self, query: str, docs: Sequence[str]) -> np.ndarray:
        return self.score_queries([(query, docs)])


class LocalLLMReranker(Reranker):
    """`llm:NAME_OR_DIR` (a folder, a hub id, a .gguf file) loaded here: the prompts of a batch's queries are
    scored together, in batches sorted by length across queries (less padding than one query at a time)."""

    def __init__(self, spec: "RerankerSpec") -> None:
        from engine.core.encoders.device import resolve_device
        from engine.core.ranking.rerankers.fingerprint import model_key
        o, name = spec.kwargs, spec.arg
        template = o.get("template") or default_template(name)
        device = resolve_device()
        model, tokenizer = load_causal_lm(name, device, model_key(spec))
        prompt = Prompt.from_template(template_text(template, tokenizer, name),
                                      o.get("instruction") or DEFAULT_INSTRUCTION)
        from engine.core.ranking.rerankers.llm_prefix import Batching
        batching = Batching(o.get("batch_size", BATCH_SIZE), o.get("batch_tokens"))
        self.lm = PointwiseLM(model, tokenizer, prompt, name, batching,
                              o.get("max_length", MAX_LENGTH))
        super().__init__(spec, device=device, template=template, max_length=self.lm.max_length, scorer=self.lm)

    def _score(self, query: str, docs: list[str], kind: str) -> np.ndarray:
        return self.lm.score(query, docs)

    def _score_batch(self, items: list[Item]) -> list[np.ndarray]:
        return split(self.lm.score_queries([(q, docs) for q, docs, _ in items]), items)


class ServedLLMReranker(Reranker):
    """`llm:http://HOST:PORT/v1#MODEL`: `chat` sends messages to /chat/completions; `qwen3-reranker` or a
    FILE sends the prompt text to /completions; both read the next token's "yes"/"no" logprobs (an answer
    that cannot be read scores NaN). A batch's requests are in flight together, across queries."""

    def __init__(self, spec: "RerankerSpec") -> None:
        from engine.core.ranking.rerankers.endpoint import Endpoint
        o = spec.kwargs
        self.endpoint = Endpoint.parse(spec.arg)
        template = o.get("template") or default_template(self.endpoint.model)
        instruction = o.get("instruction") or DEFAULT_INSTRUCTION
        self.chars = o.get("max_length", MAX_LENGTH) * SERVED_CHARS_PER_TOKEN
        self.chat = template == "chat"
        if self.chat:
            from engine.core.ranking.rerankers.prompts import USER_TURN
            self.prompt = Prompt.from_template(USER_TURN, instruction)
        else:
            self.prompt = Prompt.from_template(template_text(template), instruction)
        super().__init__(spec, served=self.endpoint.base, model=self.endpoint.model, template=template)

    def ask(self, pair: tuple[str, str]) -> float:
        from engine.core.ranking.rerankers.prompts import chat_messages
        query, doc = pair
        from engine.progress import advance
        text = self.prompt.text(query, doc[:self.chars])
        score = self.endpoint.yes_no_chat(chat_messages(text)) if self.chat else self.endpoint.yes_no_completion(text)
        advance(1)
        return score

    def _score(self, query: str, docs: list[str], kind: str) -> np.ndarray:
        return self._score_batch([(query, docs, kind)])[0]

    def _score_batch(self, items: list[Item]) -> list[np.ndarray]:
        scores = self.endpoint.each(self.ask, [(q, d) for q, docs, _ in items for d in docs])
        return split(np.asarray(scores, dtype=np.float64), items)


def llm_reranker(spec: "RerankerSpec") -> Reranker:
    """`llm:NAME_OR_DIR` or `llm:http://HOST:PORT/v1#MODEL`; `template`: qwen3-reranker, chat or a FILE
    (default by the model's name), `instruction` the task's."""
    from engine.core.ranking.rerankers.endpoint import is_served
    return ServedLLMReranker(spec) if is_served(spec.arg) else LocalLLMReranker(spec)
