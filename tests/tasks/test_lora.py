"""Style image → LoRA (NTCIR-19 ModelRetrieval B): generator layout, style features, build/submit/eval, errors."""
from __future__ import annotations

import csv
import functools
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, SHARED_DATA
from engine.tasks.lora import pipeline as L
from engine.errors import EngineError

ROOT = REPO
SHARED = SHARED_DATA
NTCIR_B = SHARED / "ntcir19-modelretrieval-b"
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
    return L.make_extractor("effnet", "conse")


@pytest.fixture(scope="session")
def built(style_set, tmp_path_factory, extractor) -> Path:
    root = tmp_path_factory.mktemp("adapters")
    L.build_adapter(style_set / "train.csv", style_set / "images", style_set / "models.csv", "fx", root,
                    L.LoraConfig(rep="meanvar+gram", scorer="proto", content_removal=True))
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
    test_contents = {L.content_of(t) for t in test_ids}
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
def test_reads_the_real_ntcir_b_files_unchanged():
    if not NTCIR_B.is_dir():
        pytest.skip("../shared/data/ntcir19-modelretrieval-b not present")
    loras = L.read_models(NTCIR_B / "models.csv")
    assert len(loras) == 85 and loras["2"].trigger_words == "oil painting"
    assert loras["3"].prompt == "Dissolve Style, ral-dissolve"  # "[FLUX+SDXL+SD1.5]" is no style
    rows = L.read_train(NTCIR_B / "train.csv", loras)
    assert len(rows) == 3740 and {r.lora for r in rows} == set(loras)
    assert rows[0] == L.TrainImage("train-0002-0001.png", "1", "2", 2)
    assert all(L.content_of(r.image_id) == r.content for r in rows)
    test_ids = (NTCIR_B / "test_image_ids_from_tree.txt").read_text().split()
    test_contents = {L.content_of(t) for t in test_ids}
    assert None not in test_contents and not test_contents & {r.content for r in rows}
    gen_models = _generator().MODEL_COLUMNS
    with open(NTCIR_B / "models.csv", newline="", encoding="utf-8") as fh:
        assert next(csv.reader(fh)) == gen_models
    with open(NTCIR_B / "train.csv", newline="", encoding="utf-8") as fh:
        assert next(csv.reader(fh)) == _generator().TRAIN_COLUMNS


# ---------------------------------------------------------------- features and scorers

def test_one_forward_pass_gives_pooled_style_statistics_and_joint(style_set, extractor):
    import torch

    from engine.core.encoders import load_encoder
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
    out = L.remove_content(x, ["a", "a", "b", "b", None])
    np.testing.assert_allclose(out[:4, 2], 0)  # the shared "content" axis is gone
    np.testing.assert_allclose(out[4], x[4])  # no group: unchanged
    sims = np.array([[0.9, 0.8, 0.1, 0.7]])
    votes = L.knn_vote(sims, np.array([0, 0, 1, 2]), 4, k=2)
    assert list(np.argsort(-votes[0])) == [0, 2, 1, 3]  # class 3 has no image: last
    prior = np.array([[0.0, 1.0, 0.0, 0.0]])
    assert L.blend(votes, None, 0.5) is votes
    assert np.argmax(L.blend(votes, prior, 100.0)) == 1


# ---------------------------------------------------------------- build / submit / eval

def test_build_then_submit_ranks_held_out_styles(style_set, built, tmp_path):
    from engine.eval.evaluate import evaluate_files
    from engine.eval.runs import read_run
    folder = built / "fx"
    assert np.load(folder / "prototypes.npy").shape[0] == N_STYLES
    assert np.load(folder / "embeddings.npy").shape[0] == 4 * N_STYLES
    run = tmp_path / "test.run"
    report = L.submit_run(style_set / "test_image_ids_from_tree.txt", run, "fx", built, style_set / "images")
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
    report = L.submit_run(queries, run, "fx", built, text_weight=0.5)
    from engine.eval.runs import read_run
    assert report.n_queries == 3 and set(read_run(run)) == {p.stem for p in queries.iterdir()}


def test_cross_validation_is_grouped_by_content_and_compares_configs(style_set):
    result = L.cross_validate(style_set / "train.csv", style_set / "images", style_set / "models.csv", folds=2,
                              reps=["pooled", "meanvar+gram"], scorers=["proto", "probe"], removals=(False, True),
                              text_weights=(0.0, 0.5))
    assert result.n_contents == 4 and result.folds == 2 and result.n_images == 4 * N_STYLES
    assert len(result.rows) == 2 * 2 * 2 * 2 + 1  # rep × scorer × removal × weight, plus text alone
    by = {(r["representation"], r["scorer"], r["content_removal"], r["text_weight"]): r for r in result.rows}
    style = by[("meanvar+gram", "proto", True, 0.0)]
    assert style["mrr"] > 0.6 and style["r@5"] >= style["r@1"]
    assert all(0 <= r["mrr"] <= 1 for r in result.rows)
    table = L.format_cv_table(result, markdown=True)
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
        L.read_train(bad, L.read_models(style_set / "models.csv"))


def test_corrupt_and_missing_images_are_reported_and_skipped(style_set, tmp_path, capsys):
    data = _copy_set(style_set, tmp_path)
    images = sorted((data / "images").glob("train-*.png"))
    images[0].write_bytes(b"not a png at all")
    images[1].write_bytes(images[2].read_bytes()[:200])  # truncated
    images[3].unlink()
    folder = L.build_adapter(data / "train.csv", data / "images", data / "models.csv", "x", tmp_path / "idx",
                             L.LoraConfig(rep="meanvar", scorer="knn"), joint_spec="none")
    assert not (folder / "text.npy").exists()  # no image–text model: no text prior
    err = capsys.readouterr().err.replace("\n", "")  # the console wraps long lines
    assert images[0].name in err and "not an image" in err
    assert images[3].name in err and "file not found" in err
    assert np.load(folder / "embeddings.npy").shape[0] == 4 * N_STYLES - 3
    for p in images[4:]:
        p.unlink()
    with pytest.raises(EngineError, match="missing or unreadable"):
        L.build_adapter(data / "train.csv", data / "images", data / "models.csv", "y", tmp_path / "idx")


def test_bad_options_and_missing_adapter_are_engine_errors(style_set, tmp_path):
    with pytest.raises(EngineError, match="representation 'colour'"):
        L.LoraConfig(rep="colour").check()
    with pytest.raises(EngineError, match="scorer 'svm'"):
        L.LoraConfig(scorer="svm").check()
    with pytest.raises(EngineError, match="no LoRA adapter"):
        L.submit_run(style_set / "test_image_ids_from_tree.txt", tmp_path / "r.run", "nope", tmp_path)
    with pytest.raises(EngineError, match="no such folder"):
        L.build_adapter(style_set / "train.csv", tmp_path / "nowhere", style_set / "models.csv", "z", tmp_path)
