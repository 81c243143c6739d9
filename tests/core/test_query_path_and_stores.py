"""Speed at real size without losing correctness: open vs verify, hit rows read alone, the previous format,
stores, query-time knobs, `--index auto`, devices on a machine without a GPU, the ONNX query path."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.core.storage.store import generations
from engine.core.collection import MANIFEST, Collection
from engine.core.storage.index.faiss_index import SearchKnobs
from engine.errors import EngineError


def _clustered(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(32, dim))
    x = centers[rng.integers(0, 32, n)] + 0.3 * rng.normal(size=(n, dim))
    return x.astype(np.float32)


def _exact_top(x: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    return np.argsort(-(qn @ xn.T), axis=1, kind="stable")[:, :k]


def test_verify_catches_a_changed_byte_that_open_does_not_read(run_cli, tmp_path, monkeypatch, capsys):
    x = _clustered(50)
    col = Collection.from_vectors("c", [f"d{i}" for i in range(50)], x, None, "text", root=tmp_path)
    emb = col.file("embeddings")
    data = bytearray(emb.read_bytes())
    data[-3] ^= 0x01  # one bit of one float: same size
    emb.write_bytes(bytes(data))
    Collection.open("c", tmp_path)  # sizes only
    code, _, err = run_cli("verify", "c", "--root", tmp_path)
    assert code == 2 and "embeddings-000001.npy does not match its checksum" in err and "Traceback" not in err
    col = Collection.from_vectors("ok", ["a", "b"], x[:2], None, "text", root=tmp_path)
    code, _, err = run_cli("verify", "ok", "--root", tmp_path)
    assert code == 0 and "every byte matches" in err


def test_hits_read_only_their_rows_and_the_previous_format_opens(tmp_path):
    x = _clustered(300)
    meta = [{"path": f"img/{i}.jpg", "caption": "é" * (i % 7)} for i in range(300)]
    col = Collection.from_vectors("c", [f"d{i}" for i in range(300)], x, None, "image", root=tmp_path, meta=meta)
    q = x[[5, 123]]
    hits = col.hits(*col.search_vectors(q, 5))
    want = _exact_top(x, q, 5)
    assert [[h.id for h in hs] for hs in hits] == [[f"d{i}" for i in row] for row in want]
    assert hits[1][0].meta == meta[123] and col._items is None  # the 300 rows were never parsed
    offsets = np.load(col.file("item_offsets"))
    assert len(offsets) == 301 and np.array_equal(offsets, generations.line_offsets(col.file("items")))
    # a collection written before the offset index: no item_offsets role, the file is scanned for newlines
    manifest = json.loads((col.path / MANIFEST).read_text())
    gone = manifest["roles"].pop("item_offsets")
    manifest["files"].pop(gone)
    (col.path / gone).unlink()
    (col.path / MANIFEST).write_text(json.dumps(manifest))
    old = Collection.open("c", tmp_path, verify=True)
    assert [h.id for h in old.hits(*old.search_vectors(q, 5))[1]] == [f"d{i}" for i in want[1]]
    assert old.ids[:3] == ["d0", "d1", "d2"]


@pytest.mark.parametrize("factory,min_recall", [("SQfp16", 0.99), ("SQ8", 0.9)])
def test_float16_and_sq8_stores_round_trip(tmp_path, factory, min_recall):
    from engine.core.storage.builder.options import BuildOptions
    from engine.core.storage.index.faiss_index import STORES
    assert STORES == {"float32": "Flat", "float16": "SQfp16", "sq8": "SQ8"}
    assert BuildOptions(store="float16").factory() == "SQfp16"
    with pytest.raises(EngineError, match="store sq8 is for exact search"):
        BuildOptions(store="sq8", index="HNSW32").check()
    x, q = _clustered(2000), _clustered(50, seed=1)
    col = Collection.from_vectors("c", [str(i) for i in range(2000)], x, None, "text", root=tmp_path, index=factory)
    again = Collection.open("c", tmp_path, verify=True)
    assert again.manifest["index_factory"] == factory and again.index.ntotal == 2000
    rows = again.search_vectors(q, 10)[1]
    want = _exact_top(x, q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, want)])
    assert recall >= min_recall
    assert np.allclose(np.load(col.file("embeddings")), x / np.linalg.norm(x, axis=1, keepdims=True), atol=1e-6)


def test_query_time_knobs_override_for_one_call_only(tmp_path):
    x, q = _clustered(4000, dim=32), _clustered(40, dim=32, seed=2)
    col = Collection.from_vectors("ivf", [str(i) for i in range(4000)], x, None, "text", root=tmp_path,
                                  index="IVF64,Flat")
    assert col.search_params == {"nprobe": 32}
    want = _exact_top(x, q, 10)

    def recall(rows):
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, want)])
    low = recall(col.search_vectors(q, 10, SearchKnobs(nprobe=1))[1])
    full = recall(col.search_vectors(q, 10, SearchKnobs(nprobe=64))[1])
    assert full == pytest.approx(1.0) and low < full
    import faiss
    assert faiss.extract_index_ivf(col.index).nprobe == 32  # the stored operating point is back
    with pytest.raises(EngineError, match="ef applies to an HNSW index; this collection's index is IVF64,Flat"):
        col.search_vectors(q, 10, SearchKnobs(ef=64))
    with pytest.raises(EngineError, match="nprobe must be at least 1"):
        col.search_vectors(q, 10, SearchKnobs(nprobe=0))
    hnsw = Collection.from_vectors("h", [str(i) for i in range(500)], x[:500], None, "text", root=tmp_path,
                                   index="HNSW16")
    assert hnsw.search_vectors(q, 5, SearchKnobs(ef=8))[1].shape == (40, 5)
    assert hnsw.index.hnsw.efSearch == 128


def test_index_auto_measures_and_respects_a_tiny_budget(tmp_path):
    from engine.core.storage.index.auto import memory_bytes, parse_bytes
    assert parse_bytes("4G") == 4 * 2**30 and parse_bytes("512m") == 512 * 2**20 and parse_bytes(None) is None
    with pytest.raises(EngineError, match="memory_budget must be a size"):
        parse_bytes("lots")
    x, q = _clustered(3000), _clustered(100, seed=3)
    n, dim = x.shape
    budget = memory_bytes("SQ8", n, dim) + 100  # only the 8-bit store fits
    col = Collection.from_vectors("a", [str(i) for i in range(n)], x, None, "image", root=tmp_path, index="auto",
                                  queries=q, memory_budget=budget, recall=0.9)
    choice = col.manifest["index_choice"]
    assert col.manifest["index_factory"] == "SQ8" == choice["factory"]
    assert {r["factory"] for r in choice["pilot"]} == {"SQ8"}
    assert choice["recall@10"] == col.manifest["recall_at_10"] >= 0.9
    free = Collection.from_vectors("b", [str(i) for i in range(n)], x, None, "image", root=tmp_path, index="auto",
                                   queries=q, recall=0.95)
    c = free.manifest["index_choice"]
    assert {"Flat", "SQfp16", "SQ8", "HNSW32"} <= {r["factory"] for r in c["pilot"]}
    assert c["recall@10"] >= 0.95 and free.manifest["search_params"] == c["params"]
    rows = free.search_vectors(q, 10)[1]
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, _exact_top(x, q, 10))]) == \
        pytest.approx(c["recall@10"], abs=0.02)
    with pytest.raises(EngineError, match="no index of 3,000 × 16 fits in memory_budget"):
        Collection.from_vectors("c", [str(i) for i in range(n)], x, None, "image", root=tmp_path, index="auto",
                                memory_budget=1000)


def test_devices_on_a_machine_without_a_gpu(text_encoder):
    import torch

    from engine.core.encoders.device import (
        batch_size_for,
        check_device,
        resolve_device,
        set_device,
    )
    assert check_device("CUDA:1") == "cuda:1" and check_device(None) == "auto"
    with pytest.raises(EngineError, match="device must be one of auto|cpu|cuda|cuda:N|mps, not 'gpu'"):
        check_device("gpu")
    assert resolve_device("cpu") == "cpu"
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: auto picks it")
    assert resolve_device("auto") in ("cpu", "mps")
    with pytest.raises(EngineError, match="device cuda:0: this machine has 0 CUDA GPU"):
        resolve_device("cuda:0")
    assert batch_size_for("auto", "image", "cpu") == 32 and batch_size_for("auto", "text", "cuda") == 512
    assert batch_size_for("7", "text", "cpu") == 7
    with pytest.raises(EngineError, match="batch_size must be at least 1"):
        batch_size_for(0, "text", "cpu")
    from engine.core.encoders.sbert import sentence_encoder
    set_device("cpu")
    try:
        enc = sentence_encoder("all-MiniLM-L6-v2")
        assert enc.device == "cpu" == text_encoder.device
        texts = ["a dog on a beach", "a red car"]
        assert np.allclose(enc.encode_texts(texts, batch_size="auto"), text_encoder.encode_texts(texts), atol=1e-6)
    finally:
        set_device("auto")


def test_onnx_query_embeddings_equal_torch(text_encoder):
    from engine.core.encoders.onnx_text import text_encoder as onnx_encoder
    enc = onnx_encoder("all-MiniLM-L6-v2")
    assert enc is not None and enc.info["runtime"] == "onnx" and enc.spec == text_encoder.spec
    texts = ["a dog on a beach", "x", "Émigré café, naïve résumé — 東京タワー", "long " * 400,
             "the history of the Roman empire and its many emperors"]
    a = enc.encode_texts(texts, batch_size=2)
    b = text_encoder.encode_texts(texts)
    assert a.shape == b.shape and np.abs(a - b).max() < 1e-4


def test_a_text_query_imports_neither_torch_nor_sentence_transformers(repo, tmp_path, text_encoder):
    Collection.from_vectors("t", ["a", "b"], text_encoder.encode_texts(["a dog on a beach", "a red car"]),
                            text_encoder.spec, "text", root=tmp_path)
    from engine.core.encoders.onnx_text import text_encoder as onnx_encoder
    assert onnx_encoder("all-MiniLM-L6-v2") is not None  # exported to this session's cache
    code = ("import sys\nfrom engine.core.collection import Collection\n"
            f"c = Collection.open('t', {str(tmp_path)!r})\nprint(c.search(text='puppy at the seaside', k=1)[0].id)\n"
            "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(repo)}).stdout.split("\n")
    assert out[0] == "a" and out[1] == "[]"


@pytest.mark.parametrize("entry", ["engine.cli", "engine"])
def test_engine_search_starts_without_build_or_write_modules(repo, tmp_path, text_encoder, entry):
    """`engine search` from the shell: a query's start-up imports what reads and searches a collection, not
    what builds, shards, locks or checksums it (each costs milliseconds of every cold query), nor the tasks,
    the evaluation or the service, from the module and from the console script alike."""
    Collection.from_vectors("t", ["a", "b"], text_encoder.encode_texts(["a dog on a beach", "a red car"]),
                            text_encoder.spec, "text", root=tmp_path)
    from engine.core.encoders.onnx_text import text_encoder as onnx_encoder
    assert onnx_encoder("all-MiniLM-L6-v2") is not None
    build_only = ("engine.core.storage.index.shards", "engine.core.storage.index.ondisk", "engine.core.storage.index.auto",
                  "engine.core.storage.store.lock", "engine.core.ranking.filters", "engine.io.tables", "torch", "transformers",
                  "concurrent.futures", "socket", "rich", "engine.eval", "engine.serve", "engine.tasks")
    code = ("import sys, runpy\nsys.argv = ['engine', 'search', 't', 'puppy at the seaside', '-k', '1', '--json',"
            f" '--root', {str(tmp_path)!r}, '-q']\n"
            f"try:\n    runpy.run_module({entry!r}, run_name='__main__')\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {build_only!r} if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(repo)}  # the session cache, where the ONNX export above is
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert json.loads(out[:out.rindex("}") + 1])["hits"][0]["id"] == "a"
    assert out.strip().splitlines()[-1] == "[]"


def test_streamed_flat_index_file_is_what_faiss_writes(tmp_path):
    import faiss

    from engine.core.encoders.base import l2_normalize
    from engine.core.storage.index.faiss_index import FlatFile
    x = _clustered(1000, dim=24)
    FlatFile(x, normalize=True, block=300).write(tmp_path / "streamed.faiss")
    ref = faiss.IndexFlatIP(24)
    ref.add(l2_normalize(x))
    faiss.write_index(ref, str(tmp_path / "faiss.faiss"))
    assert (tmp_path / "streamed.faiss").read_bytes() == (tmp_path / "faiss.faiss").read_bytes()
    assert faiss.read_index(str(tmp_path / "streamed.faiss")).ntotal == 1000


def test_a_cpu_text_build_runs_on_the_onnx_session_and_equals_torch(tmp_path, text_encoder, monkeypatch):
    """A text build on the CPU encodes through the ONNX session its queries use (prompts included), equal to
    the torch build within 1e-4; once the model is exported, the build imports neither torch nor
    sentence-transformers."""
    texts = ["a dog on a beach", "x", "Émigré café, naïve résumé — 東京タワー", "long " * 400,
             "the history of the Roman empire and its many emperors"]
    csv = tmp_path / "t.csv"
    csv.write_text("id,text\n" + "".join(f"t{i},\"{t}\"\n" for i, t in enumerate(texts)), encoding="utf-8")
    onnx = Collection.build("o", texts=csv, root=tmp_path, doc_prompt="passage: ", device="cpu")
    monkeypatch.setenv("ENGINE_ONNX", "0")
    torch_built = Collection.build("t", texts=csv, root=tmp_path, doc_prompt="passage: ", device="cpu")
    monkeypatch.delenv("ENGINE_ONNX")
    assert onnx.ids == torch_built.ids
    assert np.abs(np.asarray(onnx.embeddings) - np.asarray(torch_built.embeddings)).max() < 1e-4
    code = ("import sys\nfrom engine.core.collection import Collection\n"
            f"Collection.build('again', texts={str(csv)!r}, root={str(tmp_path)!r}, doc_prompt='passage: ')\n"
            "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}).stdout.strip().splitlines()
    assert out[-1] == "[]"
    again = Collection.open("again", tmp_path)
    assert np.abs(np.asarray(again.embeddings) - np.asarray(torch_built.embeddings)).max() < 1e-4


def test_a_single_query_scans_on_faiss_and_a_batch_on_blas():
    """A big exact index: one query stays on FAISS's own one-thread scan (BLAS would wake its threads for a
    matrix-vector product), any batch goes through BLAS (the vectors read once per block of queries); small
    indexes keep FAISS's default. Results equal either way."""
    from types import SimpleNamespace

    import faiss

    from engine.core.storage.index.faiss_index import BLAS_MIN_BYTES, faiss_module, search_index, use_blas_for
    faiss_module()
    default = faiss.cvar.distance_compute_blas_threshold
    big = SimpleNamespace(ntotal=BLAS_MIN_BYTES // (4 * 64), d=64)
    use_blas_for(big, 8)
    assert faiss.cvar.distance_compute_blas_threshold == 1
    use_blas_for(big, 1)
    assert faiss.cvar.distance_compute_blas_threshold == default
    use_blas_for(SimpleNamespace(ntotal=100, d=64), 8)
    assert faiss.cvar.distance_compute_blas_threshold == default
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BLAS_MIN_BYTES // (4 * 64), 64)).astype(np.float32)
    index = faiss.IndexFlatIP(64)
    index.add(x)
    q = rng.normal(size=(3, 64)).astype(np.float32)
    one = [search_index(index, q[i:i + 1], 5)[1][0].tolist() for i in range(3)]
    assert search_index(index, q, 5)[1].tolist() == one == np.argsort(-(q @ x.T), axis=1)[:, :5].tolist()
