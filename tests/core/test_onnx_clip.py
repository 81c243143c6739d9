"""`clip:` image queries on onnxruntime + PIL: a tiny open_clip model built from a config with random weights
saved as a checkpoint (no hub download); the ONNX image tower's embeddings equal torch's within 1e-4 and an
image query imports neither torch nor open_clip."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("open_clip", "onnxruntime")),
                                reason="needs open_clip and onnxruntime (extras clip, fast)")

TINY = {"embed_dim": 16, "vision_cfg": {"image_size": 64, "layers": 2, "width": 32, "patch_size": 16, "head_width": 16},
        "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory) -> str:
    """The spec of a tiny open_clip model: config JSON + a checkpoint of its (random, then fixed) weights."""
    import torch

    from engine.core.encoders.clip import load_open_clip
    folder = tmp_path_factory.mktemp("tiny-clip")
    config = folder / "tiny-clip.json"
    config.write_text(json.dumps(TINY))
    torch.manual_seed(0)
    model, _, _ = load_open_clip(str(config), "random", "cpu")
    torch.save(model.state_dict(), folder / "tiny.pt")
    return f"clip:{config}:{folder / 'tiny.pt'}"


def _images(sample_photos):
    from PIL import Image

    from engine.core.images import load_image
    return [load_image(str(p)) for p in sorted(sample_photos.values())][:4] + [
        Image.new("RGB", (300, 90), (10, 200, 30)), Image.new("RGB", (40, 130), (250, 0, 7))]


def test_onnx_clip_image_tower_equals_torch(tiny_clip, sample_photos):
    from engine.core.encoders.registry import load_encoder, load_image_query_encoder
    light, torch_enc = load_image_query_encoder(tiny_clip), load_encoder(tiny_clip)
    assert light.info.get("runtime") == "onnx" and light.spec == torch_enc.spec and light.dim == torch_enc.dim == 16
    images = _images(sample_photos)
    for img in images:  # the PIL recipe gives open_clip's pixels
        assert np.abs(light.preprocess(img) - torch_enc.preprocess(img).numpy()).max() < 1e-6
    import torch
    a = light.encode_image_batch(np.stack([light.preprocess(i) for i in images]))
    b = torch_enc.encode_image_batch(torch.stack([torch_enc.preprocess(i) for i in images]))
    assert np.abs(a - b).max() < 1e-4


def test_random_weights_stay_on_torch():
    from engine.core.encoders.onnx_clip import clip_image_query_encoder
    assert clip_image_query_encoder("ViT-B-32:random") is None


def test_a_clip_image_query_imports_neither_torch_nor_open_clip(image_query_in_new_process, tmp_path, tiny_clip,
                                                                sample_photos):
    from engine.core.collection import Collection
    from engine.core.encoders.registry import load_encoder, prepare_queries
    photos = [str(p) for p in sorted(sample_photos.values())][:4]
    res = load_encoder(tiny_clip).encode_images(photos)
    Collection.from_vectors("im", [f"p{i}" for i in range(len(photos))], res.embeddings, tiny_clip, "image",
                            root=tmp_path)
    assert prepare_queries(tiny_clip) == ["text: torch", "image: onnx"]
    assert image_query_in_new_process(tmp_path, "im", photos[2], "open_clip") == ("p2", "[]")
