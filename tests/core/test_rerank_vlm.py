"""`vlm:` image candidates: (caption, image) log-odds of "yes" against the model's own forward pass (a tiny
random Qwen2-VL built here with a word-level tokenizer, loaded by path), images read from the collection's
recorded files; modality refusals in one line before any model loads, both ways."""
from __future__ import annotations

import shutil

import numpy as np
import pytest


JUDGE = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
         'Note that the answer can only be "yes" or "no".')
VL_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
               "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|>"
               "<|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
VL_SPECIAL = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>",
              "<|video_pad|>"]


@pytest.fixture(scope="module")
def tiny_vlm(lm_words, make_word_tokenizer, tmp_path_factory):
    """A random-weight Qwen2-VL (1 vision block, 2 text layers) and its processor, saved to a folder."""
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from transformers import (Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor,
                              Qwen2VLProcessor, Qwen2VLVideoProcessor)
    torch.manual_seed(0)
    tok = make_word_tokenizer([lm_words, JUDGE, "system user assistant <Instruct>: <Query>: <Document>: Given a search "
                          "query, retrieve the images that match"], special=VL_SPECIAL, chat_template=VL_TEMPLATE)
    ids = {t: tok.convert_tokens_to_ids(t) for t in VL_SPECIAL}
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112),
                                 tokenizer=tok, video_processor=Qwen2VLVideoProcessor(), chat_template=VL_TEMPLATE)
    config = Qwen2VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         initializer_range=0.5, rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2],
                                                                 "rope_theta": 10000.0}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, patch_size=14, spatial_merge_size=2,
                           temporal_patch_size=2, initializer_range=0.5),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    out = tmp_path_factory.mktemp("tiny-vlm")
    Qwen2VLForConditionalGeneration(config).save_pretrained(out)
    processor.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def photo_col(sample_photos, tmp_path_factory):
    """An image collection over the bundled photos, its vectors random (the first stage's order is not what is
    tested), its files recorded as a build records them; text queries through the installed MiniLM."""
    from engine.core.collection import Collection
    from engine.core.storage.store.stored import IMAGE_FILES
    root = tmp_path_factory.mktemp("photos")
    names = ["coffee", "rocket", "horse", "astronaut"]
    files = {}
    for name in names:
        files[name] = str(root / f"{name}{sample_photos[name].suffix}")
        shutil.copy(sample_photos[name], files[name])
    vectors = np.random.default_rng(0).normal(size=(len(names), 384)).astype(np.float32)
    return Collection.from_vectors("pics", names, vectors, "sbert:all-MiniLM-L6-v2", "image", root=root / "idx",
                                   documents={IMAGE_FILES: files})


def reference(folder, query: str, files: list[str], instruction: str) -> np.ndarray:
    """The model's forward pass on the judge's question with each image, all in one left-padded batch."""
    import torch
    from PIL import Image

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from transformers import AutoModelForImageTextToText, AutoProcessor
    processor = AutoProcessor.from_pretrained(folder)
    processor.tokenizer.padding_side = "left"
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    messages = [{"role": "system", "content": JUDGE}, {"role": "user", "content": [
        {"type": "text", "text": f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: "}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    images = []
    for f in files:
        img = Image.open(f).convert("RGB")
        img.thumbnail((448, 448))
        images.append(img)
    batch = processor(text=[text] * len(files), images=images, padding=True, return_tensors="pt")
    with torch.no_grad():
        lp = torch.log_softmax(model(**batch).logits[:, -1, :], -1)
    tok = processor.tokenizer
    return (lp[:, tok.convert_tokens_to_ids("yes")] - lp[:, tok.convert_tokens_to_ids("no")]).numpy()


def test_image_candidates_are_ordered_by_the_models_log_odds(tiny_vlm, photo_col):
    from engine.core.storage.store.stored import IMAGE_FILES
    query = "a photo of a horse"
    first = photo_col.search(text=query, k=4)
    files = photo_col.document(IMAGE_FILES)
    ref = reference(tiny_vlm, query, [files[h.id] for h in first], "Find the photo")
    assert np.ptp(ref) > 1e-4
    hits = photo_col.search(text=query, k=4, rerank=f"vlm:{tiny_vlm}", rerank_depth=4,
                            rerank_options={"instruction": "Find the photo", "batch_size": 3})
    assert [h.id for h in hits] == [first[i].id for i in np.argsort(-ref, kind="stable")]
    np.testing.assert_allclose([h.score for h in hits], np.sort(ref)[::-1], atol=2e-4, rtol=1e-4)


def test_an_unreadable_image_scores_last(tiny_vlm, tmp_path):
    from engine.core.ranking.rerankers.spec import load_reranker
    from PIL import Image
    good = tmp_path / "a.png"
    Image.new("RGB", (90, 60), "red").save(good)
    bad = tmp_path / "b.png"
    bad.write_bytes(b"not an image")
    scores = load_reranker(f"vlm:{tiny_vlm}").score("a red square", [str(bad), str(good), str(tmp_path / "gone.png")],
                                                     kind="image")
    assert np.isfinite(scores[1]) and scores[0] == scores[2] == -np.inf


def test_modality_refusals_are_one_line_before_loading(photo_col, tmp_path):
    """No model named here exists: the refusal comes first."""
    from engine.core.collection import Collection
    from engine.errors import EngineError
    with pytest.raises(EngineError, match="holds images; reranker llm:some/model scores texts only"):
        photo_col.search(text="a horse", k=2, rerank="llm:some/model")
    with pytest.raises(EngineError, match="scores texts only"):
        photo_col.search(text="a horse", k=2, rerank="embed:sbert:all-MiniLM-L6-v2")
    texts = Collection.from_vectors("t", ["a", "b"], np.eye(2, 8, dtype=np.float32), "sbert:all-MiniLM-L6-v2",
                                    "text", root=tmp_path)
    with pytest.raises(EngineError, match="holds texts; reranker vlm:some/model scores images only"):
        texts.search(text="cats", k=1, rerank="vlm:some/model")
    with pytest.raises(EngineError, match="embeds images only"):
        texts.search(text="cats", k=1, rerank="embed:effnet")
