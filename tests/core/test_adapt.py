"""Adapters fitted on labelled pairs: a gain on a planted split (never scored on the fitted pairs), the
`adapted:DIR` round trip through `engine adapt`, build and search, and bad input as one line."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest



def test_fit_recovers_a_planted_map_on_held_out_groups():
    """Documents are a fixed rotation of their queries plus noise: the base (identity) ranks poorly, the
    adapter fitted on some documents ranks held-out ones far better."""
    from engine.core.ranking.adapters.fit import FitOptions, fit_maps
    rng = np.random.default_rng(0)
    d, n = 16, 120
    rot, _ = np.linalg.qr(rng.normal(size=(d, d)))
    queries = rng.normal(size=(n, d)).astype(np.float32)
    docs = (queries @ rot + 0.2 * rng.normal(size=(n, d))).astype(np.float32)
    fit, test = np.arange(90), np.arange(90, n)
    wl, wr, report = fit_maps(queries[fit], docs[fit], [str(i) for i in fit], shared=False,
                              options=FitOptions(reg=0.01, lr=1e-2, epochs=400))

    def r1(q, g):
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        g = g / np.linalg.norm(g, axis=1, keepdims=True)
        return float((np.argmax(q @ g.T, axis=1) == np.arange(len(q))).mean())
    before = r1(queries[test], docs[test])
    after = r1(queries[test] @ wl, docs[test] @ wr)
    assert after > before + 0.15, (before, after)
    assert report["held_out_loss_after"] < report["held_out_loss_before"]


def test_adapted_dir_round_trip(run_cli, tmp_path, monkeypatch, capsys):
    from engine.core.collection import Collection
    from engine.core.encoders.registry import load_encoder
    pairs = tmp_path / "pairs.csv"
    topics = ["bread", "rivers", "chess", "trains", "music", "stars", "cheese", "boats"]
    pairs.write_text("query,document\n" + "".join(f"about {t} {i},a long text on {t} number {i}\n"
                                                  for t in topics for i in range(3)))
    out = tmp_path / "ad"
    code, _, err = run_cli("adapt", "--base", "sbert:all-MiniLM-L6-v2", "--pairs", pairs,
                           "--out", out, "--epochs", "20", "-q")
    assert code == 0, err
    enc = load_encoder(f"adapted:{out}")
    base = load_encoder("sbert:all-MiniLM-L6-v2")
    w = np.load(out / "adapter.npz")["text"]
    want = base.encode_texts(["a text on bread"]) @ w
    np.testing.assert_allclose(enc.encode_texts(["a text on bread"]), want / np.linalg.norm(want), atol=1e-5)
    docs = tmp_path / "docs.csv"
    docs.write_text("id,text\n" + "".join(f"{t},a text about {t}\n" for t in topics))
    code, _, err = run_cli("build", "c", "--texts", docs, "--model", f"adapted:{out}",
                           "--root", tmp_path / "idx", "-q")
    assert code == 0, err
    col = Collection.open("c", tmp_path / "idx")
    assert col.manifest["encoder"] == f"adapted:{out.resolve()}"
    assert col.search(text="chess", k=1)[0].id == "chess"


@pytest.mark.parametrize("csv_text, message", [
    ("a,b\n1,2\n", "needs the columns text,image or query,document"),
    ("query,document\nq,\n", "p.csv:2: empty document"),
    ("text,image\ncat,missing.jpg\n", "image missing.jpg not found"),
    ("query,document\nq,d\n", "an adapter needs at least 5"),
])
def test_bad_pairs_are_one_line(run_cli, csv_text, message, tmp_path, monkeypatch, capsys):
    pairs = tmp_path / "p.csv"
    pairs.write_text(csv_text)
    code, out, err = run_cli("adapt", "--base", "conse", "--pairs", pairs, "--out",
                             tmp_path / "o")
    text = (out + err).strip()
    assert code == 2 and message in text and len(text.splitlines()) <= 2, text
    assert not (tmp_path / "o").exists()


def test_adapted_needs_a_folder_with_an_adapter(tmp_path):
    from engine.core.encoders.registry import load_encoder
    from engine.errors import EngineError
    with pytest.raises(EngineError, match="no adapter here"):
        load_encoder(f"adapted:{tmp_path}")


def planted_photos(seed: int = 0, topics: int = 8, per_topic: int = 6, d: int = 16):
    """Photos of a few topics: their ConSE vectors carry the topic weakly, their pooled features strongly, and
    their captions are the topic's sentence plus noise (so a memory of fitted photos can carry the topic)."""
    rng = np.random.default_rng(seed)
    topic_text = rng.normal(size=(topics, d))
    topic_feat = rng.normal(size=(topics, 32))
    topic = np.repeat(np.arange(topics), per_topic)
    n = len(topic)
    conse = 0.35 * topic_text[topic] + rng.normal(size=(n, d))
    pooled = topic_feat[topic] + 0.3 * rng.normal(size=(n, 32))
    owner = np.repeat(np.arange(n), 3)
    caps = topic_text[topic[owner]] + 0.5 * rng.normal(size=(len(owner), d)) + 0.8 * rng.normal(size=(n, d))[owner]
    return caps.astype(np.float32), owner, conse.astype(np.float32), pooled.astype(np.float32), topic


def test_neighbours_gain_on_held_out_photos_of_a_planted_split():
    """The memory is chosen by the form's own CV on the fitted photos and lifts R@1 on photos it never saw."""
    from engine.core.ranking.adapters.neighbours import fit_neighbours, r_at_1
    from engine.core.encoders.base import l2_normalize
    caps, owner, conse, pooled, topic = planted_photos()
    n = len(conse)
    test = np.arange(0, n, 4)
    train = np.setdiff1d(np.arange(n), test)
    fitted = np.isin(owner, train)
    local = {p: i for i, p in enumerate(train)}
    form, report = fit_neighbours(caps[fitted], np.array([local[o] for o in owner[fitted]]), conse[train],
                                  pooled[train])
    assert form.alpha > 0 and report["cv_r@1_chosen"] > report["cv_r@1_views_only"]
    held = ~fitted
    before = r_at_1(l2_normalize(caps[held]), l2_normalize(conse[test]), np.searchsorted(test, owner[held]))
    after = r_at_1(form.texts(caps[held]), form.images(conse, pooled)[test], np.searchsorted(test, owner[held]))
    assert after.mean() > before.mean() + 0.1, (before.mean(), after.mean())
    # the memory reads only the fitted photos: each held-out photo's vector is blended with fitted captions
    assert form.features.shape == (len(train), 32) and form.captions.shape == (len(train), caps.shape[1])


def test_conse_neighbours_round_trip_through_the_cli(run_cli, tmp_path, monkeypatch, capsys, sample_photos):
    """`engine adapt` on text,image pairs over conse writes version 2; `adapted:DIR` applies exactly the fitted
    form to conse's own text vectors and to the 10-view image features; build and search take it."""
    import json

    from engine.core.ranking.adapters.fit import embed_views
    from engine.core.collection import Collection
    from engine.core.encoders.neighbours import load_neighbours
    from engine.core.encoders.registry import load_encoder
    names = ["astronaut", "chelsea", "coffee", "rocket", "horse"]
    captions = {"astronaut": "a woman in a space suit", "chelsea": "a cat looking at the camera",
                "coffee": "a cup of coffee on a saucer", "rocket": "a rocket on its launch pad",
                "horse": "the outline of a horse", "coins": "old coins on a table"}
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("text,image\n" + "".join(f"{captions[n]}{s},{sample_photos[n]}\n" for n in names
                                              for s in ("", " in a photo")))
    out = tmp_path / "ad"
    code, _, err = run_cli("adapt", "--base", "conse", "--pairs", pairs, "--out", out)
    assert code == 0, err
    assert "conse-neighbours" in err and "5-fold" in err
    config = json.loads((out / "adapter.json").read_text())
    assert config["version"] == 2 and config["form"] == "conse-neighbours" and len(config["report"]["cv"]) == 28
    enc, base = load_encoder(f"adapted:{out}"), load_encoder("conse")
    with np.load(out / "adapter.npz") as z:
        form = load_neighbours(z, config["params"])
    texts = ["a cat", "a rocket"]
    np.testing.assert_allclose(enc.encode_texts(texts), form.texts(base.encode_texts(texts)), atol=1e-5)
    paths = [str(sample_photos["moon"])]
    res = enc.encode_images(paths)
    np.testing.assert_allclose(res.embeddings, form.images(*embed_views(base, paths, pairs)), atol=1e-4)
    photos = tmp_path / "photos"
    photos.mkdir()
    for n in names:
        (photos / sample_photos[n].name).symlink_to(sample_photos[n])
    code, _, err = run_cli("build", "p", "--images", photos, "--model", f"adapted:{out}",
                           "--root", tmp_path / "idx", "-q")
    assert code == 0, err
    col = Collection.open("p", tmp_path / "idx")
    assert col.manifest["encoder"] == f"adapted:{out.resolve()}"
    assert Path(col.search(text="a cat looking at the camera", k=1)[0].id).stem == "chelsea"


def test_the_ten_views_equal_torchvisions(sample_photos):
    """The views made with PIL alone hold the pixels torchvision's Resize, CenterCrop, FiveCrop and hflip give."""
    import torch
    from PIL import Image

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before torchvision)
    from torchvision import transforms as T

    from engine.core.encoders.neighbours import views_transform
    from engine.core.images import load_image
    bicubic = T.InterpolationMode.BICUBIC

    def reference(img):
        r256 = T.Resize(256, interpolation=bicubic)(img)
        centre = T.CenterCrop(224)(r256)
        squashed = img.resize((224, 224), Image.BICUBIC)
        small = [centre, T.functional.hflip(centre), squashed, T.functional.hflip(squashed),
                 *T.FiveCrop(224)(r256)[:4]]
        big = T.CenterCrop(288)(T.Resize(320, interpolation=bicubic)(img))
        return torch.cat([torch.stack([T.PILToTensor()(v) for v in small]).flatten(),
                          torch.stack([T.PILToTensor()(v) for v in (big, T.functional.hflip(big))]).flatten()])
    images = [load_image(p) for p in sorted(sample_photos.values())[:3]]
    images += [Image.new("RGB", (700, 90), (10, 200, 30)), Image.new("RGB", (90, 333), (250, 0, 7))]
    for img in images:
        np.testing.assert_array_equal(views_transform()(img), reference(img).numpy())


def test_an_adapted_query_runs_on_onnx_equal_to_torch_and_imports_no_torch(run_cli, tmp_path, monkeypatch, capsys,
                                                                            sample_photos, conse_encoder,
                                                                            image_query_in_new_process):
    """`adapted:DIR` over conse: its light text and image sides (the base's ONNX sessions, the views and the
    memory after them) give the torch encoder's vectors within 1e-4; an image query of an adapted collection
    imports no torch stack in a fresh process."""
    from engine.core.collection import Collection
    from engine.core.encoders.registry import load_encoder, load_image_query_encoder, load_text_query_encoder
    names = ["astronaut", "chelsea", "coffee", "rocket", "horse"]
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("text,image\n" + "".join(f"a photo of {n}{s},{sample_photos[n]}\n" for n in names
                                              for s in ("", " again")))
    out = tmp_path / "ad"
    code, _, err = run_cli("adapt", "--base", "conse", "--pairs", pairs, "--out", out, "-q")
    assert code == 0, err
    spec = f"adapted:{out}"
    whole, text, image = load_encoder(spec), load_text_query_encoder(spec), load_image_query_encoder(spec)
    assert text.info["runtime"] == image.info["runtime"] == "onnx" and text.spec == image.spec == whole.spec
    np.testing.assert_allclose(text.encode_texts(["a cat", "a rocket at night"]),
                               whole.encode_texts(["a cat", "a rocket at night"]), atol=1e-4)
    photos = [str(p) for p in sorted(sample_photos.values())[:4]]
    a, b = image.encode_images(photos, batch_size=3), whole.encode_images(photos, batch_size=3)
    assert a.ok == b.ok == list(range(4))
    np.testing.assert_allclose(a.embeddings, b.embeddings, atol=1e-4)
    Collection.from_vectors("im", [f"p{i}" for i in range(4)], b.embeddings, whole.spec, "image", root=tmp_path)
    assert image_query_in_new_process(tmp_path, "im", photos[1]) == ("p1", "[]")


def test_an_adapter_folder_without_a_version_loads_as_linear_maps(tmp_path):
    """Folders the first `engine adapt` wrote (no version, two maps) keep loading, as linear maps."""
    import json

    from engine.core.encoders.registry import load_encoder
    base = load_encoder("sbert:all-MiniLM-L6-v2")
    rng = np.random.default_rng(0)
    w = np.eye(base.dim, dtype=np.float32) + 0.1 * rng.normal(size=(base.dim, base.dim)).astype(np.float32)
    np.savez(tmp_path / "adapter.npz", text=w, other=np.eye(base.dim, dtype=np.float32))
    (tmp_path / "adapter.json").write_text(json.dumps({"base": base.spec, "kind": "text", "dim": base.dim}))
    want = base.encode_texts(["a text"]) @ w
    np.testing.assert_allclose(load_encoder(f"adapted:{tmp_path}").encode_texts(["a text"]),
                               want / np.linalg.norm(want), atol=1e-5)


@pytest.mark.parametrize("args, message", [
    (("--form", "bogus"), "--form must be one of auto, linear, conse-neighbours"),
    (("--form", "conse-neighbours", "--base", "sbert:all-MiniLM-L6-v2"), "--form conse-neighbours needs"),
])
def test_bad_form_is_one_line_before_any_model_loads(run_cli, args, message, tmp_path, monkeypatch, capsys):
    import engine.core.encoders.registry as registry
    monkeypatch.setattr(registry, "load_encoder", lambda spec: pytest.fail("a model loaded"))
    pairs = tmp_path / "p.csv"
    pairs.write_text("query,document\n" + "".join(f"q{i},d{i}\n" for i in range(6)))
    base = () if "--base" in args else ("--base", "conse")
    code, out, err = run_cli("adapt", *base, "--pairs", pairs, "--out", tmp_path / "o", *args)
    text = (out + err).strip()
    assert code == 2 and message in text and len(text.splitlines()) <= 2, text
    assert not (tmp_path / "o").exists()


def test_an_adapter_of_a_later_version_is_one_line(tmp_path):
    import json

    from engine.core.encoders.registry import load_encoder
    from engine.errors import EngineError
    (tmp_path / "adapter.json").write_text(json.dumps({"version": 3, "form": "conse-neighbours", "base": "conse"}))
    with pytest.raises(EngineError, match="version 3 is not one this engine reads"):
        load_encoder(f"adapted:{tmp_path}")


def test_an_existing_adapter_folder_is_an_output_folder(tmp_path):
    """`engine adapt --out DIR --force` over an adapter that exists: DIR is a folder output, not refused as
    "is a folder" before the command runs (a file there still is)."""
    from engine.errors import EngineError
    from engine.io.options import check_options
    assert check_options("adapt", {"out": tmp_path})["out"] == tmp_path
    (tmp_path / "f").write_text("x")
    with pytest.raises(EngineError, match="is a file"):
        check_options("adapt", {"out": tmp_path / "f"})
