"""Image queries on onnxruntime + PIL: the same embeddings as the torch encoders (within 1e-4), the same
preprocessing pixels as torchvision, and an image query that imports no torch, torchvision, timm,
sentence-transformers or transformers."""
from __future__ import annotations


import numpy as np
import pytest

from engine.core.collection import Collection


def _photos(sample_photos) -> list[str]:
    return [str(p) for p in sorted(sample_photos.values())][:6]


def test_pil_preprocessing_equals_torchvision(sample_photos):
    from PIL import Image

    from engine.core.encoders.efficientnet import efficientnet_transform
    from engine.core.encoders.onnx_image import preprocess
    from engine.core.images import load_image
    images = [load_image(p) for p in _photos(sample_photos)]
    images += [Image.new("RGB", (300, 90), (10, 200, 30)), Image.new("RGB", (90, 400), (250, 0, 7)),
               Image.new("RGB", (1, 1), (1, 2, 3))]
    for img in images:
        a, b = preprocess(img), efficientnet_transform()(img).numpy()
        assert a.shape == b.shape == (3, 224, 224) and np.abs(a - b).max() < 1e-6


@pytest.mark.parametrize("spec", ["effnet", "conse"])
def test_onnx_image_embeddings_equal_torch(spec, sample_photos, conse_encoder):
    from engine.core.encoders.registry import load_encoder, load_image_query_encoder
    photos = _photos(sample_photos)
    light = load_image_query_encoder(spec)
    assert light.info.get("runtime") == "onnx"
    torch_enc = conse_encoder if spec == "conse" else load_encoder(spec)
    assert light.spec == torch_enc.spec and light.dim == torch_enc.dim
    a, b = light.encode_images(photos, batch_size=4), torch_enc.encode_images(photos, batch_size=4)
    assert a.ok == b.ok == list(range(len(photos)))
    assert np.abs(a.embeddings - b.embeddings).max() < 1e-4


def test_an_image_query_imports_no_torch_nor_text_stack(image_query_in_new_process, tmp_path, sample_photos,
                                                          conse_encoder):
    photos = _photos(sample_photos)
    res = conse_encoder.encode_images(photos)
    Collection.from_vectors("im", [f"p{i}" for i in range(len(photos))], res.embeddings, conse_encoder.spec,
                            "image", root=tmp_path)
    from engine.core.encoders.registry import prepare_queries
    assert prepare_queries(conse_encoder.spec) == ["text: onnx", "image: onnx"]
    assert image_query_in_new_process(tmp_path, "im", photos[2]) == ("p2", "[]")


def test_models_prepare_says_how_queries_run_and_refuses_unknown_specs(run_cli, monkeypatch, capsys, conse_encoder):
    code, out, _ = run_cli("models", "--prepare", "effnet")
    assert code == 0 and "effnet: queries run on image: onnx" in out
    code, out, err = run_cli("models", "--prepare", "nosuch:model")
    assert code != 0 and "unknown model spec" in err and "Traceback" not in err


@pytest.mark.parametrize("spec", ["effnet", "conse"])
def test_a_cpu_image_build_runs_on_the_onnx_session_and_equals_torch(spec, tmp_path, sample_photos, conse_encoder,
                                                                      monkeypatch):
    """An image build on the CPU encodes through the ONNX session its queries use, equal to the torch build
    (ENGINE_ONNX=0) within 1e-4; once exported, a build in a fresh process imports no torch stack."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    heavy = ("torch", "torchvision", "timm", "sentence_transformers", "transformers")
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in _photos(sample_photos):
        (photos / Path(p).name).symlink_to(p)
    (photos / "broken.jpg").write_bytes(b"not a jpeg")
    onnx = Collection.build("o", images=photos, root=tmp_path, model=spec, device="cpu", batch_size=4)
    monkeypatch.setenv("ENGINE_ONNX", "0")
    torch_built = Collection.build("t", images=photos, root=tmp_path, model=spec, device="cpu", batch_size=4)
    monkeypatch.delenv("ENGINE_ONNX")
    assert onnx.ids == torch_built.ids and len(onnx.ids) == 6
    assert onnx.manifest["encoder"] == torch_built.manifest["encoder"]
    assert onnx.manifest["skipped"] == torch_built.manifest["skipped"] and len(onnx.manifest["skipped"]) == 1
    assert np.abs(np.asarray(onnx.embeddings) - np.asarray(torch_built.embeddings)).max() < 1e-4
    code = ("import sys\nfrom engine.core.collection import Collection\n"
            f"Collection.build('again', images={str(photos)!r}, root={str(tmp_path)!r}, model={spec!r})\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
                         ).stdout.strip().splitlines()
    assert out[-1] == "[]"
    again = Collection.open("again", tmp_path)
    assert np.abs(np.asarray(again.embeddings) - np.asarray(torch_built.embeddings)).max() < 1e-4
