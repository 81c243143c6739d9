"""Where encoders run: `--device auto|cpu|cuda|cuda:N|mps`, fp16 autocast on a GPU, `--batch-size auto`.

The device is a process-wide setting (like torch's thread count) that loaders read when they build a model,
so every encoder and task gets it without a parameter of its own. The spelling is checked without importing
torch, so a bad value fails before any model loads. A one-off text query keeps to the CPU under `auto`
(ONNX, see `onnx_text`): starting CUDA costs more than the query.
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


@contextlib.contextmanager
def autocast(device: str) -> Iterator[None]:
    """fp16 autocast on a CUDA GPU (half the memory traffic; embeddings agree with fp32 to ≈1e-3 after
    normalization); nothing elsewhere."""
    if device.startswith("cuda"):
        import torch
        with torch.autocast("cuda", dtype=torch.float16):
            yield
    else:
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
