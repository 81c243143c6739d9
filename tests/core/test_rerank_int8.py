"""`cross:` with int8 weights (`--rerank-dtype int8`, `rerank(dtype="int8")`): onnxruntime's dynamic quantization
of the exported graph, written once beside the float export. Its order stays close to float32's (stated
tolerances below), its scores are cached apart from float32's, a dtype out of range or int8 on a torch path is
one line before any model loads, and both commands take the flag."""
from __future__ import annotations

import numpy as np
import pytest

WORDS = "river bread chess train music star cheese boat castle forest mountain city garden market bridge museum".split()

TAU = 0.85
"""Least Kendall tau between a query's int8 and float32 scores (measured on this model: 0.92–0.98)."""
TOP = 4
"""Least overlap of a query's top 5 under int8 and float32 (measured: 4–5)."""
DRIFT = 0.15
"""Largest |int8 − float32| as a share of the query's float32 score range (measured: 0.04–0.08)."""


@pytest.fixture()
def onnx_ready():
    from engine.core.encoders.onnx_text import available
    if not available():
        pytest.skip("onnxruntime is not installed")


def some_queries(n: int = 6, depth: int = 30):
    rng = np.random.default_rng(1)
    return [(" ".join(rng.choice(WORDS, 4)), [" ".join(rng.choice(WORDS, int(rng.integers(3, 15))))
                                              for _ in range(depth)]) for _ in range(n)]


def test_int8_order_agrees_with_float32(tiny_cross_spread, onnx_ready):
    from scipy.stats import kendalltau

    from engine.core.ranking.rerankers.cross_onnx import MODEL_FILES, export_dir
    from engine.core.ranking.rerankers.fingerprint import model_key
    from engine.core.ranking.rerankers.spec import RerankerSpec, load_reranker
    float32 = load_reranker(f"cross:{tiny_cross_spread}")
    int8 = load_reranker(f"cross:{tiny_cross_spread}", dtype="int8")
    assert (float32.info["runtime"], float32.info["dtype"]) == ("onnx", "float32")
    assert (int8.info["runtime"], int8.info["dtype"]) == ("onnx", "int8")
    folder = export_dir(model_key(RerankerSpec.parse(f"cross:{tiny_cross_spread}")), None)
    assert {f.name for f in folder.glob("*.onnx")} == set(MODEL_FILES.values())  # beside each other, once
    for query, docs in some_queries():
        a, b = float32.score(query, docs), int8.score(query, docs)
        assert np.ptp(a) > 0.1 and not np.array_equal(a, b)  # a real spread, and int8 is not float32 again
        assert kendalltau(a, b).statistic >= TAU, (query, a, b)
        assert len(set(np.argsort(-a)[:5]) & set(np.argsort(-b)[:5])) >= TOP
        assert np.abs(a - b).max() <= DRIFT * np.ptp(a)


def test_the_quantized_graph_is_written_once_and_reused(tiny_cross_spread, onnx_ready, monkeypatch):
    from engine.core.ranking.rerankers import cross
    from engine.core.ranking.rerankers.spec import load_reranker
    load_reranker(f"cross:{tiny_cross_spread}", dtype="int8")  # exported (or found) here
    cross.load_cross_encoder.cache_clear()
    monkeypatch.setattr(cross, "load_cross_encoder", lambda *a, **k: pytest.fail("torch loaded for an export"))
    reranker = load_reranker(f"cross:{tiny_cross_spread}", dtype="int8")
    assert reranker.info["dtype"] == "int8" and reranker.score("a boat", ["a river boat", "bread"]).shape == (2,)


def test_the_cache_key_names_the_dtype(tiny_cross, onnx_ready, tmp_path):
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.cache import StageCache
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.rerank import Rerank
    from engine.core.ranking.pipeline.run import run_pipeline
    from engine.core.ranking.rerankers.fingerprint import fingerprint
    from engine.core.ranking.rerankers.spec import RerankerSpec
    spec = f"cross:{tiny_cross}"
    prints = {d: fingerprint(RerankerSpec.parse(spec, dtype=d)) for d in ("float32", "int8")}
    assert prints["float32"] != prints["int8"]
    assert fingerprint(RerankerSpec.parse(spec)) == prints["float32"]  # the default is float32
    assert Rerank(spec, dtype="int8").fingerprint(Context()) == prints["int8"]
    assert str(Rerank(spec, dtype="int8")) == f'rerank("{spec}", dtype="int8")'
    # a run file reranked with a cache: float32's pair scores are not served to int8, nor int8's to float32
    docs = tmp_path / "docs.tsv"
    docs.write_text("id\ttext\n" + "".join(f"d{i}\t{d}\n" for i, d in enumerate(some_queries(1, 8)[0][1])))
    from engine.io.runs import write_run
    write_run(tmp_path / "a.run", {"q1": [(f"d{i}", 9.0 - i) for i in range(8)]}, "a")
    counts = []
    for dtype in ("float32", "int8", "float32", "int8"):
        ctx = Context(cache=StageCache(tmp_path / "cache"))
        stage = parse_pipeline(f'run("{tmp_path / "a.run"}", docs="{docs}") >> rerank("{spec}", depth=8, '
                               f'dtype="{dtype}")')
        run_pipeline(stage, [Query("q1", "a boat on the river")], ctx)
        counts.append(ctx.counts.get(id(stage.second), {}))
    assert counts[0]["pairs_scored"] == counts[1]["pairs_scored"] == 8  # each dtype scores its own
    assert all(c.get("pairs_scored", 0) == 0 for c in counts[2:])  # then both are read back


@pytest.mark.parametrize("options, message", [
    ({"dtype": "fp16"}, "dtype must be float32 or int8, not 'fp16'"),
    ({"dtype": 8}, "dtype must be float32 or int8, not 8"),
])
def test_a_dtype_out_of_range_is_one_line_before_a_model_loads(options, message, tiny_cross, monkeypatch):
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.rerankers import registry
    from engine.core.ranking.rerankers.spec import RerankerSpec
    from engine.errors import EngineError
    monkeypatch.setattr(registry, "build", lambda spec: pytest.fail("a model loaded"))
    with pytest.raises(EngineError, match=message):
        RerankerSpec.parse(f"cross:{tiny_cross}", **options)
    with pytest.raises(EngineError, match=f"rerank.*{message}"):
        parse_pipeline(f'rerank("cross:{tiny_cross}", dtype={options["dtype"]!r})')
    with pytest.raises(EngineError, match="dtype goes with a cross:"):
        RerankerSpec.parse("llm:x", dtype="int8")


@pytest.mark.parametrize("args, message", [
    (["--rerank", "cross:x", "--rerank-dtype", "fp16"], "--rerank-dtype must be float32 or int8, not 'fp16'"),
    (["--rerank", "llm:x", "--rerank-dtype", "int8"], "--rerank-dtype goes with a cross:"),
    (["--rerank-dtype", "int8"], "--rerank-dtype goes with --rerank"),
])
def test_a_bad_dtype_flag_is_one_line(run_cli, args, message, tmp_path):
    code, out, err = run_cli("search", "docs", "cats", *args, "--root", tmp_path / "idx")
    text = (out + err).strip()
    assert code == 2 and message in text and "Traceback" not in text and len(text.splitlines()) <= 2, text


@pytest.mark.parametrize("where", ["gpu", "no-onnx"])
def test_int8_on_a_torch_path_is_refused_before_a_model_loads(where, tiny_cross, monkeypatch):
    from engine.core.encoders import device
    from engine.core.ranking.rerankers import cross
    from engine.core.ranking.rerankers.fingerprint import fingerprint
    from engine.core.ranking.rerankers.spec import RerankerSpec, load_reranker
    from engine.errors import EngineError
    monkeypatch.setattr(cross, "load_cross_encoder", lambda *a, **k: pytest.fail("a model loaded"))
    if where == "gpu":
        monkeypatch.setattr(device, "_setting", "cuda")
    else:
        monkeypatch.setenv("ENGINE_ONNX", "0")
    spec = RerankerSpec.parse(f"cross:{tiny_cross}", dtype="int8")
    why = "on a GPU" if where == "gpu" else "ENGINE_ONNX is 0"
    for attempt in (lambda: fingerprint(spec), lambda: load_reranker(spec)):
        with pytest.raises(EngineError, match=f"int8 quantizes cross-encoder .* for onnxruntime on a CPU.*{why}"):
            attempt()


def test_both_commands_take_the_dtype(run_cli, tiny_cross_spread, onnx_ready, fake_encoder, tmp_path):
    from engine.core.collection import Collection
    from engine.io.runs import read_run, write_run
    query, texts = some_queries(1, 12)[0]
    src = tmp_path / "docs.tsv"
    src.write_text("id\ttext\n" + "".join(f"d{i}\t{d}\n" for i, d in enumerate(texts)))
    Collection.build("docs", texts=src, root=tmp_path / "idx")
    (tmp_path / "q.tsv").write_text(f"q1\t{query}\n")
    write_run(tmp_path / "a.run", {"q1": [(f"d{i}", 20.0 - i) for i in range(12)]}, "a")
    got = {}
    for dtype in ("float32", "int8"):
        out = tmp_path / f"search-{dtype}.run"
        code, _, err = run_cli("search", "docs", "--queries", tmp_path / "q.tsv", "--out", out, "-k", "12",
                               "--rerank", f"cross:{tiny_cross_spread}", "--rerank-depth", "12",
                               "--rerank-dtype", dtype, "--root", tmp_path / "idx", "-q")
        assert code == 0, err
        code, _, err = run_cli("rerank", tmp_path / "a.run", "--queries", tmp_path / "q.tsv", "--docs", src,
                               "--model", f"cross:{tiny_cross_spread}", "--depth", "12", "--rerank-dtype", dtype,
                               "--out", tmp_path / f"rerank-{dtype}.run", "-q")
        assert code == 0, err
        searched, reranked = read_run(out)["q1"], read_run(tmp_path / f"rerank-{dtype}.run")["q1"]
        assert sorted(searched, key=lambda d: -searched[d]) == sorted(reranked, key=lambda d: -reranked[d])
        got[dtype] = sorted(reranked, key=lambda d: -reranked[d])
    assert len(set(got["float32"][:5]) & set(got["int8"][:5])) >= TOP
