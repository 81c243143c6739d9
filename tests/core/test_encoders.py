"""Encoders: the offline bridge retrieves real photos by text; specs and weight errors are clear."""
from __future__ import annotations

import numpy as np
import pytest

from engine.core.encoders.registry import load_encoder
from engine.errors import EngineError


def test_text_encoder_is_normalized_float32_and_semantic(text_encoder):
    emb = text_encoder.encode_texts(["a cat sits on the mat", "a kitten resting on a rug", "quarterly tax report"])
    assert emb.dtype == np.float32 and emb.shape == (3, 384)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.2


@pytest.mark.parametrize("query,photo", [("a cat", "chelsea"), ("a cup of coffee", "coffee"),
                                         ("a rocket launching into the sky", "rocket"),
                                         ("a motorcycle", "motorcycle_left")])
def test_bridge_finds_real_photos_by_text(conse_encoder, sample_photos, query, photo):
    names = list(sample_photos)
    res = conse_encoder.encode_images([str(sample_photos[n]) for n in names])
    assert not res.failed
    scores = res.embeddings @ conse_encoder.encode_texts([query])[0]
    assert names[int(np.argmax(scores))] == photo


def test_bridge_spec_round_trips_and_rejects_unknown_options(conse_encoder):
    assert conse_encoder.spec.startswith("conse:") and "top=20" in conse_encoder.spec
    assert load_encoder(conse_encoder.spec).spec == conse_encoder.spec
    with pytest.raises(EngineError, match="not understood"):
        load_encoder("conse:topk=3")


def test_efficientnet_pooled_features_are_1280d(sample_photos):
    enc = load_encoder("effnet")
    res = enc.encode_images([str(sample_photos["chelsea"]), str(sample_photos["coffee"])])
    assert res.embeddings.shape == (2, 1280)
    assert "text" not in enc.modalities
    with pytest.raises(EngineError, match="images only"):
        enc.encode_texts(["a cat"])


def test_unknown_spec_is_a_clear_error():
    with pytest.raises(EngineError, match="unknown model spec"):
        load_encoder("word2vec:foo")


def _tiny_clip_config(tmp_path):
    import json
    cfg = {"embed_dim": 32,
           "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
           "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    path = tmp_path / "tiny-clip-test.json"
    path.write_text(json.dumps(cfg))
    return path


def test_open_clip_local_checkpoint_loads_and_embeds(tmp_path, sample_photos):
    """Plumbing only (random weights): a config file plus a checkpoint file load through the spec."""
    import torch
    cfg = _tiny_clip_config(tmp_path)
    enc = load_encoder(f"clip:{cfg}:random")
    from engine.core.encoders.clip import load_open_clip
    model, _, _ = load_open_clip(str(cfg), "random")
    ckpt = tmp_path / "tiny.pt"
    torch.save(model.state_dict(), ckpt)
    loaded = load_encoder(f"clip:{cfg}:{ckpt}")
    assert loaded.dim == enc.dim == 32
    res = loaded.encode_images([str(sample_photos["chelsea"])])
    text = loaded.encode_texts(["a cat"])
    assert res.embeddings.shape == (1, 32) and text.shape == (1, 32)
    assert np.allclose(res.embeddings, enc.encode_images([str(sample_photos["chelsea"])]).embeddings, atol=1e-5)


@pytest.mark.parametrize("spec,message", [
    ("clip:ViT-B-32:/no/such/file.safetensors", "checkpoint file .* not found"),
    ("clip:ViT-B-32:no_such_tag", "no weights 'no_such_tag'"),
    ("clip:ViT-Q-99:openai", "no architecture"),
    ("clip:ViT-B-32", "needs an architecture and weights"),
])
def test_clip_weight_problems_say_how_to_fix(spec, message):
    with pytest.raises(EngineError, match=message):
        load_encoder(spec)
