"""Image queries of `clip:` collections on onnxruntime + PIL: the open_clip image tower exported once to ONNX,
its preprocessing (Resize of the short side, CenterCrop, ToTensor, Normalize) redone with PIL and numpy, so a
query loads neither torch nor open_clip. Embeddings equal the torch ones within 1e-4
(tests/core/test_onnx_clip.py).

The export lands under `$ENGINE_CACHE/onnx/clip-…/` (keyed by the spec, the checkpoint or config file's size and
time, and open_clip's version for a named pretrained tag) when a collection is built or by
`engine models --prepare SPEC`, said on a status line. Where the tower does not export, or its preprocessing is
not the plain recipe above, a `failed` marker is left and image queries stay on torch (`random` weights too:
they change at every load, no export can match them).
"""
from __future__ import annotations

import hashlib
import json
import tempfile
import warnings
from pathlib import Path

import numpy as np

from engine.core.encoders.base import IMAGE, Encoder, cache_dir
from engine.io.atomic import publish

EXPORT_VERSION = 1


def _stamp(path: str) -> list:
    p = Path(path).expanduser()
    if not p.is_file():
        return [path]
    st = p.stat()
    return [str(p.resolve()), st.st_size, int(st.st_mtime)]


def export_dir(arch: str, weights: str) -> Path | None:
    """Cache folder of the export of `clip:ARCH:WEIGHTS` (None for `random` weights: nothing stable to export)."""
    if weights == "random":
        return None
    stamp = [EXPORT_VERSION, *_stamp(arch), *_stamp(weights)]
    if not Path(weights).expanduser().is_file():  # a pretrained tag: its weights are open_clip's
        from importlib.metadata import PackageNotFoundError, version
        try:
            stamp.append(version("open_clip_torch"))
        except PackageNotFoundError:
            return None
    key = hashlib.sha1(json.dumps(stamp).encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(arch).stem)[-40:]
    return cache_dir() / "onnx" / f"clip-{safe}-{key}"


def transform_params(preprocess) -> dict | None:
    """PIL-side parameters of open_clip's image transform, or None unless it is exactly Resize(short side,
    bicubic/bilinear) → CenterCrop → RGB → ToTensor → Normalize (other recipes stay on torch)."""
    steps = list(getattr(preprocess, "transforms", []))
    names = [getattr(s, "__name__", type(s).__name__) for s in steps]
    if len(steps) != 5 or names[0] != "Resize" or names[1] != "CenterCrop" or names[4] != "Normalize" \
            or names[2] not in ("MaybeConvertMode", "_convert_to_rgb") or names[3] not in ("ToTensor", "MaybeToTensor"):
        return None
    if getattr(steps[2], "mode", "RGB") != "RGB":
        return None
    resize, crop, norm = steps[0], steps[1], steps[4]
    size = resize.size if isinstance(resize.size, int) else (resize.size[0] if len(resize.size) == 1 else None)
    crop_hw = list(crop.size) if not isinstance(crop.size, int) else [crop.size, crop.size]
    resample = getattr(resize.interpolation, "value", str(resize.interpolation))
    if size is None or crop_hw[0] != crop_hw[1] or resize.max_size is not None or resample not in ("bicubic", "bilinear"):
        return None
    return {"resize": int(size), "crop": int(crop_hw[0]), "mean": [float(x) for x in norm.mean],
            "std": [float(x) for x in norm.std], "resample": resample}


def export(arch: str, weights: str, target: Path, announce: bool = False) -> bool:
    """Export the torch image tower (`clip.load_open_clip`) with output `embedding`; False (a `failed` marker
    left) where the transform is not the plain recipe or the exporter fails: image queries then use torch.
    A spec that does not load raises its EngineError before anything is announced."""
    import torch

    from engine.core.encoders.clip import load_open_clip
    from engine.io.atomic import write_json
    model, preprocess, _ = load_open_clip(arch, weights, "cpu")
    if announce:
        from engine.progress import info
        info(f"exporting clip:{arch}:{weights}'s image tower to ONNX for torch-free image queries (once, into {target})")
    params = transform_params(preprocess)
    target.mkdir(parents=True, exist_ok=True)
    if params is None:
        (target / "failed").write_text("the image transform is not Resize/CenterCrop/Normalize: queries use torch\n")
        return False

    class Tower(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, pixels):
            return self.m.encode_image(pixels).float()

    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the fused attention kernel has no ONNX form; the plain one has
    try:
        with tempfile.TemporaryDirectory(dir=target) as tmp, warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            raw = Path(tmp) / "model.onnx"
            torch.onnx.export(Tower().eval(), (torch.zeros(1, 3, params["crop"], params["crop"]),), str(raw),
                              input_names=["pixels"], output_names=["embedding"],
                              dynamic_axes={"pixels": {0: "batch"}, "embedding": {0: "batch"}},
                              opset_version=17, dynamo=False)
            publish(raw, target / "model.onnx")
    except Exception as exc:  # noqa: BLE001  (an exporter failure must not stop a build: torch answers queries)
        (target / "failed").write_text(f"ONNX export failed ({type(exc).__name__}): queries use torch\n")
        return False
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    dim = int(getattr(model, "embed_dim", 0) or model.text_projection.shape[1])
    write_json(target / "config.json", {"version": EXPORT_VERSION, "dim": dim, "transform": params})
    return True


def clip_image_query_encoder(arg: str) -> Encoder | None:
    """`clip:ARCH:WEIGHTS` image queries on onnxruntime, exported first when missing (said on a status line);
    None where they cannot run here (the torch encoder answers)."""
    from engine.core.encoders import onnx_image
    arch, sep, weights = arg.partition(":")
    if not sep or not arch or not weights or not onnx_image.usable():
        return None  # a bad spec: the torch loader says what is wrong
    folder = export_dir(arch, weights)
    if folder is None or (folder / "failed").exists():
        return None
    if not (folder / "config.json").is_file():
        if not export(arch, weights, folder, announce=True):
            from engine.progress import warn
            warn(f"clip:{arch}:{weights}: {(folder / 'failed').read_text().strip()}")
            return None
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    run = onnx_image.OnnxImage(folder)
    t = config["transform"]

    def preprocess(img) -> np.ndarray:
        return onnx_image.preprocess(img, t["resize"], t["crop"], t["mean"], t["std"], t["resample"])

    return Encoder(spec=f"clip:{arch}:{weights}", dim=int(config["dim"]), modalities=frozenset({IMAGE}),
                   preprocess=preprocess, image_batch_fn=lambda b: run(b)[0], info={"runtime": "onnx"})
