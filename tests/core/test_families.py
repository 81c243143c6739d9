"""The field's model families through sentence-transformers, each on the one ranking path: image–text models
(`sbert:` on --images), checked against sentence-transformers' own `encode` + `similarity` on tiny
random-weight models built here."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fixtures.tiny_families import build_tiny_clip, build_tiny_colbert, build_tiny_splade, random_photos

QUERIES = ["a red boat on the river", "two dogs in the snow", "a plate of bread and cheese"]


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory) -> Path:
    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip"), matryoshka=True)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """24 random RGB images of different sizes."""
    return random_photos(tmp_path_factory.mktemp("photos"), 24)


def reference_top10(model_dir: Path, photos: Path, queries, dim: int | None = None) -> list[list[str]]:
    """sentence-transformers' own embeddings and similarity, brute force over every photo."""
    from PIL import Image

    from engine.core.encoders import torchvision_patch  # noqa: F401
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(model_dir), truncate_dim=dim)
    files = sorted(photos.glob("*.png"))
    docs = model.encode([Image.open(f).convert("RGB") for f in files])
    q = np.concatenate([model.encode([Image.open(x).convert("RGB") if isinstance(x, Path) else x])
                        for x in queries])
    sims = np.asarray(model.similarity(q, docs))
    return [[files[i].stem for i in np.argsort(-row, kind="stable")[:10]] for row in sims]


def cli_top10(run_cli, root: Path, name: str, queries) -> list[list[str]]:
    out = []
    for q in queries:
        args = ["--image", q] if isinstance(q, Path) else [q]
        code, stdout, err = run_cli("search", name, *args, "-k", "10", "--json", "--root", root)
        assert code == 0, err
        out.append([h["id"] for h in json.loads(stdout)["hits"]])
    return out


def test_image_text_model_builds_and_ranks_as_sentence_transformers_does(run_cli, tiny_clip, photos, tmp_path):
    root = tmp_path / "idx"
    code, _, err = run_cli("build", "photos", "--images", photos, "--model", f"sbert:{tiny_clip}", "--root", root,
                           "-q")
    assert code == 0, err
    queries = [*QUERIES, photos / "p03.png", photos / "p17.png"]
    assert cli_top10(run_cli, root, "photos", queries) == reference_top10(tiny_clip, photos, queries)
    code, out, _ = run_cli("info", "photos", "--json", "--root", root)
    info = json.loads(out)
    assert info["family"] == "sentence-transformers, text ↔ image" and info["dim"] == 16


def test_matryoshka_dim_truncates_and_renormalizes(run_cli, tiny_clip, photos, tmp_path):
    root = tmp_path / "idx"
    code, _, err = run_cli("build", "small", "--images", photos, "--model", f"sbert:{tiny_clip}", "--dim", "8",
                           "--root", root, "-q")
    assert code == 0, err
    code, out, _ = run_cli("info", "small", "--json", "--root", root)
    assert json.loads(out)["dim"] == 8 and json.loads(out)["encoder"] == f"sbert:{tiny_clip}#dim=8"
    queries = [QUERIES[0], photos / "p05.png"]
    assert cli_top10(run_cli, root, "small", queries) == reference_top10(tiny_clip, photos, queries, dim=8)


def test_dim_refused_in_one_line_where_the_model_was_not_trained_for_it(run_cli, tmp_path, photos):
    plain = build_tiny_clip(tmp_path / "plain")
    for model, dim, said in ((f"sbert:{plain}", "8", "does not say it was trained for truncated"),
                             ("conse", "8", "--dim truncates the embeddings of a Matryoshka model"),
                             (f"sbert:{plain}", "0", "--dim")):
        code, _, err = run_cli("build", "x", "--images", photos, "--model", model, "--dim", dim,
                               "--root", tmp_path / "idx")
        assert code != 0 and said in err and len(err.strip().splitlines()) == 1, err


def test_modalities_read_from_the_model_files(tiny_clip):
    from engine.core.encoders.registry import light_encoder, modalities_of
    assert modalities_of(f"sbert:{tiny_clip}") == {"text", "image"}
    assert light_encoder(f"sbert:{tiny_clip}") is None  # no light image side: the whole model encodes
    assert modalities_of("sbert:all-MiniLM-L6-v2") == {"text"}


def test_models_lists_the_family(run_cli):
    code, out, _ = run_cli("models")
    assert code == 0 and "image–text models" in out


# ---------------------------------------------------------------- learned sparse

DOCS = ["the red boat sails down the river", "two dogs play in deep snow", "fresh bread and old cheese",
        "a train crosses the old stone bridge", "rain falls on the quiet town", "cats sleep in the warm sun",
        "music from the street at night", "a map of the stars above the sea", "boats and trains by the water",
        "chess players in the park", "snow on the mountain road", "cheese shops of the old town",
        "the river floods the low fields", "dogs and cats in one house", "a red train in the snow"]


@pytest.fixture(scope="module")
def tiny_splade(tmp_path_factory) -> Path:
    return build_tiny_splade(tmp_path_factory.mktemp("tiny-splade"))


@pytest.fixture(scope="module")
def sparse_collection(tmp_path_factory, tiny_splade, tiny_colbert, install_fake):
    """A text collection (fake dense encoder) with a sparse index of the tiny SPLADE model and a multi-vector
    index of the tiny ColBERT."""
    import pytest as _pytest
    folder = tmp_path_factory.mktemp("sparse-col")
    (folder / "docs.csv").write_text("id,text\n" + "".join(f"d{i:02d},{t}\n" for i, t in enumerate(DOCS)))
    with _pytest.MonkeyPatch.context() as mp:
        install_fake(mp)
        from engine.core.collection import Collection
        Collection.build("docs", texts=folder / "docs.csv", root=folder / "idx", sparse=f"sparse:{tiny_splade}",
                         multivector=f"multivector:{tiny_colbert}")
    return folder


def test_sparse_stage_ranks_as_the_sparse_encoder_does(run_cli, sparse_collection, tiny_splade, fake_encoder):
    from engine.core.encoders import torchvision_patch  # noqa: F401
    from sentence_transformers import SparseEncoder
    folder = sparse_collection
    (folder / "q.tsv").write_text("".join(f"q{i}\t{q}\n" for i, q in enumerate(QUERIES)))
    (folder / "sparse.toml").write_text("pipeline = 'sparse(\"docs\", k=10)'\n")
    code, _, err = run_cli("pipeline", "run", folder / "sparse.toml", "--queries", folder / "q.tsv", "--out",
                           folder / "sparse.run", "--root", folder / "idx", "--no-cache", "-q")
    assert code == 0, err
    got: dict[str, list[str]] = {}
    for line in (folder / "sparse.run").read_text().splitlines():
        qid, _, doc, *_ = line.split()
        got.setdefault(qid, []).append(doc)
    model = SparseEncoder(str(tiny_splade))
    sims = np.asarray(model.similarity(model.encode_query(QUERIES), model.encode_document(DOCS)).to_dense())
    for i, row in enumerate(sims):
        want = [f"d{j:02d}" for j in np.argsort(-row, kind="stable")[:10] if row[j] > 0]
        assert got[f"q{i}"] == want
    from engine.core.storage.index.sparse import SparseIndex
    index = SparseIndex.load(next((folder / "idx" / "docs").glob("sparse*")))
    assert index.meta["count"] == len(DOCS) and 0 < index.meta["postings"] < len(DOCS) * 30522


def test_sparse_fuses_with_dense_and_refuses_what_it_cannot_do(run_cli, sparse_collection, fake_encoder, tmp_path):
    folder = sparse_collection
    (folder / "q1.tsv").write_text("q0\tred boats\n")
    (folder / "fused.toml").write_text("pipeline = '(sparse(\"docs\", k=5) | retrieve(\"docs\", mode=\"dense\", "
                                       "k=5)) % 5'\n")
    code, _, err = run_cli("pipeline", "run", folder / "fused.toml", "--queries", folder / "q1.tsv", "--out",
                           tmp_path / "fused.run", "--root", folder / "idx", "--no-cache", "-q")
    assert code == 0, err
    assert len((tmp_path / "fused.run").read_text().splitlines()) == 5
    (tmp_path / "docs.csv").write_text("id,text\nx,a text\n")
    from PIL import Image
    (tmp_path / "pics").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "pics" / "a.png")
    for args, said in ((["--sparse", "bm25:x"], "write sparse:NAME_OR_DIR"),
                       (["--sparse", "sparse:/no/such/model"], "no such folder"),
                       (["--sparse", f"sparse:{tmp_path / 'pics'}"], "holds no model"),
                       (["--multivector", f"multivector:{tmp_path / 'pics'}"], "holds no model"),
                       (["--model", f"sbert:{tmp_path / 'pics'}"], "holds no model"),
                       (["--sparse", "sparse:x", "--images", tmp_path / "pics"], "indexes texts")):
        source = [] if "--images" in args else ["--texts", tmp_path / "docs.csv"]
        code, _, err = run_cli("build", "y", *source, *args, "--root", tmp_path / "idx")
        assert code != 0 and said in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / "none.toml").write_text("pipeline = 'sparse(\"docs\")'\n")
    code, _, err = run_cli("build", "plain", "--texts", tmp_path / "docs.csv", "--root", tmp_path / "idx", "-q")
    assert code == 0, err
    (tmp_path / "none.toml").write_text("pipeline = 'sparse(\"plain\")'\n")
    code, _, err = run_cli("pipeline", "run", tmp_path / "none.toml", "--queries", folder / "q1.tsv", "--out",
                           tmp_path / "x.run", "--root", tmp_path / "idx", "--no-cache")
    assert code != 0 and "stores no sparse index" in err


# ---------------------------------------------------------------- late interaction


@pytest.fixture(scope="module")
def tiny_colbert(tmp_path_factory) -> Path:
    return build_tiny_colbert(tmp_path_factory.mktemp("tiny-colbert"))


def colbert_reference(model_dir: Path, queries, docs) -> np.ndarray:
    from engine.core.encoders import torchvision_patch  # noqa: F401
    from sentence_transformers import MultiVectorEncoder
    model = MultiVectorEncoder(str(model_dir))
    return np.asarray(model.similarity(model.encode_query(list(queries)), model.encode_document(list(docs))))


def test_maxsim_equals_sentence_transformers_similarity(tiny_colbert):
    from engine.core.encoders.multivector import encode_tokens, maxsim
    ref = colbert_reference(tiny_colbert, QUERIES, DOCS)
    docs = encode_tokens(str(tiny_colbert), DOCS, query=False)
    for i, q in enumerate(encode_tokens(str(tiny_colbert), QUERIES, query=True)):
        np.testing.assert_allclose(maxsim(q, docs), ref[i], rtol=1e-5, atol=1e-5)


def test_maxsim_reranker_orders_candidates_as_the_model_does(run_cli, sparse_collection, tiny_colbert, fake_encoder):
    root = sparse_collection / "idx"
    ref = colbert_reference(tiny_colbert, QUERIES, DOCS)
    for i, q in enumerate(QUERIES):
        code, out, err = run_cli("search", "docs", q, "-k", "10", "--rerank", f"maxsim:{tiny_colbert}",
                                 "--rerank-depth", str(len(DOCS)), "--json", "--root", root)
        assert code == 0, err
        assert [h["id"] for h in json.loads(out)["hits"]] == [f"d{j:02d}" for j in
                                                            np.argsort(-ref[i], kind="stable")[:10]]


def run_pipeline_file(run_cli, folder: Path, expression: str, queries) -> dict[str, list[str]]:
    (folder / "q.tsv").write_text("".join(f"q{i}\t{q}\n" for i, q in enumerate(queries)))
    (folder / "p.toml").write_text(f"pipeline = '{expression}'\n")
    code, _, err = run_cli("pipeline", "run", folder / "p.toml", "--queries", folder / "q.tsv", "--out",
                           folder / "p.run", "--root", folder / "idx", "--no-cache", "-q")
    assert code == 0, err
    got: dict[str, list[str]] = {}
    for line in (folder / "p.run").read_text().splitlines():
        qid, _, doc, *_ = line.split()
        got.setdefault(qid, []).append(doc)
    return got


def test_multivector_stage_ranks_by_exact_maxsim(run_cli, sparse_collection, tiny_colbert, fake_encoder):
    ref = colbert_reference(tiny_colbert, QUERIES, DOCS)
    want = {f"q{i}": [f"d{j:02d}" for j in np.argsort(-row, kind="stable")[:10]] for i, row in enumerate(ref)}
    for expression in ('multivector("docs", k=10, via="fde", candidates=15)', 'multivector("docs", k=10)'):
        assert run_pipeline_file(run_cli, sparse_collection, expression, QUERIES) == want  # every row a candidate
    few = run_pipeline_file(run_cli, sparse_collection, 'multivector("docs", k=3, via="fde", candidates=5)', QUERIES)
    for qid, ranked in few.items():  # the candidates' exact MaxSim order, whichever 5 the encodings proposed
        exact = [ref[int(qid[1:])][int(d[1:])] for d in ranked]
        assert len(ranked) == 3 and exact == sorted(exact, reverse=True)
    from engine.core.storage.index.multivector import MultiVectorIndex
    index = MultiVectorIndex.load(next((sparse_collection / "idx" / "docs").glob("multivector*")))
    assert index.tokens.dtype == np.float16 and index.meta["count"] == len(DOCS)


def test_multivector_centroids_rank_as_sentence_transformers_and_ranges_are_refused(run_cli, sparse_collection,
                                                                                     tiny_colbert, fake_encoder,
                                                                                     tmp_path):
    """via="centroids" with every row a candidate is sentence-transformers' MaxSim top 10; nprobe and
    --multivector-centroids out of their ranges, or nprobe beside another via, are one line each."""
    ref = colbert_reference(tiny_colbert, QUERIES, DOCS)
    want = {f"q{i}": [f"d{j:02d}" for j in np.argsort(-row, kind="stable")[:10]] for i, row in enumerate(ref)}
    got = run_pipeline_file(run_cli, sparse_collection, 'multivector("docs", k=10, via="centroids", nprobe=4096, '
                            'candidates=15)', QUERIES)
    assert got == want
    folder = sparse_collection
    (folder / "q.tsv").write_text("q0\tboats\n")
    for expression, message in (('multivector("docs", nprobe=0)', "multivector(…): nprobe must be"),
                                ('multivector("docs", nprobe=4097)', "multivector(…): nprobe must be at most 4096"),
                                ('multivector("docs", via="fde", nprobe=4)', "nprobe is for via=\"centroids\"")):
        (folder / "bad.toml").write_text(f"pipeline = '{expression}'\n")
        code, _, err = run_cli("pipeline", "run", folder / "bad.toml", "--queries", folder / "q.tsv", "--out",
                               tmp_path / "x.run", "--root", folder / "idx", "--no-cache", "-q")
        assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / "d.csv").write_text("id,text\na,one two\n")
    for value in ("-1", "2000000"):
        code, _, err = run_cli("build", "x", "--texts", tmp_path / "d.csv", "--multivector",
                               f"multivector:{tiny_colbert}", "--multivector-centroids", value, "--root", tmp_path)
        assert code != 0 and "--multivector-centroids" in err and len(err.strip().splitlines()) == 1, err


def test_token_candidates_are_the_rows_of_each_query_tokens_nearest_tokens(tiny_colbert):
    from engine.core.encoders.multivector import encode_tokens
    from engine.core.storage.index.multivector import MultiVectorIndex
    docs = encode_tokens(str(tiny_colbert), DOCS, query=False)
    index = MultiVectorIndex.build(docs, [f"d{i}" for i in range(len(DOCS))], "multivector:x")
    flat = np.concatenate(docs).astype(np.float16).astype(np.float32)
    owner = np.repeat(np.arange(len(docs)), [len(d) for d in docs])
    for q in encode_tokens(str(tiny_colbert), QUERIES, query=True):
        sims = q @ flat.T
        want = {int(owner[t]) for row in sims for t in np.argsort(-row, kind="stable")[:4]}
        assert set(index.token_candidates(q, 4, block=7).tolist()) == want  # blocks smaller than the probe too


def test_multivector_int8_store_and_fde_recall(tiny_colbert):
    """int8 token vectors (one scale each) keep MaxSim within 1% of float; the encodings' candidates hold the
    exact top 3 of every query among the first half of a small corpus."""
    from engine.core.encoders.multivector import encode_tokens, maxsim
    from engine.core.storage.index.multivector import FdeSettings, MultiVectorIndex
    docs = encode_tokens(str(tiny_colbert), DOCS, query=False)
    ids = [f"d{i:02d}" for i in range(len(DOCS))]
    index = MultiVectorIndex.build(docs, ids, f"multivector:{tiny_colbert}", store="int8",
                                   settings=FdeSettings(reps=20, bits=4, proj=16))
    assert index.tokens.dtype == np.int8
    for q in encode_tokens(str(tiny_colbert), QUERIES, query=True):
        exact = maxsim(q, docs)
        np.testing.assert_allclose(index.maxsim(q, range(len(DOCS))), exact, rtol=1e-2)
        rows, _ = index.search(q, 3, len(DOCS) // 2)
        assert set(rows.tolist()) == set(np.argsort(-exact, kind="stable")[:3].tolist())


def naive_fde(tokens: np.ndarray, settings, query: bool) -> np.ndarray:
    """MUVERA's encoding of one token set written out cell by cell (the paper's definition)."""
    planes, projections = settings.matrices(tokens.shape[1])
    buckets, parts = 1 << settings.bits, []
    for r in range(settings.reps):
        codes = [int(sum(1 << b for b in range(settings.bits) if (t @ planes[r])[b] > 0)) for t in tokens]
        cells = np.zeros((buckets, settings.proj), dtype=np.float64)
        for b in range(buckets):
            members = [n for n, c in enumerate(codes) if c == b]
            if members:
                total = sum(tokens[n] @ projections[r] for n in members)
                cells[b] = total if query else total / len(members)
            elif not query:
                nearest = min(range(len(codes)), key=lambda n: (bin(codes[n] ^ b).count("1"), n))
                cells[b] = tokens[nearest] @ projections[r]
        parts.append(cells.ravel())
    return np.concatenate(parts)


def test_fde_equals_the_papers_definition():
    from engine.core.storage.index.multivector import FdeSettings, encode_fde
    rng = np.random.default_rng(1)
    sets = [rng.normal(size=(n, 12)).astype(np.float32) for n in (1, 3, 7, 2)]
    settings = FdeSettings(reps=3, bits=3, proj=4, seed=5)
    for query in (False, True):
        got = encode_fde(sets, settings, query)
        for n, tokens in enumerate(sets):
            np.testing.assert_allclose(got[n], naive_fde(tokens, settings, query), rtol=1e-5, atol=1e-5)


def test_add_and_update_rebuild_the_learned_indexes_over_every_row(run_cli, tiny_splade, tiny_colbert, fake_encoder, tmp_path):
    from engine.core.storage.index.multivector import MultiVectorIndex
    from engine.core.storage.index.sparse import SparseIndex
    (tmp_path / "a.csv").write_text("id,text\n" + "".join(f"d{i:02d},{t}\n" for i, t in enumerate(DOCS[:3])))
    (tmp_path / "b.csv").write_text(f"id,text\nd99,{DOCS[5]}\n")
    root = tmp_path / "idx"
    code, _, err = run_cli("build", "docs", "--texts", tmp_path / "a.csv", "--sparse", f"sparse:{tiny_splade}",
                           "--multivector", f"multivector:{tiny_colbert}", "--multivector-store", "int8",
                           "--root", root, "-q")
    assert code == 0, err
    code, _, err = run_cli("build", "docs", "--texts", tmp_path / "b.csv", "--add", "--root", root, "-q")
    assert code == 0, err
    folder = root / "docs"
    sparse = SparseIndex.load(next(folder.glob("sparse*")))
    late = MultiVectorIndex.load(next(folder.glob("multivector*")))
    assert sparse.meta["count"] == late.meta["count"] == 4 and late.meta["store"] == "int8"
    for stage in ('sparse("docs", k=1)', 'multivector("docs", k=1)'):
        (tmp_path / "p.toml").write_text(f"pipeline = '{stage}'\n")
        (tmp_path / "q.tsv").write_text(f"q\t{DOCS[5]}\n")
        code, _, err = run_cli("pipeline", "run", tmp_path / "p.toml", "--queries", tmp_path / "q.tsv", "--out",
                               tmp_path / "p.run", "--root", root, "--no-cache", "-q")
        assert code == 0, err
    code, _, err = run_cli("build", "docs", "--texts", tmp_path / "b.csv", "--add", "--sparse", "sparse:other",
                           "--root", root)
    assert code != 0 and "keeps a sparse index of" in err
    (tmp_path / "c.csv").write_text(f"id,text\nd01,{DOCS[7]}\n")  # --update re-encodes d01: both rebuilt
    code, _, err = run_cli("build", "docs", "--texts", tmp_path / "c.csv", "--add", "--update", "--root", root, "-q")
    assert code == 0, err
    (tmp_path / "q.tsv").write_text(f"q\t{DOCS[7]}\n")
    for stage in ('sparse("docs", k=1)', 'multivector("docs", k=1)'):
        (tmp_path / "p.toml").write_text(f"pipeline = '{stage}'\n")
        code, _, err = run_cli("pipeline", "run", tmp_path / "p.toml", "--queries", tmp_path / "q.tsv", "--out",
                               tmp_path / "p.run", "--root", root, "--no-cache", "-q")
        assert code == 0 and (tmp_path / "p.run").read_text().split()[2] == "d01", (stage, err)


def test_bench_times_every_family_a_collection_carries(run_cli, sparse_collection, tiny_colbert, fake_encoder,
                                                       tmp_path):
    out = tmp_path / "bench.json"
    code, stdout, err = run_cli("bench", "docs", "--root", sparse_collection / "idx", "--n", "6", "--seconds", "0.2",
                                "--batch", "4", "--rerank", f"maxsim:{tiny_colbert}", "--rerank-depth", "5",
                                "--out", out)
    assert code == 0, err
    families = json.loads(out.read_text())["families"]
    assert set(families) == {"sparse", "multivector", "rerank"}
    for name, key in (("sparse", "search_single"), ("sparse", "encode_documents_batch"),
                      ("multivector", "search_single"), ("multivector", "encode_documents_batch"),
                      ("rerank", "rerank_single")):
        assert families[name][key]["calls"] >= 1 and families[name][key]["p50_ms"] > 0, (name, key)
    assert families["rerank"]["spec"] == f"maxsim:{tiny_colbert}" and families["sparse"]["index_bytes"] > 0
    assert "sparse" in stdout and "multivector" in stdout and "rerank" in stdout


def test_bench_times_an_image_text_models_images(run_cli, tiny_clip, photos, tmp_path):
    root = tmp_path / "idx"
    code, _, err = run_cli("build", "photos", "--images", photos, "--model", f"sbert:{tiny_clip}", "--root", root,
                           "-q")
    assert code == 0, err
    out = tmp_path / "bench.json"
    code, _, err = run_cli("bench", "photos", "--root", root, "--n", "4", "--seconds", "0.2", "--batch", "4",
                           "--out", out)
    assert code == 0, err
    result = json.loads(out.read_text())
    assert result["query_modality"] == "text" and set(result["families"]) == {"image_text"}
    image = result["families"]["image_text"]
    assert image["encode_image_single"]["calls"] >= 1 and image["encode_images_batch"]["calls"] >= 1
    code, _, err = run_cli("bench", "photos", "--root", root, "--rerank", "maxsim:/no/such/model")
    assert code != 0 and "no such" in err.lower() and "Traceback" not in err


def test_image_batches_cut_by_a_pixel_budget(photos):
    """Each forward pass holds images until the next would take its pixels above the budget (an image above
    it alone); the embeddings are the count-batched ones, row for row."""
    from engine.core.encoders.base import Encoder
    from engine.core.images import encode_image_files
    from engine.core.encoders.sbert import keep_image
    batches: list[list[int]] = []

    def embed(batch) -> np.ndarray:
        batches.append([im.width * im.height for im in batch])
        return np.stack([np.asarray(im, dtype=np.float32).mean(axis=(0, 1)) for im in batch])

    enc = Encoder(spec="recording", dim=3, modalities=frozenset({"image"}), preprocess=keep_image,
                  image_batch_fn=embed)
    paths = [str(p) for p in sorted(photos.glob("*.png"))]
    by_count = encode_image_files(enc, paths, batch_size=32).embeddings
    assert [len(b) for b in batches] == [24]
    batches.clear()
    budget = 9000
    by_pixels = encode_image_files(enc, paths, batch_size=32, max_pixels=budget)
    assert np.array_equal(by_pixels.embeddings, by_count) and by_pixels.ok == list(range(24))
    assert len(batches) > 2 and sum(map(len, batches)) == 24
    for b, after in zip(batches, batches[1:]):
        assert sum(b) <= budget or len(b) == 1
        assert sum(b) + after[0] > budget  # cut only where the next image would not fit


def test_build_batch_pixels_gives_the_same_collection(run_cli, tiny_clip, photos, tmp_path):
    from engine.core.collection import Collection
    root = tmp_path / "idx"
    for name, extra in (("count", []), ("pixels", ["--batch-pixels", "5000"])):
        code, _, err = run_cli("build", name, "--images", photos, "--model", f"sbert:{tiny_clip}", "--root", root,
                               "-q", *extra)
        assert code == 0, err
    count, pixels = (Collection.open(n, root) for n in ("count", "pixels"))
    assert count.ids == pixels.ids
    assert np.allclose(np.asarray(count.embeddings), np.asarray(pixels.embeddings), atol=1e-5)
    code, _, err = run_cli("build", "bad", "--images", photos, "--batch-pixels", "0", "--root", root)
    assert code != 0 and "--batch-pixels" in err and "Traceback" not in err


def test_a_text_longer_than_a_two_tower_models_window_is_cut_there(tmp_path):
    """A CLIP-layout model reads texts through its processor, which does not cut them at the window: the encoder
    cuts them at the model's max_seq_length, so a long caption encodes as its first 62 words (64 positions less
    [CLS] and [SEP]) do, where sentence-transformers alone would fail past the text tower's positions."""
    from engine.core.encoders import torchvision_patch  # noqa: F401
    from engine.core.encoders.registry import load_encoder
    from sentence_transformers import SentenceTransformer
    model_dir = build_tiny_clip(tmp_path / "clip", text_window=64)
    words = ("dog cat boat river snow bread cheese red two plate " * 15).split()
    long_text, head = " ".join(words), " ".join(words[:62])
    with pytest.raises(Exception):
        SentenceTransformer(str(model_dir)).encode([long_text])
    enc = load_encoder(f"sbert:{model_dir}")
    want = SentenceTransformer(str(model_dir)).encode([head], normalize_embeddings=True)
    assert np.allclose(enc.encode_texts([long_text]), want, atol=1e-5)
