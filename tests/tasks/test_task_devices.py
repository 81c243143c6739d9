"""`--device` and `--ray` on the task builds (`eventa build`, `dse build`, `lora build`), as on `engine build`:
a CPU build per command (fast), a bad value refused in one line before any model loads, and the same build on
a local Ray equal to the CPU one (slow)."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from engine.core.collection import Collection


@pytest.fixture(scope="module")
def eventa_data(tmp_path_factory):
    from engine.tasks.eventa.fixture import make_eventa_fixture
    return make_eventa_fixture(tmp_path_factory.mktemp("eventa") / "data", n_articles=4, images_per_article=2,
                               image_size=64, broken_image=False)


@pytest.fixture(scope="module")
def dse_data(tmp_path_factory):
    from fixtures.dse_synthetic import generate, write_corpus
    return write_corpus(generate(n_records=40, n_cases=4, n_train_cases=1, seed=3), tmp_path_factory.mktemp("dse"))


@pytest.fixture(scope="module")
def lora_data(repo, tmp_path_factory):
    pytest.importorskip("skimage")
    spec = importlib.util.spec_from_file_location("make_style_set_t", repo / "benchmarks" / "make_style_set.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_style_set_t"] = module
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("styles")
    module.make_style_set(out, "skimage", 3, 3, size=48, test_fraction=0.34)
    return out


def _eventa(paths, root, *extra):
    return ("eventa", "build", "--database", paths.database, "--images", paths.images, "--name", "ev",
            "--root", root, "-q", *extra)


def _dse(paths, root, *extra):
    return ("dse", "build", "--datasets", paths["datasets"], "--name", "ds", "--root", root, "-q", *extra)


def _lora(folder, root, *extra):
    return ("lora", "build", "--train", folder / "train.csv", "--images", folder / "images", "--models",
            folder / "models.csv", "--name", "lo", "--root", root, "-q", *extra)


@pytest.mark.parametrize("command", ["eventa", "dse", "lora"])
def test_bad_device_is_one_line_before_any_model(run_cli, command, eventa_data, dse_data, tmp_path, monkeypatch, capsys,
                                                  request):
    args = {"eventa": lambda: _eventa(eventa_data, tmp_path),
            "dse": lambda: _dse(dse_data, tmp_path),
            "lora": lambda: _lora(request.getfixturevalue("lora_data"), tmp_path)}[command]()
    code, _, err = run_cli(*args, "--device", "tpu")
    assert code != 0 and "--device must be one of auto|cpu|cuda|cuda:N|mps, not 'tpu'" in err, err
    assert len(err.strip().splitlines()) == 1


def test_eventa_build_on_cpu(run_cli, eventa_data, tmp_path, monkeypatch, capsys):
    code, _, err = run_cli(*_eventa(eventa_data, tmp_path, "--device", "cpu"))
    assert code == 0, err
    images = Collection.open("images", tmp_path / "ev")
    assert len(images) == 8


def test_dse_build_on_cpu(run_cli, dse_data, tmp_path, monkeypatch, capsys, text_encoder):
    from engine.tasks.dse.data import read_datasets, record_text
    code, _, err = run_cli(*_dse(dse_data, tmp_path, "--device", "cpu"))
    assert code == 0, err
    col = Collection.open("ds", tmp_path)
    records = read_datasets(dse_data["datasets"])
    want = text_encoder.encode_texts([record_text(r) for r in records])  # the reference: the encoder itself
    np.testing.assert_allclose(col.array("emb_all").astype(np.float32), want, atol=2e-3)
    assert not (tmp_path / "ds" / ".partial").exists()


def test_lora_build_on_cpu(run_cli, lora_data, tmp_path, monkeypatch, capsys):
    code, _, err = run_cli(*_lora(lora_data, tmp_path, "--device", "cpu"))
    assert code == 0, err
    assert Collection.open("lo", tmp_path).extra["n_images"] > 0


@pytest.mark.slow
def test_task_builds_on_ray_equal_cpu(run_cli, ray_local, eventa_data, dse_data, lora_data, tmp_path, monkeypatch, capsys):
    for make, check in ((_eventa, lambda root: np.asarray(Collection.open("images", root / "ev").embeddings)),
                        (_dse, lambda root: Collection.open("ds", root).array("emb_all").astype(np.float32)),
                        (_lora, lambda root: Collection.open("lo", root).array("train_embeddings"))):
        data = {_eventa: eventa_data, _dse: dse_data, _lora: lora_data}[make]
        here, there = tmp_path / f"{make.__name__}-cpu", tmp_path / f"{make.__name__}-ray"
        code, _, err = run_cli(*make(data, here, "--device", "cpu"))
        assert code == 0, err
        code, _, err = run_cli(*make(data, there, "--device", "cpu", "--ray", "local"))
        assert code == 0, err
        np.testing.assert_allclose(check(there), check(here), atol=2e-3)
    assert ray_local.is_initialized()  # the running Ray was used, not shut down
