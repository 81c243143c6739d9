"""What a generative reranker is asked, and the options that shape it, checked before any model loads.

A pointwise prompt is a template with `{instruction}`, `{query}` and `{document}`: Qwen3-Reranker's published
format (`qwen3-reranker`), the model's own chat template asking the same yes/no question (`chat`), or a user's
FILE. The document is the one part cut to fit the max length, so a prompt is split around it: a head (system
turn, instruction, query) and a tail (the turn's end, the opened answer), tokenized once per query.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError, opt
from engine.io.options import Int, Range

JUDGE = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
         'Note that the answer can only be "yes" or "no".')
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
USER_TURN = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
QWEN3_RERANKER = ("<|im_start|>system\n" + JUDGE + "<|im_end|>\n<|im_start|>user\n" + USER_TURN
                  + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
"""Qwen3-Reranker's prompt, character for character as its model card builds it (prefix, pair, suffix)."""
TEMPLATES = ("qwen3-reranker", "chat")
MAX_INSTRUCTION = 4000
ROUNDS = Int(1, 100)
"""llm-list: grouped-voting rounds: --rerank-rounds and `rerank(rounds=)`."""
MAX_ROUNDS = int(ROUNDS.hi)
BATCH_TOKENS = Int(1, 16_777_216)
"""llm: tokens of one forward pass, llm-list: of one generate call: --rerank-batch-tokens and
`rerank(batch_tokens=)`."""
DTYPES = ("float32", "int8")
"""cross: weights of the CPU (onnxruntime) scorer: --rerank-dtype and `rerank(dtype=)`; the first is the default.
int8 is onnxruntime's dynamic quantization of the exported graph (`cross_onnx`), a CPU's alone."""


def default_template(model: str) -> str:
    """`qwen3-reranker` for a model whose name says it is one, `chat` otherwise."""
    return "qwen3-reranker" if "qwen3-reranker" in model.lower() else "chat"


def check_template(value: object, label: str = "") -> str:
    """`qwen3-reranker`, `chat`, or a readable FILE holding `{query}` and `{document}` once each."""
    label = label or opt("rerank_template")
    if not isinstance(value, str) or not value.strip():
        raise EngineError(f"{label} must be qwen3-reranker, chat or a template FILE, not {value!r}")
    if value.strip().lower() in TEMPLATES:
        return value.strip().lower()
    path = Path(value).expanduser()
    if not path.is_file():
        raise EngineError(f"{label} {value}: not qwen3-reranker or chat, and no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EngineError(f"{label} {value}: cannot be read as UTF-8 text ({exc})") from None
    for field in ("{query}", "{document}"):
        if text.count(field) != 1:
            raise EngineError(f"{path}: a template holds {field} exactly once (it has {text.count(field)}); "
                              "{instruction} is optional")
    return str(path)


def check_instruction(value: object, label: str = "") -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_INSTRUCTION:
        raise EngineError(f"{label or opt('rerank_instruction')} must be a non-empty text of at most {MAX_INSTRUCTION} "
                          f"characters, not {str(value)[:40]!r}")
    return value.strip()


def check_dtype(value: object, label: str = "") -> str:
    """One of `DTYPES` (any case)."""
    if not isinstance(value, str) or value.strip().lower() not in DTYPES:
        raise EngineError(f"{label or opt('rerank_dtype')} must be {' or '.join(DTYPES)}, not {value!r}")
    return value.strip().lower()


def check_in(name: str, declared: Range, flag: str = ""):
    """A check of a numeric option against its declared range, named by the caller's label, else `flag`, else
    its name."""
    def check(value: object, label: str = "") -> int:
        return declared.check(name, value, label=label or flag or f"reranker option {name}", text=False)
    return check


OPTION_CHECKS = {
    "template": check_template,
    "instruction": check_instruction,
    "rounds": check_in("rounds", ROUNDS, opt("rerank_rounds")),
    "batch_size": check_in("batch_size", Int(1, 4096)),
    "max_length": check_in("max_length", Int(1, 131_072)),
    "batch_tokens": check_in("batch_tokens", BATCH_TOKENS, opt("rerank_batch_tokens")),
    "dtype": check_dtype,
}
"""Each reranker option a registry entry may accept → the check that returns its clean value."""


@dataclass(frozen=True)
class Prompt:
    """A pointwise template split around `{document}`; `{query}` and `{instruction}` filled per query."""
    head: str
    tail: str
    instruction: str

    @classmethod
    def from_template(cls, template: str, instruction: str) -> "Prompt":
        head, _, tail = template.partition("{document}")
        return cls(head.replace("{instruction}", instruction), tail.replace("{instruction}", instruction),
                   instruction)

    def parts(self, query: str) -> tuple[str, str, str]:
        """(head, spacing, tail) for one query; `spacing` (the head's trailing blanks) goes before the document,
        so a BPE tokenizer sees " word" as it would in the whole prompt."""
        head = self.head.replace("{query}", query)
        stripped = head.rstrip(" ")
        return stripped, head[len(stripped):], self.tail.replace("{query}", query)

    def text(self, query: str, document: str) -> str:
        """The whole prompt (what a server that takes a text is sent)."""
        head, space, tail = self.parts(query)
        return head + space + document + tail


def chat_messages(user: str) -> list[dict]:
    return [{"role": "system", "content": JUDGE}, {"role": "user", "content": user}]


def render_chat(tokenizer, name: str) -> str:
    """The yes/no question through the tokenizer's own chat template, placeholders left in; a template that
    refuses a system turn gets the judge's words at the top of the user turn."""
    if not getattr(tokenizer, "chat_template", None):
        raise EngineError(f"reranker model {name} has no chat template; give {opt('rerank_template')} "
                          "qwen3-reranker or a template FILE")
    try:
        return tokenizer.apply_chat_template(chat_messages(USER_TURN), tokenize=False, add_generation_prompt=True)
    except Exception:  # e.g. "System role not supported"
        return tokenizer.apply_chat_template([{"role": "user", "content": JUDGE + "\n\n" + USER_TURN}],
                                             tokenize=False, add_generation_prompt=True)


def template_text(template: str, tokenizer=None, name: str = "") -> str:
    """The template a checked `template` option names, as text with its placeholders."""
    if template == "qwen3-reranker":
        return QWEN3_RERANKER
    if template == "chat":
        return render_chat(tokenizer, name)
    return Path(template).read_text(encoding="utf-8")
