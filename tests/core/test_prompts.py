"""Instruction prompts: applied at build and at query (equal to the model's own `encode(prompt=...)`), stored
in the manifest, recognised from model names, refused in one line when out of range."""
from __future__ import annotations

import numpy as np

from engine.core.encoders.prompts import preset_for

TEXTS = ["a recipe for sourdough bread", "convolutional networks for images", "castles of medieval Europe"]


def test_presets_follow_the_model_families():
    assert preset_for("intfloat/e5-base-v2") == ("query: ", "passage: ")
    assert preset_for("intfloat/multilingual-e5-large")[0] == "query: "
    assert preset_for("BAAI/bge-base-en-v1.5")[0].startswith("Represent this sentence")
    assert preset_for("nomic-ai/nomic-embed-text-v1.5") == ("search_query: ", "search_document: ")
    assert preset_for("Qwen/Qwen3-Embedding-0.6B")[0].startswith("Instruct:")
    assert preset_for("all-MiniLM-L6-v2") is None


def test_prompts_at_build_and_query_equal_the_models_own_encode(tmp_path):
    from engine.core.collection import Collection
    from engine.core.encoders.sbert import load_sentence_model
    from engine.core.sources import Item
    col = Collection.build("p", items=[Item(f"t{i}", t) for i, t in enumerate(TEXTS)], kind="text", root=tmp_path,
                           query_prompt="query: ", doc_prompt="passage: ")
    assert col.manifest["prompts"] == {"query": "query: ", "doc": "passage: "}
    model = load_sentence_model("all-MiniLM-L6-v2", "cpu")
    docs = model.encode(TEXTS, prompt="passage: ", normalize_embeddings=True)
    np.testing.assert_allclose(np.asarray(col.embeddings), docs, atol=1e-5)
    reopened = Collection.open("p", tmp_path)
    q = reopened.encode_queries(texts=["bread"])[0]  # the light (ONNX) query path, told nothing
    np.testing.assert_allclose(q, model.encode(["bread"], prompt="query: ", normalize_embeddings=True)[0],
                               atol=1e-4)
    assert abs(float(q @ model.encode(["bread"], normalize_embeddings=True)[0]) - 1) > 1e-4  # it did change


def test_no_prompts_for_a_model_that_takes_none(tmp_path):
    from engine.core.collection import Collection
    from engine.core.sources import Item
    col = Collection.build("n", items=[Item("a", "text")], kind="text", root=tmp_path)
    assert "prompts" not in col.manifest


def test_a_bad_prompt_is_one_line(run_cli, tmp_path, monkeypatch, capsys):
    src = tmp_path / "t.csv"
    src.write_text("id,text\na,hello\n")
    code, out, err = run_cli("build", "x", "--texts", src, "--query-prompt", "q" * 1001,
                             "--root", tmp_path)
    text = (out + err).strip()
    assert code == 2 and "--query-prompt must be" in text and len(text.splitlines()) <= 2
