"""`vlm:NAME_OR_DIR`: an image-text-to-text model (the Qwen2-VL / Qwen2.5-VL / Qwen3-VL class) as a pointwise
reranker of image candidates: (caption, image) scored by the log-odds of "yes" over "no" as the next token after
the same judge's question the `llm:` kind asks, the image in the document's place. Each candidate's image is
read from the file the collection recorded; one that cannot be read scores -inf (last), as `embed:` does.
"""
from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.core.ranking.rerankers.base import IMAGE, Reranker
from engine.core.ranking.rerankers.prompts import JUDGE
from engine.errors import EngineError, opt

if TYPE_CHECKING:
    from engine.core.ranking.rerankers.spec import RerankerSpec

BATCH_SIZE = 8
MAX_SIDE = 448   # pixels of an image's longer side before the processor (a bound on its tokens)
DEFAULT_VLM_INSTRUCTION = "Given a search query, retrieve the images that match the query"


@functools.lru_cache(maxsize=1)
def load_vlm(name: str, device: str, identity: str = ""):
    """(model, processor) of an image-text-to-text model, eval mode; a load failure is one line (`identity`:
    `fingerprint.model_key`, so one replaced on disk is loaded again)."""
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from engine.core.ranking.rerankers.llm import model_dtype
    local = Path(name).expanduser().exists()
    src = str(Path(name).expanduser()) if local else name
    try:
        processor = AutoProcessor.from_pretrained(src, local_files_only=local)
        model = AutoModelForImageTextToText.from_pretrained(src, local_files_only=local, dtype=model_dtype(device))
    except Exception as exc:
        hint = "" if local else f" Without a network, give a local folder ({opt('rerank')} vlm:/path/to/model)"
        raise EngineError(f"image-text model {name!r} could not be loaded ({type(exc).__name__}: "
                          f"{str(exc)[:200]}).{hint}") from None
    processor.tokenizer.padding_side = "left"
    return model.to(device).eval(), processor


def vlm_messages(instruction: str, query: str) -> list[dict]:
    """The judge's question with the image as the document."""
    return [{"role": "system", "content": JUDGE},
            {"role": "user", "content": [{"type": "text", "text": f"<Instruct>: {instruction}\n<Query>: {query}\n"
                                                                  "<Document>: "}, {"type": "image"}]}]


def read_image(path: str):
    """The candidate's image, its longer side at most MAX_SIDE; None when it cannot be read."""
    from engine.core.images import ImageReadError, load_image
    try:
        img = load_image(path)
    except ImageReadError:
        return None
    img.thumbnail((MAX_SIDE, MAX_SIDE))
    return img


class PointwiseVLM:
    def __init__(self, model, processor, name: str, instruction: str, batch_size: int) -> None:
        from engine.core.ranking.rerankers.llm import answer_ids
        self.model, self.processor, self.instruction, self.batch_size = model, processor, instruction, batch_size
        self.yes, self.no = answer_ids(processor.tokenizer, name)
        self.keep_one = "logits_to_keep" in inspect.signature(model.forward).parameters

    def prompt(self, query: str) -> str:
        return self.processor.apply_chat_template(vlm_messages(self.instruction, query), tokenize=False,
                                                  add_generation_prompt=True)

    def score(self, query: str, files: list[str]) -> np.ndarray:
        import torch
        out = np.full(len(files), -np.inf)
        text = self.prompt(query)
        from engine.progress import advance
        for start in range(0, len(files), self.batch_size):
            advance(len(files[start:start + self.batch_size]))  # counted as it starts: a skipped batch too
            images = [(start + n, read_image(f)) for n, f in enumerate(files[start:start + self.batch_size])]
            images = [(i, img) for i, img in images if img is not None]
            if not images:
                continue
            batch = self.processor(text=[text] * len(images), images=[img for _, img in images], padding=True,
                                   return_tensors="pt").to(self.model.device)
            if "pixel_values" in batch:
                batch["pixel_values"] = batch["pixel_values"].to(self.model.dtype)
            extra = {"logits_to_keep": 1} if self.keep_one else {}
            with torch.inference_mode():
                logits = self.model(**batch, **extra).logits[:, -1, :].float()
            out[[i for i, _ in images]] = (logits[:, self.yes] - logits[:, self.no]).cpu().numpy()
        return out


class VLMReranker(Reranker):
    """`vlm:NAME_OR_DIR`: image candidates only (a text collection is refused before it loads)."""

    candidates = frozenset({IMAGE})

    def __init__(self, spec: "RerankerSpec") -> None:
        from engine.core.encoders.device import resolve_device
        o = spec.kwargs
        device = resolve_device()
        from engine.core.ranking.rerankers.fingerprint import model_key
        model, processor = load_vlm(spec.arg, device, model_key(spec))
        self.scorer = PointwiseVLM(model, processor, spec.arg, o.get("instruction") or DEFAULT_VLM_INSTRUCTION,
                                   o.get("batch_size", BATCH_SIZE))
        super().__init__(spec, device=device, scorer=self.scorer)

    def _score(self, query: str, files: list[str], kind: str) -> np.ndarray:
        return self.scorer.score(query, files)


def vlm_reranker(spec: "RerankerSpec") -> Reranker:
    return VLMReranker(spec)
