"""`cross:` on onnxruntime on a CPU: the cross-encoder's classifier exported once into the model cache (as the
text encoder's query side is, `engine.core.encoders.onnx_text`), then scored with `tokenizers` and an
onnxruntime session — no torch, no sentence-transformers in a process that finds the export. The pairs are
tokenized as the model's tokenizer does (its pair template, longest-first truncation to the max length), run in
batches of similar length, and read as the raw logit (the last label of a two-label model), as on torch.
Torch stays for training and for a GPU.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

EXPORT_VERSION = 1


def enabled(device: str) -> bool:
    """On a CPU, with onnxruntime, onnx and tokenizers installed and ENGINE_ONNX not 0."""
    from engine.core.encoders.onnx_text import available
    return device == "cpu" and available()


def export_dir(identity: str, max_length: int | None) -> Path:
    """The export of one model (its files' identity, `fingerprint.model_key`) at one max length."""
    from engine.core.encoders.base import cache_dir
    key = hashlib.sha1(json.dumps([EXPORT_VERSION, identity, max_length]).encode()).hexdigest()[:16]
    return cache_dir() / "onnx" / f"cross-{key}"


def export(ce, target: Path) -> bool:
    """Export a loaded CrossEncoder's classifier to `target`; False where it has no fast tokenizer."""
    import torch

    from engine.io.atomic import write_json
    tok, hf = ce.tokenizer, ce.model.eval()
    if not getattr(tok, "is_fast", False):
        return False
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in tok.model_input_names]
    sample = tok([["a short query", "a document"], ["a query", "and a somewhat longer second document"]],
                 padding=True, truncation=True, return_tensors="pt")

    class Logits(torch.nn.Module):  # positional inputs in our order → logits
        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, *inputs):
            return self.hf(**dict(zip(names, inputs))).logits

    import onnxruntime as ort
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        raw, fused = Path(tmp) / "raw.onnx", Path(tmp) / "model.onnx"
        torch.onnx.export(Logits().eval(), tuple(sample[n] for n in names), str(raw), input_names=names,
                          output_names=["logits"], dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names},
                                                                 "logits": {0: "batch"}},
                          opset_version=17, dynamo=False)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        opts.optimized_model_filepath = str(fused)
        ort.InferenceSession(str(raw), opts, providers=["CPUExecutionProvider"])
        os.replace(fused, target / "model.onnx")
    tok.backend_tokenizer.save(str(target / "tokenizer.json"))
    write_json(target / "config.json", {"version": EXPORT_VERSION, "inputs": names,
                                        "max_length": int(ce.max_length or tok.model_max_length),
                                        "pad_id": int(tok.pad_token_id or 0)})
    return True


class OnnxCross:
    """A tokenizer and an onnxruntime session: (query, document) pairs → raw logits (float64)."""

    def __init__(self, folder: Path) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from engine.core.encoders.onnx_text import session_options
        self.config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=int(self.config["max_length"]), strategy="longest_first")
        self.tokenizer.no_padding()
        self.session = ort.InferenceSession(str(folder / "model.onnx"), session_options(optimized=True),
                                            providers=["CPUExecutionProvider"])

    def __call__(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> np.ndarray:
        from engine.progress import advance
        enc = self.tokenizer.encode_batch([(q, d) for q, d in pairs]) if pairs else []
        out = np.zeros(len(enc), dtype=np.float64)
        order = sorted(range(len(enc)), key=lambda i: -len(enc[i].ids))
        pad = int(self.config["pad_id"])
        for at in range(0, len(order), max(1, batch_size)):
            rows = order[at:at + batch_size]
            width = len(enc[rows[0]].ids)
            feed = {n: np.full((len(rows), width), pad if n == "input_ids" else 0, dtype=np.int64)
                    for n in self.config["inputs"]}
            for r, i in enumerate(rows):
                e, n = enc[i], len(enc[i].ids)
                feed["input_ids"][r, :n] = e.ids
                if "attention_mask" in feed:
                    feed["attention_mask"][r, :n] = 1
                if "token_type_ids" in feed:
                    feed["token_type_ids"][r, :n] = e.type_ids
            logits = self.session.run(None, feed)[0]
            out[rows] = logits[:, -1] if logits.ndim == 2 else logits
            advance(len(rows))
        return out


def onnx_cross(name: str, identity: str, max_length: int | None, load_torch) -> "OnnxCross | None":
    """The ONNX scorer of cross-encoder `name`, exported on first use from `load_torch()` (the CrossEncoder),
    or None where it cannot be (then the caller scores on torch)."""
    folder = export_dir(identity, max_length)
    if (folder / "unsupported").exists():
        return None
    if not (folder / "config.json").is_file():
        from engine.progress import info, warn
        info(f"exporting cross-encoder {name} to ONNX for torch-free CPU reranking (once, into {folder})")
        try:
            ok = export(load_torch(), folder)
        except Exception as exc:  # noqa: BLE001  (an exporter failure must not stop reranking: torch does it)
            warn(f"ONNX export of cross-encoder {name} failed ({type(exc).__name__}: {str(exc)[:120]}); "
                 "it reranks on torch")
            ok = False
        if not ok:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "unsupported").write_text("this cross-encoder reranks on torch\n")
            return None
    return OnnxCross(folder)
