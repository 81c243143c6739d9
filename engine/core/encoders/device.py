"""Where encoders run: `--device auto|cpu|cuda|cuda:N|mps`, in what precision (`--dtype auto|float32|float16|
bfloat16`: autocast; `auto` is fp16 on a CUDA GPU, float32 elsewhere), `--batch-size auto`.

The device and the precision are process-wide settings (like torch's thread count) that loaders and encoders
read when they build a model or run it, so every encoder and task gets them without a parameter of its own.
The spellings are checked without importing torch, so a bad value fails before any model loads. A one-off
text query keeps to the CPU under `auto` (ONNX, see `onnx_text`): starting CUDA costs more than the query.
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from engine.errors import EngineError, opt

DEVICES = "auto|cpu|cuda|cuda:N|mps"
AUTO = "auto"
_SPELLING = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
_setting = AUTO
DTYPES = ("auto", "float32", "float16", "bfloat16")
_dtype = AUTO
# items per forward pass under `--batch-size auto`: CPU (measured: larger batches gain nothing on 2–16 cores)
# and GPU (fits EfficientNet-Lite0 / ViT-B-32 / MiniLM at fp16 in 8 GB with room to spare)
AUTO_BATCH = {("cpu", "image"): 32, ("cpu", "text"): 32, ("gpu", "image"): 256, ("gpu", "text"): 512}


def check_device(spec: str | None) -> str:
    """The device spelling, lower-cased; an unknown one is an error naming the choices."""
    spec = (spec or AUTO).strip().lower()
    if not _SPELLING.match(spec):
        raise EngineError(f"{opt('device')} must be one of {DEVICES}, not {spec!r}")
    return spec


def set_device(spec: str | None) -> None:
    """Make `spec` the device every encoder loaded from now on runs on."""
    global _setting
    _setting = check_device(spec)


def device_setting() -> str:
    """The device as set (`auto` until a command sets it)."""
    return _setting


def check_dtype(spec: str | None) -> str:
    """The precision spelling, lower-cased; an unknown one is an error naming the choices."""
    spec = (spec or AUTO).strip().lower()
    if spec not in DTYPES:
        raise EngineError(f"{opt('dtype')} must be one of {'|'.join(DTYPES)}, not {spec!r}")
    return spec


def set_dtype(spec: str | None) -> None:
    """Make `spec` the precision every encoder computes in from now on (`autocast`)."""
    global _dtype
    _dtype = check_dtype(spec)


def dtype_setting() -> str:
    """The precision as set (`auto` until a command sets it)."""
    return _dtype


def gpu_present() -> bool:
    """Whether `auto` may find a GPU here, asked without importing torch: NVIDIA's driver files, or Apple
    silicon (Metal). A False is certain; a True is confirmed by `resolve_device`."""
    import os
    import platform
    import sys
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version") or (
        sys.platform == "darwin" and platform.machine() == "arm64")


def on_cpu(spec: str | None = None) -> bool:
    """Whether `spec` (default: the current setting) runs on the CPU, decided without importing torch."""
    spec = check_device(spec or _setting)
    return spec == "cpu" or (spec == AUTO and not gpu_present())


def precision() -> str:
    """Where and in what precision local models compute now (`cpu/float32`, `cuda/float16`, `cpu/bfloat16`):
    part of what a cached ranking or score is known by, since the same model's numbers differ by ≈1e-3 between
    them. Read without importing torch on a machine with no GPU."""
    device = "cpu" if on_cpu() else resolve_device()
    try:
        return f"{device}/{half_dtype(device) or 'float32'}"
    except EngineError:  # a precision this device does not run: refused where a model would use it
        return f"{device}/{_dtype}"


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one)."""
    import os
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def resolve_device(spec: str | None = None) -> str:
    """The torch device `spec` (default: the current setting) names on this machine: `auto` → the first CUDA
    GPU, else Apple's MPS, else the CPU; a GPU that is not there is an error."""
    import torch
    spec = check_device(spec or _setting)
    has_mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    if spec == AUTO:
        return "cuda" if torch.cuda.is_available() else "mps" if has_mps else "cpu"
    if spec.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(spec.partition(":")[2] or 0)
        if index >= count:
            raise EngineError(f"{opt('device')} {spec}: this machine has {count} CUDA GPU(s)"
                              f"{'' if count else ' (or torch was built without CUDA)'}; use auto or cpu")
    if spec == "mps" and not has_mps:
        raise EngineError(f"{opt('device')} mps: Apple's Metal backend is not available here; use auto or cpu")
    return spec


def is_gpu(device: str) -> bool:
    return device.startswith(("cuda", "mps"))


def check_dtype_on(dtype: str | None, device: str | None) -> str:
    """Precision `dtype` checked against device `device` (spellings), without importing torch: float16 on
    what is the CPU, or bfloat16 on MPS, refused before any model loads."""
    dtype, device = check_dtype(dtype), check_device(device)
    if (dtype == "float16" and on_cpu(device)) or (dtype == "bfloat16" and device == "mps"):
        half_dtype("cpu" if on_cpu(device) else device, dtype)  # raises, naming what runs where
    return dtype


def half_dtype(device: str, spec: str | None = None) -> str | None:
    """The torch dtype name `autocast` computes in on `device` under precision `spec` (default: the current
    setting), None for float32: `auto` is fp16 on a CUDA GPU only (half the memory traffic; embeddings agree
    with fp32 to ≈1e-3 after normalization); `float16` needs a CUDA GPU, `bfloat16` runs on a CUDA GPU or
    the CPU (torch's autocast there); float32 never casts."""
    spec = check_dtype(spec or _dtype)
    cuda = device.startswith("cuda")
    if spec == AUTO:
        return "float16" if cuda else None
    if spec == "float32":
        return None
    if not cuda and (spec == "float16" or not device.startswith("cpu")):
        where = "a CUDA GPU" if spec == "float16" else "a CUDA GPU or the CPU"
        raise EngineError(f"{opt('dtype')} {spec} runs on {where}, not on {device}; use auto or float32")
    return spec


@contextlib.contextmanager
def autocast(device: str) -> Iterator[None]:
    """Autocast in the precision set (`half_dtype`): fp16 on a CUDA GPU unless told otherwise, bf16 where
    asked; nothing where it is float32."""
    dtype = half_dtype(device)
    if dtype is None:
        yield
        return
    import torch
    with torch.autocast("cuda" if device.startswith("cuda") else "cpu", dtype=getattr(torch, dtype)):
        yield


def check_batch_size(value: int | str) -> int | str:
    """An int ≥ 1 or "auto"."""
    if isinstance(value, str):
        if value.strip().lower() == AUTO:
            return AUTO
        try:
            value = int(value)
        except ValueError:
            raise EngineError(f"{opt('batch_size')} must be a whole number or auto, not {value!r}") from None
    if value < 1:
        raise EngineError(f"{opt('batch_size')} must be at least 1, not {value}")
    return value


def batch_size_for(value: int | str, kind: str, device: str | None = None) -> int:
    """A concrete batch size: `value` itself, or under `auto` the size for this kind of item on the device."""
    value = check_batch_size(value)
    if value != AUTO:
        return int(value)
    return AUTO_BATCH[("gpu" if is_gpu(device or "cpu") else "cpu", kind)]
