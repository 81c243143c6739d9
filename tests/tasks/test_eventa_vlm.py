"""EVENTA's image stage on image–text sentence-transformers models (`engine eventa build --model sbert:DIR`): a
CLIP-layout model and a VLM embedder (a tiny random Qwen2-VL under last-token pooling, as GME and
Qwen3-VL-Embedding are built), checked against sentence-transformers' own embeddings and similarity, and the
example pipeline in the winning system's shape (docs/pipelines/eventa-vlm.toml) run end to end on tiny models."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from fixtures.tiny_families import build_tiny_clip, build_tiny_qwen2_vl

from engine.tasks.eventa.fixture import make_eventa_fixture

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "pipelines" / "eventa-vlm.toml"
EXAMPLE_LLM = "llm:Qwen/Qwen3-Reranker-0.6B"
QUERY_PROMPT = "a news photo of: "


@pytest.fixture(scope="module", params=["clip", "qwen2-vl"])
def vlm_index(request, tmp_path_factory):
    """A tiny image–text sentence-transformers model (CLIP-layout, or a Qwen2-VL embedder) with a query prompt
    of its own (a VLM embedder's query instruction), the generated EVENTA fixture and its index `eventa` built
    with the model as the image stage's: (model folder, fixture paths, index root)."""
    from typer.testing import CliRunner

    from engine.cli import app
    base = tmp_path_factory.mktemp("eventa-vlm")
    paths = make_eventa_fixture(base / "data", n_articles=6, images_per_article=2, image_size=64)
    if request.param == "clip":
        model = build_tiny_clip(base / "clip", prompts={"query": QUERY_PROMPT})
    else:
        words = " ".join(t for _, t in captions(paths)) + " " + QUERY_PROMPT
        model = build_tiny_qwen2_vl(base / "qwen2-vl", prompts={"query": QUERY_PROMPT}, words=words)
    root = base / "indexes"
    res = CliRunner().invoke(app, ["eventa", "build", "--database", str(paths.database), "--images", str(paths.images),
                                   "--model", f"sbert:{model}", "--root", str(root), "--quiet"])
    assert res.exit_code == 0, res.output
    return model, paths, root


def captions(paths) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in csv.reader(open(paths.queries, encoding="utf-8"))][1:]


def reference_top10(model_dir: Path, images: Path, texts: list[str]) -> list[list[str]]:
    """sentence-transformers' own query embeddings (its query prompt applied) against its image embeddings,
    brute force over every readable image of the folder."""
    from PIL import Image

    from engine.core.encoders import torchvision_patch  # noqa: F401
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(model_dir))
    files = []
    for f in sorted(images.iterdir()):
        try:
            files.append((f.stem, Image.open(f).convert("RGB")))
        except OSError:  # the fixture's broken file
            continue
    docs = model.encode([im for _, im in files])
    q = model.encode(texts, prompt_name="query")
    sims = np.asarray(model.similarity(q, docs))
    return [[files[i][0] for i in np.argsort(-row, kind="stable")[:10]] for row in sims]


def test_the_image_stage_scores_with_the_sbert_model_as_sentence_transformers_does(vlm_index):
    from engine.core.collection import Collection
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.run import run_pipeline
    from engine.tasks.eventa.rank import RankParams
    from engine.tasks.eventa.stages import parts
    model, paths, root = vlm_index
    images = Collection.open("images", root / "eventa")
    assert images.manifest["encoder"] == f"sbert:{model}"
    assert images.manifest["prompts"] == {"query": QUERY_PROMPT}
    caps = captions(paths)[:5]
    want = reference_top10(model, paths.images, [t for _, t in caps])
    # the image stage (pooled retrieve: the caption whole under "full") and a plain dense search agree with it
    for expr in (parts(RankParams(image_pooling="full"))["images"], 'retrieve("eventa/images", mode="dense") % 10'):
        run = run_pipeline(parse_pipeline(expr), [Query(q, t) for q, t in caps], Context(root=root))
        assert [list(run[q].ids) for q, _ in caps] == want, expr


def test_the_default_pipeline_submits_on_the_sbert_image_model(vlm_index, run_cli, tmp_path):
    from engine.tasks.eventa.submission import validate_eventa
    _, paths, root = vlm_index
    out = tmp_path / "submission.zip"
    code, _, err = run_cli("eventa", "submit", "--queries", paths.queries, "--out", out, "--root", root, "-q")
    assert code == 0, err
    report = validate_eventa(out, paths.queries)
    assert report.ok, report.problems


def test_the_winners_shape_example_runs_end_to_end_on_tiny_models(vlm_index, tiny_lm, run_cli, tmp_path):
    """docs/pipelines/eventa-vlm.toml, its LLM replaced by a tiny random one, its VLM embedder the index's tiny
    image–text model: `engine eventa submit --pipeline`
    writes a valid submission, and `engine experiment --stages` shows every stage ran (the reranker scoring its
    pairs)."""
    from engine.tasks.eventa.submission import validate_eventa
    _, paths, root = vlm_index
    text = EXAMPLE.read_text(encoding="utf-8")
    assert EXAMPLE_LLM in text
    pipe = tmp_path / "eventa-vlm.toml"
    pipe.write_text(text.replace(EXAMPLE_LLM, f"llm:{tiny_lm}"), encoding="utf-8")
    out = tmp_path / "sub" / "submission.zip"
    code, _, err = run_cli("eventa", "submit", "--queries", paths.queries, "--out", out, "--root", root,
                           "--pipeline", pipe, "-q")
    assert code == 0, err
    report = validate_eventa(out, paths.queries)
    assert report.ok, report.problems
    rows = list(csv.reader(open(out.parent / "submission.csv", encoding="utf-8")))[1:]
    assert len(rows) == len(captions(paths)) and all(r[1] != "#" for r in rows)

    qrels = tmp_path / "qrels.txt"
    code, _, err = run_cli("convert", "eventa-qrels", paths.labeled, qrels)
    assert code == 0, err
    code, stdout, err = run_cli("experiment", pipe, "--queries", paths.queries, "--qrels", qrels, "--json",
                                "--root", root, "--no-cache")
    assert code == 0, err
    stages = json.loads(stdout)["pipelines"][0]["stages"]
    kinds = {s["stage"].partition("(")[0] for s in stages}
    assert {"retrieve", "rerank", "expand", "similarity"} <= kinds, kinds
    assert not any(s["cached"] for s in stages)
    rerank = next(s for s in stages if s["stage"].startswith("rerank("))
    assert rerank["pairs_scored"] > 0
