"""`cross:` on onnxruntime on a CPU: the cross-encoder's classifier exported once into the model cache (as the
text encoder's query side is, `engine.core.encoders.onnx_text`), then scored with `tokenizers` and an
onnxruntime session — no torch, no sentence-transformers in a process that finds the export. The pairs are
tokenized as the model's tokenizer does (its pair template, longest-first truncation to the max length), run in
batches of similar length, and read as the raw logit (the last label of a two-label model), as on torch.
Torch stays for training and for a GPU.

`dtype` int8 (`--rerank-dtype int8`): onnxruntime's dynamic quantization of the exported graph, written once beside
the float export. The un-fused graph is quantized (a graph already fused for float32 holds contrib operators the
quantizer does not rewrite), and onnxruntime fuses the quantized one when the session starts.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

EXPORT_VERSION = 1
MODEL_FILES = {"float32": "model.onnx", "int8": "model.int8.onnx"}
"""The graph each `prompts.DTYPES` scores with, in one export folder (tokenizer and config shared)."""


def runtime(identity: str, max_length: int | None, dtype: str, name: str) -> str:
    """Where a cross-encoder's scores are computed, known without loading it (what its fingerprint names):
    "onnx" on a CPU with onnxruntime where its export is not known to fail, else "torch". int8 is onnxruntime's
    alone: asked of a torch path, it is refused in one line (before any model loads)."""
    from engine.core.encoders.device import on_cpu
    from engine.core.encoders.onnx_text import available
    from engine.errors import EngineError, opt
    cpu, ort = on_cpu(), available()
    onnx = cpu and ort and not (export_dir(identity, max_length) / "unsupported").exists()
    if dtype != "float32" and not onnx:
        why = ("it runs on a GPU, on torch (fp16 autocast there)" if not cpu else
               "onnxruntime, onnx and tokenizers are not all installed, or ENGINE_ONNX is 0" if not ort else
               "it could not be exported to ONNX (it reranks on torch)")
        raise EngineError(f"{opt('rerank_dtype')} {dtype} quantizes cross-encoder {name} for onnxruntime on a CPU, "
                          f"and {why}; leave out {opt('rerank_dtype')}")
    return "onnx" if onnx else "torch"


def export_dir(identity: str, max_length: int | None) -> Path:
    """The export of one model (its files' identity, `fingerprint.model_key`) at one max length."""
    from engine.core.encoders.base import cache_dir
    key = hashlib.sha1(json.dumps([EXPORT_VERSION, identity, max_length]).encode()).hexdigest()[:16]
    return cache_dir() / "onnx" / f"cross-{key}"


def export(ce, target: Path, dtype: str = "float32") -> bool:
    """Export a loaded CrossEncoder's classifier to `target` as the graph `dtype` scores with (float32: fused
    for onnxruntime; int8: quantized); False where it has no fast tokenizer."""
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

    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        raw, done = Path(tmp) / "raw.onnx", Path(tmp) / "model.onnx"
        torch.onnx.export(Logits().eval(), tuple(sample[n] for n in names), str(raw), input_names=names,
                          output_names=["logits"], dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names},
                                                                 "logits": {0: "batch"}},
                          opset_version=17, dynamo=False)
        (fuse if dtype == "float32" else quantize)(raw, done)
        tok.backend_tokenizer.save(str(Path(tmp) / "tokenizer.json"))
        os.replace(Path(tmp) / "tokenizer.json", target / "tokenizer.json")
        os.replace(done, target / MODEL_FILES[dtype])
    write_json(target / "config.json", {"version": EXPORT_VERSION, "inputs": names,
                                        "max_length": int(ce.max_length or tok.model_max_length),
                                        "pad_id": int(tok.pad_token_id or 0)})
    return True


def fuse(raw: Path, out: Path) -> None:
    """The graph onnxruntime's extended optimizations make of `raw` (fused once here, not per session)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(out)
    ort.InferenceSession(str(raw), opts, providers=["CPUExecutionProvider"])


def quantize(raw: Path, out: Path) -> None:
    """int8 weights for every MatMul of the un-fused graph `raw`, one scale per output channel; activations
    quantized per batch as it runs (dynamic). A quantizer's failure is one line: the float graph still serves."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from engine.errors import EngineError, opt
    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer logs advice on the root logger
    try:
        quantize_dynamic(str(raw), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])
    except Exception as exc:  # noqa: BLE001  (any quantizer failure: said, the float32 path unaffected)
        raise EngineError(f"the cross-encoder could not be quantized to int8 ({type(exc).__name__}: "
                          f"{str(exc)[:160]}); leave out {opt('rerank_dtype')}") from None
    finally:
        logging.getLogger().setLevel(quiet)


class OnnxCross:
    """A tokenizer and an onnxruntime session: (query, document) pairs → raw logits (float64)."""

    def __init__(self, folder: Path, dtype: str = "float32") -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from engine.core.encoders.onnx_text import session_options
        self.config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=int(self.config["max_length"]), strategy="longest_first")
        self.tokenizer.no_padding()
        self.dtype = dtype  # int8: the quantized graph, fused by onnxruntime as the session starts
        self.session = ort.InferenceSession(str(folder / MODEL_FILES[dtype]),
                                            session_options(optimized=dtype == "float32"),
                                            providers=["CPUExecutionProvider"])

    def feed(self, enc: Sequence, rows: Sequence[int]) -> dict[str, np.ndarray]:
        """The graph's inputs for the encodings `enc[rows]`, right-padded to the longest of them."""
        width = max(len(enc[i].ids) for i in rows)
        pad = int(self.config["pad_id"])
        feed = {n: np.full((len(rows), width), pad if n == "input_ids" else 0, dtype=np.int64)
                for n in self.config["inputs"]}
        for r, i in enumerate(rows):
            e, n = enc[i], len(enc[i].ids)
            feed["input_ids"][r, :n] = e.ids
            if "attention_mask" in feed:
                feed["attention_mask"][r, :n] = 1
            if "token_type_ids" in feed:
                feed["token_type_ids"][r, :n] = e.type_ids
        return feed

    def __call__(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> np.ndarray:
        from engine.progress import advance
        enc = self.tokenizer.encode_batch([(q, d) for q, d in pairs]) if pairs else []
        out = np.zeros(len(enc), dtype=np.float64)
        order = sorted(range(len(enc)), key=lambda i: -len(enc[i].ids))
        for at in range(0, len(order), max(1, batch_size)):
            rows = order[at:at + batch_size]
            logits = self.session.run(None, self.feed(enc, rows))[0]
            out[rows] = logits[:, -1] if logits.ndim == 2 else logits
            advance(len(rows))
        return out


def onnx_cross(name: str, identity: str, max_length: int | None, load_torch,
               dtype: str = "float32") -> "OnnxCross | None":
    """The ONNX scorer of cross-encoder `name` with `dtype` weights, exported on first use from `load_torch()`
    (the CrossEncoder), or None where it cannot be (then the caller scores on torch)."""
    from engine.errors import EngineError
    folder = export_dir(identity, max_length)
    if (folder / "unsupported").exists():
        return None
    if not ((folder / "config.json").is_file() and (folder / MODEL_FILES[dtype]).is_file()):
        from engine.progress import info, warn
        how = "to ONNX" if dtype == "float32" else f"to ONNX, {dtype} (quantized)"
        info(f"exporting cross-encoder {name} {how} for torch-free CPU reranking (once, into {folder})")
        try:
            ok = export(load_torch(), folder, dtype)
        except EngineError:  # the quantizer's failure: the float export stays usable
            raise
        except Exception as exc:  # noqa: BLE001  (an exporter failure must not stop reranking: torch does it)
            warn(f"ONNX export of cross-encoder {name} failed ({type(exc).__name__}: {str(exc)[:120]}); "
                 "it reranks on torch")
            ok = False
        if not ok:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "unsupported").write_text("this cross-encoder reranks on torch\n")
            return None
    return OnnxCross(folder, dtype)
