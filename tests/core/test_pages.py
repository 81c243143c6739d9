"""Page images with late-interaction page retrievers (ColPali, ColQwen2): an image collection's multi-vector
index holds each image's token vectors, and the `multivector(…)` stage and the `maxsim:` reranker rank pages
for text queries as sentence-transformers' own `encode_query` / `encode_document` + `similarity` (MaxSim) do,
on a tiny random-weight ColQwen2 built here."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from fixtures.tiny_families import build_tiny_colbert, build_tiny_colqwen2, page_images

QUERIES = ["the annual report of the river company", "a map of the old town", "tables of music and chess"]
WORDS = " ".join(QUERIES)


@pytest.fixture(scope="module")
def tiny_colqwen2(tmp_path_factory) -> Path:
    return build_tiny_colqwen2(tmp_path_factory.mktemp("tiny-colqwen2"), words=WORDS)


@pytest.fixture(scope="module")
def pages(tmp_path_factory, tiny_colqwen2, install_fake, joint_load) -> Path:
    """A folder of 24 generated page images and the collection `pages` of them under `idx/` (the fake joint
    dense encoder; the multi-vector index of the tiny ColQwen2): 18 built, then 6 added with `--add`, so the
    index was rebuilt over old and new rows."""
    folder = tmp_path_factory.mktemp("pages")
    every = page_images(folder / "all", n=24)
    (folder / "pages").mkdir()
    for f in every[:18]:
        shutil.copy(f, folder / "pages" / f.name)
    with pytest.MonkeyPatch.context() as mp:
        install_fake(mp, joint_load)
        from engine.core.collection import Collection
        Collection.build("pages", images=folder / "pages", root=folder / "idx",
                         multivector=f"multivector:{tiny_colqwen2}")
        for f in every[18:]:
            shutil.copy(f, folder / "pages" / f.name)
        Collection.build("pages", images=folder / "pages", root=folder / "idx", add=True)
    return folder


def reference(model_dir: Path, pages_dir: Path, queries, stored: bool = False) -> tuple[list[str], np.ndarray]:
    """sentence-transformers' own MaxSim of each query against every page, brute force: (page ids, scores);
    with `stored`, of the pages' token vectors at the precision the index keeps them (float16)."""
    from PIL import Image

    from engine.core.encoders import torchvision_patch  # noqa: F401
    from sentence_transformers import MultiVectorEncoder
    model = MultiVectorEncoder(str(model_dir))
    files = sorted(pages_dir.glob("*.png"))
    docs = model.encode_document([Image.open(f).convert("RGB") for f in files])
    if stored:
        docs = [d.half().float() for d in docs]
    return [f.stem for f in files], np.asarray(model.similarity(model.encode_query(list(queries)), docs))


def top10(ids: list[str], scores: np.ndarray) -> list[list[str]]:
    return [[ids[j] for j in np.argsort(-row, kind="stable")[:10]] for row in scores]


def run_pipeline(run_cli, folder: Path, expression: str, queries) -> tuple[list[list[str]], list[list[float]]]:
    (folder / "q.tsv").write_text("".join(f"q{i}\t{q}\n" for i, q in enumerate(queries)))
    (folder / "p.toml").write_text(f"pipeline = '{expression}'\n")
    code, _, err = run_cli("pipeline", "run", folder / "p.toml", "--queries", folder / "q.tsv", "--out",
                           folder / "p.run", "--root", folder / "idx", "--no-cache", "-q")
    assert code == 0, err
    got: dict[str, list[tuple[str, float]]] = {}
    for line in (folder / "p.run").read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        got.setdefault(qid, []).append((doc, float(score)))
    return ([[d for d, _ in got[f"q{i}"]] for i in range(len(queries))],
            [[s for _, s in got[f"q{i}"]] for i in range(len(queries))])


def test_multivector_stage_ranks_pages_as_sentence_transformers_does(run_cli, pages, tiny_colqwen2, joint_encoder):
    """Every candidate source with every page a candidate gives sentence-transformers' MaxSim top 10 over the
    token vectors as stored (float16: the tiny model's flat scores put pages 0.001 apart, which float16's
    rounding can swap), with the scores of its float32 vectors within that rounding."""
    ids, exact = reference(tiny_colqwen2, pages / "pages", QUERIES)
    want = top10(ids, reference(tiny_colqwen2, pages / "pages", QUERIES, stored=True)[1])
    for expression in ('multivector("pages", k=10)', 'multivector("pages", k=10, via="fde", candidates=24)',
                       'multivector("pages", k=10, via="tokens", candidates=1000)',
                       'multivector("pages", k=10, via="centroids", nprobe=4096, candidates=24)'):
        ranked, scores = run_pipeline(run_cli, pages, expression, QUERIES)
        assert ranked == want, expression
        for i, (row, got) in enumerate(zip(ranked, scores)):
            np.testing.assert_allclose(got, [exact[i][ids.index(d)] for d in row], rtol=1e-3)
    from engine.core.storage.index.multivector import MultiVectorIndex
    index = MultiVectorIndex.load(next((pages / "idx" / "pages").glob("multivector*")))
    assert index.meta["count"] == 24 and index.meta["dim"] == 16 and index.ivf is not None


def test_maxsim_reranks_page_candidates_read_from_their_files(run_cli, pages, tiny_colqwen2, joint_encoder):
    ids, scores = reference(tiny_colqwen2, pages / "pages", QUERIES)
    for q, want in zip(QUERIES, top10(ids, scores)):
        code, out, err = run_cli("search", "pages", q, "-k", "10", "--rerank", f"maxsim:{tiny_colqwen2}",
                                 "--rerank-depth", "24", "--json", "--root", pages / "idx")
        assert code == 0, err
        hits = json.loads(out)["hits"]
        assert [h["id"] for h in hits] == want
        np.testing.assert_allclose([h["score"] for h in hits], np.sort(scores[QUERIES.index(q)])[::-1][:10],
                                   rtol=1e-4)


def test_info_and_bench_name_the_page_retriever(run_cli, pages, tiny_colqwen2, joint_encoder, tmp_path):
    code, out, err = run_cli("info", "pages", "--json", "--root", pages / "idx")
    assert code == 0, err
    assert json.loads(out)["multivector"] == (f"multivector:{tiny_colqwen2} "
                                              "(late interaction (MultiVectorEncoder), text → page images)")
    result = tmp_path / "bench.json"
    code, stdout, err = run_cli("bench", "pages", "--root", pages / "idx", "--n", "4", "--seconds", "0.2",
                                "--batch", "4", "--out", result)
    assert code == 0, err
    late = json.loads(result.read_text())["families"]["multivector"]
    assert late["documents"] == "pages" and late["encode_documents_batch"]["calls"] >= 1
    assert late["search_single"]["calls"] >= 1 and "multivector: encode pages (batch)" in stdout


def test_modalities_read_from_the_model_files(tiny_colqwen2, tmp_path):
    from engine.core.encoders.multivector import model_modalities
    saved = build_tiny_colqwen2(tmp_path / "saved", saved=True)  # sentence-transformers' own layout
    colbert = build_tiny_colbert(tmp_path / "colbert")
    assert model_modalities(str(tiny_colqwen2)) == model_modalities(str(saved)) == {"text", "image"}
    assert model_modalities(str(colbert)) == {"text"} and model_modalities("no-such/model-here") is None


def test_a_text_only_model_on_images_is_refused_before_anything_loads(run_cli, pages, tmp_path, fake_encoder,
                                                                     monkeypatch):
    from engine.core.encoders import multivector
    colbert = build_tiny_colbert(tmp_path / "colbert")
    monkeypatch.setattr(multivector, "load_multivector_model", lambda name: pytest.fail("a model loaded"))
    for flags, said in ((["--multivector", f"multivector:{colbert}"], "embeds texts only"),
                        (["--sparse", "sparse:x"], "--sparse indexes texts")):
        code, _, err = run_cli("build", "x", "--images", pages / "pages", *flags, "--root", tmp_path / "idx")
        assert code != 0 and said in err and len(err.strip().splitlines()) == 1, err
    assert fake_encoder["loads"] == 0


def test_maxsim_of_a_text_model_refused_on_page_candidates(run_cli, pages, tmp_path, joint_encoder, monkeypatch):
    from engine.core.encoders import multivector
    colbert = build_tiny_colbert(tmp_path / "colbert")
    monkeypatch.setattr(multivector, "load_multivector_model", lambda name: pytest.fail("a model loaded"))
    code, _, err = run_cli("search", "pages", "a map", "--rerank", f"maxsim:{colbert}", "--root", pages / "idx")
    assert code != 0 and "holds images" in err and len(err.strip().splitlines()) == 1, err


def test_maxsim_scores_an_unreadable_page_last(pages, tiny_colqwen2, tmp_path):
    from engine.core.ranking.rerankers.spec import RerankerSpec
    reranker = RerankerSpec.parse(f"maxsim:{tiny_colqwen2}").load()
    assert reranker.candidates == {"text", "image"}
    (tmp_path / "broken.png").write_bytes(b"not an image")
    files = [str(pages / "pages" / "p03.png"), str(tmp_path / "broken.png"), str(tmp_path / "gone.png"),
             str(pages / "pages" / "p07.png")]
    got = reranker.score(QUERIES[1], files, "image")
    ids, scores = reference(tiny_colqwen2, pages / "pages", QUERIES[1:2])
    assert np.isneginf(got[1:3]).all()
    np.testing.assert_allclose(got[[0, 3]], scores[0][[ids.index("p03"), ids.index("p07")]], rtol=1e-5)


def test_sync_delete_and_compact_keep_the_page_index_aligned(run_cli, pages, tiny_colqwen2, joint_encoder, tmp_path):
    """A folder's vanished pages (`--sync`), a delete that marks rows and the compaction that drops them leave
    the multi-vector index ranking the pages left as sentence-transformers does over them."""
    folder, root = tmp_path / "few", tmp_path / "idx"
    folder.mkdir()
    for f in sorted((pages / "pages").glob("*.png"))[:8]:
        shutil.copy(f, folder / f.name)
    code, _, err = run_cli("build", "few", "--images", folder, "--multivector", f"multivector:{tiny_colqwen2}",
                           "--root", root, "-q")
    assert code == 0, err

    def ranked() -> list[list[str]]:
        return run_pipeline(run_cli, tmp_path, 'multivector("few", k=10)', QUERIES)[0]

    (folder / "p01.png").unlink()
    (folder / "p06.png").unlink()
    code, _, err = run_cli("build", "few", "--images", folder, "--sync", "--root", root, "-q")
    assert code == 0, err
    assert ranked() == top10(*reference(tiny_colqwen2, folder, QUERIES, stored=True))
    (tmp_path / "gone.txt").write_text("p03\n")
    code, _, err = run_cli("delete", "few", "--ids", tmp_path / "gone.txt", "--root", root, "-q")
    assert code == 0, err
    (folder / "p03.png").unlink()
    want = top10(*reference(tiny_colqwen2, folder, QUERIES, stored=True))
    assert ranked() == want
    code, _, err = run_cli("compact", "few", "--root", root, "-q")
    assert code == 0, err
    from engine.core.storage.index.multivector import MultiVectorIndex
    assert MultiVectorIndex.load(next((root / "few").glob("multivector*"))).meta["count"] == 5
    assert ranked() == want
