"""Make the CUDA-only torchvision wheel importable on CPU machines.

open_clip, timm and sentence-transformers all import torchvision. The only torchvision
that installs beside the CPU torch here is a CUDA build whose compiled ops fail to load,
and its Python side then dies registering fake kernels for `torchvision::nms`/`qnms`.
Defining those two operator schemas first (only when `_C` fails to load) is enough.
Import this module before any of those libraries.
"""
from __future__ import annotations

import os
import warnings

_done = False


def patch_torchvision() -> None:
    global _done
    if _done:
        return
    _done = True
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    import torch

    try:
        import importlib.util
        if importlib.util.find_spec("torchvision") is None:
            return
        spec_c = importlib.util.find_spec("torchvision._C")
        if spec_c is None:
            raise ImportError("no torchvision._C")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.ops.load_library(spec_c.origin)
    except Exception:
        try:
            lib = torch.library.Library("torchvision", "DEF")
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            globals()["_torchvision_lib"] = lib  # keep the registration alive
        except RuntimeError:
            pass  # already defined (a working torchvision, or patched before)


patch_torchvision()
