"""Style image → LoRA (NTCIR-19 ModelRetrieval B): generator layout, style features, build/submit/eval, errors."""
from __future__ import annotations

import csv
import json
import functools
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.errors import EngineError
from engine.tasks.lora import cv, data, features, model, pipeline
from engine.tasks.lora.features import ExtractOptions
from engine.tasks.lora.model import LoraConfig

ROOT = Path(__file__).resolve().parents[2]  # the repository (benchmarks/ holds the style-set generator)


@pytest.fixture(scope="session")
def ntcir_b(shared_data):
    return shared_data / "ntcir19-modelretrieval-b"


N_STYLES, N_PHOTOS = 8, 6


@functools.lru_cache(maxsize=1)
def _generator():
    """benchmarks/make_style_set.py (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location("make_style_set", ROOT / "benchmarks" / "make_style_set.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_style_set"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def style_set(tmp_path_factory) -> Path:
    """6 scikit-image photos × 8 styles at 64 px: 4 train contents (32 images), 2 test contents (16)."""
    out = tmp_path_factory.mktemp("style-set")
    pytest.importorskip("skimage")
    counts = _generator().make_style_set(out, "skimage", N_STYLES, N_PHOTOS, size=64, test_fraction=0.34)
    assert counts["train_images"] == 4 * N_STYLES and counts["test_images"] == 2 * N_STYLES
    return out


@pytest.fixture(scope="session")
def extractor():
    return features.make_extractor("effnet", "conse")


@pytest.fixture(scope="session")
def built(style_set, tmp_path_factory, extractor) -> Path:
    root = tmp_path_factory.mktemp("adapters")
    pipeline.build_adapter(style_set / "train.csv", style_set / "images", style_set / "models.csv", "fx", root,
                           LoraConfig(rep="meanvar+gram", scorer="proto", content_removal=True))
    return root


def _csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------- the generated set

def test_generated_set_has_the_ntcir_b_layout_and_is_content_disjoint(style_set):
    train, models = _csv(style_set / "train.csv"), _csv(style_set / "models.csv")
    assert list(train[0]) == ["image_id", "split", "model_id", "content_image_id", "best_seed"]
    assert list(models[0])[:2] == ["id", "model_name"] and "trigger_words" in models[0]
    test_ids = (style_set / "test_image_ids_from_tree.txt").read_text().split()
    train_contents = {r["content_image_id"] for r in train}
    test_contents = {data.content_of(t) for t in test_ids}
    assert not train_contents & test_contents and len(train_contents) == 4 and len(test_contents) == 2
    for c in train_contents:  # every LoRA ran on every content image
        assert sorted(int(r["model_id"]) for r in train if r["content_image_id"] == c) == list(range(1, N_STYLES + 1))
    for r in train:
        assert r["image_id"] == f"train-{int(r['content_image_id']):04d}-{int(r['model_id']):04d}.png"
        assert (style_set / "images" / r["image_id"]).is_file()
    assert all((style_set / "images" / f"{t}.png").is_file() for t in test_ids)
    qrels = [line.split() for line in (style_set / "test-qrels.txt").read_text().splitlines()]
    assert sorted(q[0] for q in qrels) == sorted(test_ids)


def test_style_transforms_are_deterministic_and_distinct():
    gen = _generator()
    from PIL import Image
    rng = np.random.default_rng(0)
    photo = Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8))
    outs = [np.asarray(s.apply(photo, 7)) for s in gen.STYLES]
    assert all(np.array_equal(o, np.asarray(s.apply(photo, 7))) for o, s in zip(outs, gen.STYLES))
    assert len({o.tobytes() for o in outs}) == len(gen.STYLES)
    assert len({s.slug for s in gen.STYLES}) == len(gen.STYLES) >= 36


# ---------------------------------------------------------------- the real NTCIR-B metadata

@pytest.mark.shared
def test_reads_the_real_ntcir_b_files_unchanged(ntcir_b):
    if not ntcir_b.is_dir():
        pytest.skip("../shared/data/ntcir19-modelretrieval-b not present")
    loras = data.read_models(ntcir_b / "models.csv")
    assert len(loras) == 85 and loras["2"].trigger_words == "oil painting"
    assert loras["3"].prompt == "Dissolve Style, ral-dissolve"  # "[FLUX+SDXL+SD1.5]" is no style
    rows = data.read_train(ntcir_b / "train.csv", loras)
    assert len(rows) == 3740 and {r.lora for r in rows} == set(loras)
    assert rows[0] == data.TrainImage("train-0002-0001.png", "1", "2", 2)
    assert all(data.content_of(r.image_id) == r.content for r in rows)
    test_ids = (ntcir_b / "test_image_ids_from_tree.txt").read_text().split()
    test_contents = {data.content_of(t) for t in test_ids}
    assert None not in test_contents and not test_contents & {r.content for r in rows}
    gen_models = _generator().MODEL_COLUMNS
    with open(ntcir_b / "models.csv", newline="", encoding="utf-8") as fh:
        assert next(csv.reader(fh)) == gen_models
    with open(ntcir_b / "train.csv", newline="", encoding="utf-8") as fh:
        assert next(csv.reader(fh)) == _generator().TRAIN_COLUMNS


# ---------------------------------------------------------------- features and scorers

def test_one_forward_pass_gives_pooled_style_statistics_and_joint(style_set, extractor):
    import torch

    from engine.core.encoders.registry import load_encoder
    from engine.core.encoders.efficientnet import efficientnet_transform, pooled_and_logits
    from engine.core.images import load_image
    from engine.tasks.lora.features import effnet_style_features
    paths = sorted((style_set / "images").glob("train-*.png"))[:3]
    batch = torch.stack([efficientnet_transform()(load_image(p)) for p in paths])
    conse = load_encoder("conse")
    feats = effnet_style_features(batch, conse.encode_image_batch)
    assert feats["meanvar"].shape == (3, 928) and feats["gram"].shape == (3, 1120)
    np.testing.assert_allclose(feats["pooled"], pooled_and_logits(batch)[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(feats["joint"], conse.encode_image_batch(batch), rtol=1e-4, atol=1e-5)
    assert np.all(feats["meanvar"][:, 16:32] >= 0)  # stage 0: 16 channel means, then their 16 deviations


def test_content_removal_knn_and_blend_on_toy_vectors():
    x = np.array([[1, 0, 5], [0, 1, 5], [1, 0, -5], [0, 1, -5], [3, 3, 3]], np.float32)
    out = model.remove_content(x, ["a", "a", "b", "b", None])
    np.testing.assert_allclose(out[:4, 2], 0)  # the shared "content" axis is gone
    np.testing.assert_allclose(out[4], x[4])  # no group: unchanged
    sims = np.array([[0.9, 0.8, 0.1, 0.7]])
    votes = model.knn_vote(sims, np.array([0, 0, 1, 2]), 4, k=2)
    assert list(np.argsort(-votes[0])) == [0, 2, 1, 3]  # class 3 has no image: last
    prior = np.array([[0.0, 1.0, 0.0, 0.0]])
    assert model.blend(votes, None, 0.5) is votes
    assert np.argmax(model.blend(votes, prior, 100.0)) == 1


# ---------------------------------------------------------------- build / submit / eval

def test_build_then_submit_ranks_held_out_styles(style_set, built, tmp_path):
    from engine.eval.evaluate import evaluate_files
    from engine.io.runs import read_run
    col = model.open_adapter("fx", built)
    assert col.array("prototypes").shape[0] == N_STYLES and len(col) == N_STYLES
    assert col.array("train_embeddings").shape[0] == 4 * N_STYLES
    run = tmp_path / "test.run"
    report = pipeline.submit_run(style_set / "test_image_ids_from_tree.txt", run, "fx", built, style_set / "images")
    assert report.n_queries == 2 * N_STYLES and report.n_lines == 2 * N_STYLES * N_STYLES
    parsed = read_run(run)
    assert all(len(docs) == N_STYLES for docs in parsed.values())
    first = run.read_text().splitlines()[0].split()
    assert first[1] == "Q0" and first[3] == "1" and first[5] == "engine-lora"
    means = evaluate_files(run, style_set / "test-qrels.txt", "mrr,recall@1").means
    assert means["mrr"] > 0.6  # chance is ≈ 0.34 for 8 LoRAs


def test_submit_accepts_a_folder_of_query_images(style_set, built, tmp_path):
    import shutil
    queries = tmp_path / "q"
    queries.mkdir()
    for p in sorted((style_set / "images").glob("test-*.png"))[:3]:
        shutil.copy(p, queries / p.name)
    run = tmp_path / "folder.run"
    report = pipeline.submit_run(queries, run, "fx", built, options=pipeline.SubmitOptions(text_weight=0.5))
    from engine.io.runs import read_run
    assert report.n_queries == 3 and set(read_run(run)) == {p.stem for p in queries.iterdir()}


def test_cross_validation_is_grouped_by_content_and_compares_configs(style_set):
    result = cv.cross_validate(style_set / "train.csv", style_set / "images", style_set / "models.csv",
                               cv.EvalOptions(folds=2, reps=("pooled", "meanvar+gram"), scorers=("proto", "probe"),
                                              content_removal="both", text_weights=(0.0, 0.5)))
    assert result.n_contents == 4 and result.folds == 2 and result.n_images == 4 * N_STYLES
    assert len(result.rows) == 2 * 2 * 2 * 2 + 1  # rep × scorer × removal × weight, plus text alone
    by = {(r["representation"], r["scorer"], r["content_removal"], r["text_weight"]): r for r in result.rows}
    style = by[("meanvar+gram", "proto", True, 0.0)]
    assert style["mrr"] > 0.6 and style["r@5"] >= style["r@1"]
    assert all(0 <= r["mrr"] <= 1 for r in result.rows)
    table = cv.format_cv_table(result, markdown=True)
    assert table.startswith("| representation") and table.count("\n") == len(result.rows) + 1


def test_cli_lora_commands(style_set, built, tmp_path):
    from typer.testing import CliRunner

    from engine.cli import app
    runner = CliRunner()
    run = tmp_path / "cli.run"
    res = runner.invoke(app, ["lora", "submit", "--queries", str(style_set / "test_image_ids_from_tree.txt"),
                              "--images", str(style_set / "images"), "--out", str(run), "--name", "fx",
                              "--root", str(built), "--quiet"])
    assert res.exit_code == 0, res.output
    assert len(run.read_text().splitlines()) == 2 * N_STYLES * N_STYLES
    res = runner.invoke(app, ["lora", "eval", "--train", str(style_set / "train.csv"), "--images",
                              str(style_set / "images"), "--folds", "2", "--reps", "meanvar", "--scorers", "knn",
                              "--text-weights", "0", "--content-removal", "on", "--out", str(tmp_path / "cv.json"),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    assert "meanvar" in res.output and (tmp_path / "cv.json").is_file()
    for cmd in ("build", "submit", "eval"):
        assert runner.invoke(app, ["lora", cmd, "--help"]).exit_code == 0


# ---------------------------------------------------------------- bad input

def _copy_set(style_set: Path, tmp_path: Path) -> Path:
    import shutil
    dst = tmp_path / "set"
    shutil.copytree(style_set, dst)
    return dst


def test_unknown_lora_id_names_the_line(style_set, tmp_path):
    bad = tmp_path / "train.csv"
    lines = (style_set / "train.csv").read_text().splitlines()
    cells = lines[3].split(",")
    cells[2] = "99"
    lines[3] = ",".join(cells)
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(EngineError, match=r"train\.csv:4: unknown LoRA id '99'"):
        data.read_train(bad, data.read_models(style_set / "models.csv"))


def test_corrupt_and_missing_images_are_reported_and_skipped(style_set, tmp_path, capsys):
    folder = _copy_set(style_set, tmp_path)
    images = sorted((folder / "images").glob("train-*.png"))
    images[0].write_bytes(b"not a png at all")
    images[1].write_bytes(images[2].read_bytes()[:200])  # truncated
    images[3].unlink()
    col = pipeline.build_adapter(folder / "train.csv", folder / "images", folder / "models.csv", "x", tmp_path / "idx",
                                 LoraConfig(rep="meanvar", scorer="knn"), ExtractOptions(text_model="none"))
    assert "text" not in col.stored and col.extra["text_model"] == "none"  # no image–text model: no text prior
    err = capsys.readouterr().err.replace("\n", "")  # the console wraps long lines
    assert images[0].name in err and "not an image" in err
    assert images[3].name in err and "file not found" in err
    assert col.array("train_embeddings").shape[0] == 4 * N_STYLES - 3 and col.extra["n_skipped"] == 3
    assert len(col.document("image_ids")) == 4 * N_STYLES - 3
    for p in images[4:]:
        p.unlink()
    with pytest.raises(EngineError, match="missing or unreadable"):
        pipeline.build_adapter(folder / "train.csv", folder / "images", folder / "models.csv", "y", tmp_path / "idx")


def test_bad_options_and_missing_adapter_are_engine_errors(style_set, tmp_path):
    with pytest.raises(EngineError, match="representation 'colour'"):
        LoraConfig(rep="colour").check()
    with pytest.raises(EngineError, match="scorer 'svm'"):
        LoraConfig(scorer="svm").check()
    with pytest.raises(EngineError, match="no LoRA adapter"):
        pipeline.submit_run(style_set / "test_image_ids_from_tree.txt", tmp_path / "r.run", "nope", tmp_path)
    with pytest.raises(EngineError, match="no such folder"):
        pipeline.build_adapter(style_set / "train.csv", tmp_path / "nowhere", style_set / "models.csv", "z", tmp_path)


# ---------------------------------------------------------------- the adapter as a collection

def test_adapter_is_one_collection_that_round_trips(style_set, built):
    col = model.open_adapter("fx", built)
    assert col.manifest["format"] == 2 and col.kind == model.KIND and col.manifest["encoder"] is None
    loras = data.read_models(style_set / "models.csv")
    assert col.ids == list(loras)
    assert col.items[0] == {"id": col.ids[0], "name": loras[col.ids[0]].name,
                            "trigger_words": loras[col.ids[0]].trigger_words}
    assert col.extra["config"] == {"rep": "meanvar+gram", "scorer": "proto", "content_removal": True,
                                   "text_weight": 0.0, "k": 10, "probe_c": 10.0}
    assert col.extra["image_model"] == "effnet:efficientnet-lite0" and col.extra["text_model"].startswith("conse")
    train_ids = [r["image_id"] for r in _csv(style_set / "train.csv")]
    assert sorted(col.document("image_ids")) == sorted(train_ids) and col.extra["n_images"] == len(train_ids)
    fitted = model.LoraModel.load(col)
    assert fitted.config == LoraConfig(rep="meanvar+gram", scorer="proto") and fitted.probe_weights is None
    assert set(fitted.stats) == {"meanvar", "gram"} and fitted.text is not None
    assert fitted.embeddings.shape == (len(train_ids), 928 + 1120) and fitted.labels.dtype == np.int64
    # the main vectors are the prototypes, re-normalized by the store; scores use the verbatim copy
    np.testing.assert_allclose(col.embeddings, fitted.prototypes, atol=1e-6)
    _, rows = col.search_vectors(np.asarray(fitted.prototypes[:1]), k=1)
    assert rows[0][0] == 0


def _old_layout(folder: Path) -> None:
    """What engine 0.1's `engine lora build` wrote: a hand-written manifest beside plain .npy files."""
    import json
    folder.mkdir(parents=True)
    for name in ("embeddings", "labels", "prototypes", "probe-weights", "probe-bias", "stats-meanvar-mean",
                 "stats-meanvar-std"):
        np.save(folder / f"{name}.npy", np.zeros((2, 3), np.float32))
    (folder / "manifest.json").write_text(json.dumps({
        "image_model": "effnet:efficientnet-lite0", "text_model": "none", "train": "data/train.csv",
        "images": "data/images", "kind": "lora-adapter", "version": 1, "lora_ids": ["1", "2"],
        "config": {"rep": "meanvar", "scorer": "probe", "content_removal": True, "text_weight": 0.0, "k": 10,
                   "probe_c": 10.0}}))


def test_old_layout_adapter_is_one_error_naming_folder_format_and_rebuild(run_cli, style_set, tmp_path, monkeypatch, capsys):
    _old_layout(tmp_path / "idx" / "old")
    with pytest.raises(EngineError) as info:
        pipeline.submit_run(style_set / "test_image_ids_from_tree.txt", tmp_path / "r.run", "old", tmp_path / "idx")
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "idx" / "old") in message
    assert "a LoRA adapter of format 1" in message and "engine lora build" in message and "force" in message
    code, _, err = run_cli("lora", "submit", "--queries",
                             style_set / "test_image_ids_from_tree.txt", "--out", tmp_path / "r.run",
                             "--name", "old", "--root", tmp_path / "idx")
    err = " ".join(err.split())  # the console may wrap
    assert code == 2 and err.count("error:") == 1 and "format 1" in err and "(--force)" in err
    assert "Traceback" not in err and not (tmp_path / "r.run").exists()


def test_build_refuses_to_overwrite_without_force_and_replaces_an_old_layout(style_set, tmp_path):
    root = tmp_path / "idx"
    _old_layout(root / "old")
    args = (style_set / "train.csv", style_set / "images", style_set / "models.csv", "old", root,
            LoraConfig(rep="meanvar", scorer="proto"), ExtractOptions(text_model="none"))
    with pytest.raises(EngineError, match=r"already exists.*force"):
        pipeline.build_adapter(*args)
    col = pipeline.build_adapter(*args, force=True)
    left = sorted(p.name for p in (root / "old").iterdir())
    assert "manifest.json" in left and all(n == "manifest.json" or "-000001." in n or n.endswith("-000001") for n in left), left
    assert model.open_adapter("old", root).ids == col.ids
    run = tmp_path / "r.run"
    pipeline.submit_run(style_set / "test_image_ids_from_tree.txt", run, "old", root, style_set / "images")
    assert len(run.read_text().splitlines()) == 2 * N_STYLES * N_STYLES


def test_a_collection_that_is_no_adapter_is_named(tmp_path):
    from engine.core.collection import Collection
    Collection.from_vectors("plain", ["a", "b"], np.eye(2, dtype=np.float32), None, "image", root=tmp_path)
    with pytest.raises(EngineError, match="not a LoRA adapter"):
        model.open_adapter("plain", tmp_path)


# ---------------------------------------------------------------- helpers the task now shares with the core

def test_blend_z_scores_rows_like_the_former_float32_version():
    rng = np.random.default_rng(3)
    image, prior = rng.normal(size=(5, 7)).astype(np.float32), rng.normal(size=(5, 7)).astype(np.float32)
    image[2] = 0.25  # a constant row carries no ranking information: 0 (the former guard gave 0 too)

    def former(s):  # the task's own z-score before it used engine.io.fusion.normalize_array
        sd = s.std(axis=1, keepdims=True)
        return (s - s.mean(axis=1, keepdims=True)) / np.where(sd > 1e-12, sd, 1.0)

    blended = model.blend(image, prior, 0.5)
    np.testing.assert_allclose(blended, former(image) + 0.5 * former(prior), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.argsort(-blended, kind="stable"),
                                  np.argsort(-(former(image) + 0.5 * former(prior)), kind="stable"))
    np.testing.assert_allclose(blended[2], 0.5 * former(prior)[2], atol=1e-6)  # image part of the row: 0


def test_missing_scikit_learn_names_the_extra(monkeypatch):
    import importlib
    real = importlib.import_module

    def no_sklearn(name, *args):
        if name.startswith("sklearn"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_sklearn)
    with pytest.raises(EngineError, match=r"scikit-learn is not installed.*engine\[lora\]"):
        model.sklearn("linear_model")


def test_models_are_told_apart_through_the_encoder_registry():
    assert features.is_clip("clip:ViT-B-32:openai") and features.is_clip("open_clip:ViT-B-32:openai")
    assert not features.is_clip("conse") and not features.is_clip("effnet")
    assert features.image_text_specs() == ["conse", "clip:ARCH:WEIGHTS", "sbert:NAME"]  # sbert: where the model embeds images
    with pytest.raises(EngineError, match=r"image model 'conse': use .*effnet") as info:
        features.make_extractor("conse", "none")
    assert "clip:ARCH:WEIGHTS" in str(info.value)
    with pytest.raises(EngineError, match=r"not an image–text encoder; use conse or clip:ARCH:WEIGHTS"):
        features.make_extractor("effnet", "sbert:all-MiniLM-L6-v2")
    with pytest.raises(EngineError, match=r"two different CLIP models.*image_model and text_model"):
        features.make_extractor("clip:ViT-B-32:openai", "clip:ViT-B-16:openai")


def test_eval_options_are_checked_with_the_option_names():
    with pytest.raises(EngineError, match=r"^content_removal 'maybe': use off, on or both"):
        cv.EvalOptions(content_removal="maybe").removals()
    with pytest.raises(EngineError, match=r"^text_weights: 'x' is not a number"):
        cv.EvalOptions(text_weights=("0", "x")).weights()
    with pytest.raises(EngineError, match=r"^folds 1: cross-validation needs at least 2 folds"):
        cv.EvalOptions(folds=1).checked_folds()
    assert cv.EvalOptions(text_weights=("0.5", "0", "0.5")).weights() == [0.0, 0.5]
    assert cv.EvalOptions(text_weights=()).weights() == [0.0]
    assert cv.EvalOptions(content_removal="both").removals() == (False, True)


def test_cv_table_keeps_its_plain_text_layout():
    result = cv.CVResult([
        {"representation": "meanvar", "scorer": "proto", "content_removal": True, "text_weight": 0.0,
         "mrr": 0.5, "r@1": 0.25, "r@5": 1.0},
        {"representation": "meanvar+gram", "scorer": "probe", "content_removal": False, "text_weight": 0.5,
         "mrr": 0.75, "r@1": 0.5, "r@5": 1.0},
        {"representation": "-", "scorer": "text", "content_removal": False, "text_weight": 1.0,
         "mrr": 0.125, "r@1": 0.0, "r@5": 0.5}], 8, 4, 2, 2, "effnet", "conse")
    assert cv.format_cv_table(result) == (
        "representation  scorer  content removal  text prior  MRR     R@1     R@5\n"
        "meanvar+gram    probe   off              0.5         0.7500  0.5000  1.0000\n"
        "meanvar         proto   on               off         0.5000  0.2500  1.0000\n"
        "-               text    off              only        0.1250  0.0000  0.5000")
    assert cv.format_cv_table(result, markdown=True).splitlines()[2].startswith("| meanvar+gram | probe | off |")


def test_rank_metrics_use_the_ntcir_b_profile():
    scores = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.7], [0.1, 0.2, 0.3]])
    got = cv.rank_metrics(scores, ["q1", "q2", "q3"], ["a", "c", "a"], ["a", "b", "c"])
    assert got == {"mrr": pytest.approx((1 + 0.5 + 1 / 3) / 3), "r@1": pytest.approx(1 / 3), "r@5": 1.0}
    assert cv.PRIMARY_METRIC == "mrr"


def test_query_lists_resolve_suffixes_and_reject_repeats(tmp_path):
    from PIL import Image
    images = tmp_path / "images"
    images.mkdir()
    for name in ("test-1-1.png", "test-1-1.jpg", "test-1-2.jpg"):
        Image.new("RGB", (8, 8)).save(images / name)
    assert data.resolve_image(images, "test-1-1") == images / "test-1-1.png"  # the layout's own suffix first
    assert data.resolve_image(images, "test-1-2") == images / "test-1-2.jpg"
    assert data.resolve_image(images, "test-1-3") is None
    ids = tmp_path / "ids.txt"
    ids.write_text("image_id\n# a comment\ntest-1-1\ntest-1-3\n")
    assert data.find_query_images(ids, images) == [("test-1-1", images / "test-1-1.png"), ("test-1-3", None)]
    ids.write_text("test-1-1\ntest-1-2\ntest-1-1\n")
    with pytest.raises(EngineError, match=r"ids\.txt:3: duplicate query id 'test-1-1' \(first at line 1\)"):
        data.find_query_images(ids, images)
    with pytest.raises(EngineError, match=r"nowhere: no such folder \(images\)"):
        data.find_query_images(ids, tmp_path / "nowhere")


def test_repeated_training_image_and_lora_ids_name_their_lines(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("image_id,model_id,content_image_id\na.png,1,1\nb.png,2,1\na.png,2,2\n")
    with pytest.raises(EngineError, match=r"train\.csv:4: duplicate image id 'a\.png' \(first at line 2\)"):
        data.read_train(train)
    models = tmp_path / "models.csv"
    models.write_text("id,model_name\n1,A\n01,B\n")
    with pytest.raises(EngineError, match=r"models\.csv:3: duplicate LoRA id '1'"):
        data.read_models(models)
    train.write_text("image_id,model_id,content_image_id\na.png,7,1\n")
    models.write_text("id,model_name\n1,A\n")
    with pytest.raises(EngineError, match=r"unknown LoRA id '7'.*matching models file \(models\)"):
        data.read_train(train, data.read_models(models))


def test_cli_defaults_are_the_dataclasses():
    import inspect

    from engine.tasks.lora import cli
    build = inspect.signature(cli.lora_build_cmd).parameters
    assert build["rep"].default == LoraConfig.rep and build["batch_size"].default == ExtractOptions.batch_size
    submit = inspect.signature(cli.lora_submit_cmd).parameters
    assert submit["run_id"].default == pipeline.SubmitOptions.run_id
    ev = inspect.signature(cli.lora_eval_cmd).parameters
    assert ev["reps"].default == ",".join(model.REPRESENTATIONS) and ev["text_weights"].default == "0,0.5"
    assert ev["scorers"].default == "proto,knn,probe" and ev["folds"].default == 5


def _pad_ids(style_set: Path, tmp_path: Path) -> Path:
    """The style set with every LoRA id written `000N`, as the organizers' files may spell them."""
    folder = _copy_set(style_set, tmp_path)
    for name, column in (("models.csv", "id"), ("train.csv", "model_id")):
        rows = _csv(folder / name)
        for row in rows:
            row[column] = row[column].zfill(4)
        with open(folder / name, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    qrels = [line.split() for line in (folder / "test-qrels.txt").read_text().splitlines()]
    (folder / "test-qrels.txt").write_text("".join(f"{q} {z} {d.zfill(4)} {r}\n" for q, z, d, r in qrels))
    return folder


def test_lora_ids_are_kept_as_written_from_build_to_eval(run_cli, style_set, tmp_path):
    folder = _pad_ids(style_set, tmp_path)
    images = data.read_train(folder / "train.csv")
    assert [lo.id for lo in data.loras_of(images).values()] == [f"{i:04d}" for i in range(1, N_STYLES + 1)]
    assert [lo.id for lo in data.read_models(folder / "models.csv").values()][:2] == ["0001", "0002"]
    root = tmp_path / "idx"
    code, _, err = run_cli("lora", "build", "--train", folder / "train.csv", "--images", folder / "images",
                           "--models", folder / "models.csv", "--name", "pad", "--root", root, "--quiet")
    assert code == 0, err
    run = tmp_path / "pad.run"
    code, _, err = run_cli("lora", "submit", "--queries", folder / "test_image_ids_from_tree.txt", "--images",
                           folder / "images", "--out", run, "--name", "pad", "--root", root, "--quiet")
    assert code == 0, err
    assert {line.split()[2] for line in run.read_text().splitlines()} == {f"{i:04d}" for i in range(1, N_STYLES + 1)}
    code, out, err = run_cli("eval", run, folder / "test-qrels.txt", "-m", "mrr", "--json")
    assert code == 0, err
    assert json.loads(out)["mrr"] > 0.6   # was 0.0: the run said `1` where the qrels say `0001`
