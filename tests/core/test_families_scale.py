"""The model families where the other encoders go: image–text models with their own processor and the learned
roles (sparse, multi-vector) built on Ray equal their local builds; `--device` reaches their models and
`--dtype bfloat16` runs them in bf16 (on the CPU here; fp16 needs a CUDA GPU and is refused elsewhere)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures.tiny_families import build_tiny_clip, build_tiny_colbert, build_tiny_splade, random_photos

DOCS = ["the river floods the low fields", "dogs and cats in one house", "a red train in the snow",
        "bread and cheese on a plate", "a storm at sea sinks a boat", "children play in the park",
        "the mountain road is closed by snow", "a violin concert in the old hall", "markets open early on sunday",
        "a glacier melts in the summer heat", "the harbor is full of fishing boats", "a poem about the winter forest"]
QUERIES = ["a boat in a storm", "snow on the mountain", "music in a hall"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {"clip": build_tiny_clip(root / "clip"), "splade": build_tiny_splade(root / "splade"),
            "colbert": build_tiny_colbert(root / "colbert")}


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """20 random RGB images of different sizes, and two files that are no image."""
    folder = random_photos(tmp_path_factory.mktemp("photos"), 20)
    (folder / "broken.jpg").write_bytes(b"not a jpeg")
    (folder / "p05.png").write_bytes((folder / "p05.png").read_bytes()[:100])  # truncated
    return folder


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("docs") / "docs.csv"
    path.write_text("id,text\n" + "".join(f"d{i:02d},{t}\n" for i, t in enumerate(DOCS)))
    return path


def same_collection(a, b) -> None:
    assert a.ids == b.ids and a.items == b.items
    np.testing.assert_allclose(np.asarray(a.embeddings), np.asarray(b.embeddings), atol=1e-5)
    assert a.manifest["skipped"] == b.manifest["skipped"] and a.manifest["encoder"] == b.manifest["encoder"]


def sparse_matrix(folder: Path) -> np.ndarray:
    """A sparse role's postings as a dense documents × vocabulary matrix."""
    from engine.core.storage.index.sparse import SparseIndex
    index = SparseIndex.load(next(folder.glob("sparse*")))
    out = np.zeros((int(index.meta["count"]), 30522), np.float32)
    for n, term in enumerate(index.terms):
        lo, hi = int(index.offsets[n]), int(index.offsets[n + 1])
        out[np.asarray(index.rows[lo:hi]), int(term)] = index.weights[lo:hi]
    return out


def token_sets(folder: Path) -> list[np.ndarray]:
    from engine.core.storage.index.multivector import MultiVectorIndex
    index = MultiVectorIndex.load(next(folder.glob("multivector*")))
    return [index.row_tokens(r) for r in range(int(index.meta["count"]))]


def build(name: str, root: Path, **settings):
    from engine.core.collection import Collection
    return Collection.build(name, root=root, **settings)


@pytest.mark.slow
def test_image_text_model_builds_on_ray_as_locally(ray_local, models, photos, tmp_path):
    """An sbert image–text model (its processor sizes the images) builds on Ray: the actors read the paths as
    a local build does, so ids, embeddings and the skipped files equal the local build's, pixel budget too."""
    spec = f"sbert:{models['clip']}"
    local = build("local", tmp_path, images=photos, model=spec, chunk_size=8, batch_size=4)
    dist = build("dist", tmp_path, images=photos, model=spec, chunk_size=8, batch_size=4, ray="local")
    same_collection(dist, local)
    assert sorted(f["id"] for f in dist.manifest["skipped"]) == ["broken", "p05"]
    pixels = build("pixels", tmp_path, images=photos, model=spec, chunk_size=8, batch_size=4, batch_pixels=4000,
                   ray="local")
    same_collection(pixels, local)


@pytest.mark.slow
def test_learned_roles_encode_on_ray_as_locally(ray_local, models, docs, tmp_path, monkeypatch):
    """`--sparse` and `--multivector` with `--ray` encode on Ray's actors (the local encoders are never called
    in this process) and store the postings and token vectors a local build stores."""
    import engine.core.storage.builder.ray_encode as ray_encode
    settings = dict(texts=docs, model=f"sbert:{models['clip']}", sparse=f"sparse:{models['splade']}",
                    multivector=f"multivector:{models['colbert']}", chunk_size=5, batch_size=4)
    local = build("local", tmp_path, **settings)
    calls = []
    real = ray_encode.encode_learned_on_ray
    monkeypatch.setattr(ray_encode, "encode_learned_on_ray", lambda *a: calls.append(a[0].__name__) or real(*a))
    dist = build("dist", tmp_path, ray="local", **settings)
    assert calls == ["encode_sparse", "encode_tokens"]
    same_collection(dist, local)
    np.testing.assert_allclose(sparse_matrix(dist.path), sparse_matrix(local.path), atol=1e-4)
    for a, b in zip(token_sets(dist.path), token_sets(local.path), strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=2e-3)  # float16 storage


def test_dtype_float16_off_cuda_is_refused_before_a_model_loads(run_cli, docs, tmp_path):
    for args, said in ((["--dtype", "float16", "--device", "cpu"], "float16 runs on a CUDA GPU"),
                       (["--dtype", "half"], "--dtype must be one of auto|float32|float16|bfloat16"),
                       (["--dtype", "bfloat16", "--device", "mps"], "bfloat16 runs on a CUDA GPU or the CPU")):
        code, _, err = run_cli("build", "d", "--texts", docs, "--sparse", "sparse:/no/such/model", *args,
                               "--root", tmp_path)
        assert code != 0 and said in err and len(err.strip().splitlines()) == 1, err


def test_device_reaches_the_learned_models(models):
    """The loaders read `--device` (a CUDA GPU this machine lacks is refused by them), and load per device."""
    from engine.core.encoders import multivector, sparse
    from engine.core.encoders.device import set_device
    from engine.errors import EngineError
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        set_device("cuda:0")
        for load, model in ((sparse.load_sparse_model, models["splade"]),
                            (multivector.load_multivector_model, models["colbert"])):
            with pytest.raises(EngineError, match="cuda:0: this machine has 0 CUDA GPU"):
                load(str(model))
    set_device("cpu")
    assert str(sparse.load_sparse_model(str(models["splade"])).device) == "cpu"
    assert str(multivector.load_multivector_model(str(models["colbert"])).device) == "cpu"


def overlap_at(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Mean share of each row's top k (by score) the two score matrices agree on."""
    return float(np.mean([len(set(np.argsort(-x)[:k]) & set(np.argsort(-y)[:k])) / k for x, y in zip(a, b)]))


def test_bfloat16_builds_rank_close_to_float32(run_cli, models, docs, photos, tmp_path):
    """`engine build --dtype bfloat16` runs the image–text, sparse and multi-vector models in bf16 (their
    outputs differ from float32's, so the precision reached them) and ranks within a tolerance of float32."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "bfloat16"):
        pytest.skip("torch without bfloat16")
    roots = {}
    for dtype in ("float32", "bfloat16"):
        roots[dtype] = root = tmp_path / dtype
        for args in (["d", "--texts", docs, "--model", f"sbert:{models['clip']}", "--sparse",
                      f"sparse:{models['splade']}", "--multivector", f"multivector:{models['colbert']}"],
                     ["p", "--images", photos, "--model", f"sbert:{models['clip']}"]):
            code, _, err = run_cli("build", *args, "--dtype", dtype, "--device", "cpu", "--root", root, "-q")
            assert code == 0, err
    from engine.core.collection import Collection
    from engine.core.encoders.device import set_dtype
    from engine.core.encoders.multivector import encode_tokens, maxsim
    from engine.core.encoders.sparse import encode_sparse
    set_dtype("float32")
    full, half = (Collection.open("p", roots[d]) for d in ("float32", "bfloat16"))
    a, b = np.asarray(full.embeddings), np.asarray(half.embeddings)
    assert 0 < np.abs(a - b).max() < 0.05
    q = full.encoder.encode_texts(QUERIES)
    assert overlap_at(q @ a.T, q @ b.T, 5) >= 0.8
    sparse32, sparse16 = sparse_matrix(roots["float32"] / "d"), sparse_matrix(roots["bfloat16"] / "d")
    assert 0 < np.abs(sparse32 - sparse16).max() < 0.05 * np.abs(sparse32).max()
    qs = np.zeros((len(QUERIES), 30522), np.float32)
    for n, (terms, weights) in enumerate(encode_sparse(str(models["splade"]), QUERIES, query=True)):
        qs[n, terms] = weights
    assert overlap_at(qs @ sparse32.T, qs @ sparse16.T, 5) >= 0.8
    t32, t16 = token_sets(roots["float32"] / "d"), token_sets(roots["bfloat16"] / "d")
    assert 0 < max(np.abs(x - y).max() for x, y in zip(t32, t16)) < 0.05
    qt = encode_tokens(str(models["colbert"]), QUERIES, query=True)
    assert overlap_at(np.stack([maxsim(x, t32) for x in qt]), np.stack([maxsim(x, t16) for x in qt]), 5) >= 0.8


def test_pipeline_run_takes_device_for_the_learned_stages(run_cli, models, docs, fake_encoder, tmp_path):
    """`engine pipeline run --device` reaches a sparse or multi-vector stage's query model (a CUDA GPU this
    machine lacks is refused in one line by it; the CPU ranks)."""
    torch = pytest.importorskip("torch")
    root = tmp_path / "idx"
    code, _, err = run_cli("build", "d", "--texts", docs, "--sparse", f"sparse:{models['splade']}",
                           "--multivector", f"multivector:{models['colbert']}", "--root", root, "-q")
    assert code == 0, err
    (tmp_path / "q.tsv").write_text("".join(f"q{n}\t{q}\n" for n, q in enumerate(QUERIES)))
    for stage in ('sparse("d", k=3)', 'multivector("d", k=3)'):
        (tmp_path / "p.toml").write_text(f"pipeline = '{stage}'\n")
        run = ["pipeline", "run", tmp_path / "p.toml", "--queries", tmp_path / "q.tsv", "--out", tmp_path / "p.run",
               "--root", root, "--no-cache", "-q"]
        code, _, err = run_cli(*run, "--device", "cpu")
        assert code == 0 and len((tmp_path / "p.run").read_text().splitlines()) == 3 * len(QUERIES), err
        if not torch.cuda.is_available():
            code, _, err = run_cli(*run, "--device", "cuda:0")
            assert code != 0 and "cuda:0: this machine has 0 CUDA GPU" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run_cli(*run, "--device", "tpu")
    assert code != 0 and "--device must be one of" in err, err
