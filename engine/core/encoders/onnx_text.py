"""The query side of sentence-transformers models on onnxruntime + `tokenizers`: no torch, no transformers.

Importing sentence-transformers costs ≈ 5 s (it drags in transformers, scikit-learn, torch.distributed),
more than everything else in a one-off `engine search`. The model's transformer is exported once to ONNX
(with torch, when a collection is built, by `engine models --prepare SPEC`, or, said on a status line, by the
first query that needs it) and cached with its tokenizer and pooling settings under
the engine cache (`$ENGINE_CACHE/onnx/`, next to conse's class vectors); later queries load only
onnxruntime and the tokenizer. Embeddings equal the torch ones within 1e-4 (tests/core/test_fast_query.py).
Models whose pipeline is not Transformer → mean/CLS pooling (→ Normalize) stay on torch.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from engine.core.encoders.base import TEXT, Encoder, cache_dir
from engine.io.atomic import publish

EXPORT_VERSION = 1
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def available() -> bool:
    """onnxruntime and onnx (extra `fast`) and tokenizers are installed, and ENGINE_ONNX is not 0."""
    import importlib.util
    return os.environ.get("ENGINE_ONNX", "1") != "0" and all(
        importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx", "tokenizers"))


def export_dir(name: str) -> Path:
    """Cache folder of one model's export, keyed by the model folder and its weights' size and time."""
    from engine.core.encoders.sbert import resolve_model_path
    path = Path(resolve_model_path(name))
    stamp = [str(path.resolve())] if path.exists() else [name]
    for weights in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")) if path.is_dir() else []:
        st = weights.stat()
        stamp.append(f"{weights.name}:{st.st_size}:{int(st.st_mtime)}")
    key = hashlib.sha1(json.dumps([EXPORT_VERSION, *stamp]).encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[-60:]
    return cache_dir() / "onnx" / f"{safe}-{key}"


def export(model, target: Path) -> bool:
    """Export a loaded SentenceTransformer's transformer to `target`; False when its pipeline is not one
    this runner reproduces (then queries stay on torch)."""
    import torch

    from engine.io.atomic import write_json
    modules = list(model)
    kinds = [type(m).__name__ for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        return False
    pooling = modules[1].get_config_dict()
    mode = pooling.get("pooling_mode")  # sentence-transformers 5; older ones set one flag per mode
    if mode is None:
        flags = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
        mode = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}.get(flags[0]) \
            if len(flags) == 1 else None
    dim = pooling.get("embedding_dimension") or pooling.get("word_embedding_dimension")
    if mode not in ("mean", "cls") or not dim:
        return False
    tok = getattr(modules[0], "tokenizer", None)
    if tok is None or not getattr(tok, "is_fast", False):
        return False
    hf = modules[0].auto_model.eval()
    names = [n for n in _INPUTS if n in tok.model_input_names]
    sample = tok(["a short example", "and a somewhat longer second example"], padding=True, return_tensors="pt")
    args = tuple(sample[n] for n in names)

    class Hidden(torch.nn.Module):  # positional inputs in our order → last hidden state
        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, *inputs):
            return self.hf(**dict(zip(names, inputs)))[0]

    import onnx
    import onnxruntime as ort
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        raw, fused = Path(tmp) / "raw.onnx", Path(tmp) / "fused.onnx"
        torch.onnx.export(Hidden().eval(), args, str(raw), input_names=list(names), output_names=["last_hidden_state"],
                          dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names},
                                        "last_hidden_state": {0: "batch", 1: "seq"}},
                          opset_version=17, dynamo=False)
        # Optimize once here; queries load the fused graph with optimization off, its weights in a side file
        # (a session over one 90 MB protobuf takes 0.6 s to open, over graph + external weights 0.2 s).
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        opts.optimized_model_filepath = str(fused)
        ort.InferenceSession(str(raw), opts, providers=["CPUExecutionProvider"])
        onnx.save_model(onnx.load(str(fused)), str(Path(tmp) / "model.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
        for name in ("model.onnx.data", "model.onnx"):
            publish(Path(tmp) / name, target / name)
    tok.backend_tokenizer.save(str(target / "tokenizer.json"))
    write_json(target / "config.json", {"version": EXPORT_VERSION, "inputs": names, "pooling": mode,
                                        "max_seq_length": int(model.max_seq_length), "dim": int(dim),
                                        "pad_id": int(tok.pad_token_id or 0)})
    return True


ORT_THREADS_ENV, ORT_SPIN_ENV = "ENGINE_ORT_THREADS", "ENGINE_ORT_SPIN"


def session_options(optimized: bool = False):
    """Options of every query session. Intra-op threads: $ENGINE_ORT_THREADS (0 = one per core, onnxruntime's
    default). Spinning off unless $ENGINE_ORT_SPIN=1: idle onnxruntime workers that spin take the cores FAISS
    searches on next (benchmarks/serve_threads.py measures both). `optimized`: the graph was fused at export."""
    import onnxruntime as ort
    from engine.errors import EngineError
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if optimized
                                     else ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    threads, spin = os.environ.get(ORT_THREADS_ENV, "0"), os.environ.get(ORT_SPIN_ENV, "0")
    if not threads.isdigit() or int(threads) > 1024 or spin not in ("0", "1"):
        raise EngineError(f"${ORT_THREADS_ENV} must be a whole number from 0 to 1024 and ${ORT_SPIN_ENV} 0 or 1, "
                          f"not {threads!r} and {spin!r}")
    opts.intra_op_num_threads = int(threads)
    opts.add_session_config_entry("session.intra_op.allow_spinning", spin)
    return opts


class OnnxText:
    """A tokenizer and an onnxruntime session: texts → pooled, L2-normalized float32 rows."""

    def __init__(self, folder: Path):
        import onnxruntime as ort
        from tokenizers import Tokenizer
        self.config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=int(self.config["max_seq_length"]))
        self.tokenizer.enable_padding(pad_id=int(self.config["pad_id"]))
        self.session = ort.InferenceSession(str(folder / "model.onnx"), session_options(optimized=True),
                                            providers=["CPUExecutionProvider"])

    def __call__(self, texts, batch_size: int) -> np.ndarray:
        out = []
        for lo in range(0, len(texts), max(1, batch_size)):
            enc = self.tokenizer.encode_batch(list(texts[lo:lo + batch_size]))
            feed = {"input_ids": np.asarray([e.ids for e in enc], dtype=np.int64),
                    "attention_mask": np.asarray([e.attention_mask for e in enc], dtype=np.int64),
                    "token_type_ids": np.asarray([e.type_ids for e in enc], dtype=np.int64)}
            pooled = np.empty((len(enc), int(self.config["dim"])), np.float32)
            for rows, width in length_groups(feed["attention_mask"].sum(axis=1)):
                pooled[rows] = self._pooled({n: feed[n][rows, :width] for n in self.config["inputs"]},
                                            feed["attention_mask"][rows, :width])
            out.append(pooled)
        return np.concatenate(out) if out else np.zeros((0, int(self.config["dim"])), np.float32)

    def _pooled(self, feed: dict, attention_mask: np.ndarray) -> np.ndarray:
        hidden = self.session.run(None, feed)[0]
        if self.config["pooling"] == "cls":
            return hidden[:, 0]
        mask = attention_mask[..., None].astype(np.float32)
        return (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)


CALL_TOKENS = 16
"""What one more forward pass costs, in padded tokens (a batch is split where that saves more padding)."""


def length_groups(lengths: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """A batch's rows cut into groups of similar token length, each padded only to its own longest, where the
    padding saved outweighs a forward pass more (`CALL_TOKENS`): (rows, width) per group. Concurrent queries
    differ in length (5–14 tokens in the service benchmark: one pass pads 24–47 % more tokens than needed)."""
    order = np.argsort(lengths, kind="stable")
    sorted_len = np.asarray(lengths)[order]
    n = len(order)
    if n <= 1 or n > 1024:
        return [(order, int(sorted_len.max(initial=1)))]
    best = np.zeros(n + 1)  # best[j]: least cost of the j shortest rows; a group (i, j] pads to sorted_len[j-1]
    cut = np.zeros(n + 1, np.int64)
    for j in range(1, n + 1):
        costs = best[:j] + (j - np.arange(j)) * sorted_len[j - 1] + CALL_TOKENS
        cut[j] = int(np.argmin(costs))
        best[j] = costs[cut[j]]
    groups, j = [], n
    while j > 0:
        groups.append((order[cut[j]:j], int(sorted_len[j - 1])))
        j = cut[j]
    return groups[::-1]


def text_encoder(name: str) -> Encoder | None:
    """The ONNX query encoder of sentence model `name` (exported on first use), or None where it cannot run
    (onnxruntime missing, a pipeline it does not reproduce): the caller then loads the torch model."""
    from engine.core.encoders.sbert import DEFAULT_TEXT_MODEL
    name = name or DEFAULT_TEXT_MODEL
    from engine.core.encoders.device import device_setting
    if not available() or device_setting() not in ("auto", "cpu"):
        return None  # an explicit GPU: the torch model there
    folder = export_dir(name)
    if (folder / "unsupported").exists():
        return None
    if not (folder / "config.json").is_file():
        from engine.core.encoders.sbert import load_sentence_model
        from engine.progress import info
        info(f"exporting {name} to ONNX for torch-free text queries (once, into {folder})")
        try:
            ok = export(load_sentence_model(name, "cpu"), folder)
        except Exception as exc:  # noqa: BLE001  (an exporter failure must not stop a query: torch answers it)
            from engine.progress import warn
            warn(f"ONNX export of {name} failed ({type(exc).__name__}: {str(exc)[:120]}); queries use torch")
            ok = False
        if not ok:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "unsupported").write_text("queries of this model run on torch\n")
            return None
    runner = OnnxText(folder)
    return Encoder(spec=f"sbert:{name}", dim=int(runner.config["dim"]), modalities=frozenset({TEXT}),
                   text_fn=runner, info={"max_seq_length": int(runner.config["max_seq_length"]), "runtime": "onnx"})
