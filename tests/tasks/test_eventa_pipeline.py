"""EVENTA's default ranking as a pipeline of core stages equals the hand-written orchestration it replaced
(kept as the reference in tests/fixtures/eventa_reference.py), stage by stage, on the generated fixture; `--pipeline FILE` runs a user's edited one."""
from __future__ import annotations

import csv

import pytest
from typer.testing import CliRunner

from engine.core.ranking.pipeline import Context, Query
from engine.core.ranking.pipeline.parse import parse_pipeline
from engine.core.ranking.pipeline.run import run_pipeline
from engine.tasks.eventa.build import build_eventa
from engine.tasks.eventa.fixture import make_eventa_fixture
from engine.tasks.eventa.rank import STAGES, RankParams
from engine.tasks.eventa.stages import parts
from fixtures.eventa_reference import ReferenceIndex


@pytest.fixture(scope="module")
def built(tmp_path_factory, conse_encoder, text_encoder):
    base = tmp_path_factory.mktemp("eventa-pipe")
    paths = make_eventa_fixture(base / "data", n_articles=12, images_per_article=2, image_size=96)
    root = base / "indexes"
    build_eventa(paths.database, paths.images, "fix", root)
    captions = [(r[0], r[1]) for r in csv.reader(open(paths.queries))][1:]
    return paths, root, captions


@pytest.mark.parametrize("params", [RankParams(), RankParams(pooling="max"),
                                    RankParams(article_fusion="weighted", image_fusion="rrf", article_weight=0.5),
                                    RankParams(top_articles=0), RankParams(image_pooling="full")],
                         ids=["default", "max", "weighted-rrf", "images", "image-full"])
def test_default_pipeline_equals_the_orchestration_stage_by_stage(built, params):
    paths, root, captions = built
    index = ReferenceIndex.open("fix", root)
    old = index.rank([t for _, t in captions], params, [s for s in STAGES if s != "articles_reranked"])
    ctx = Context(root=root)
    queries = [Query(q, t) for q, t in captions]
    exprs = parts(params, "fix")
    for stage in ("images", "articles_dense", "articles_bm25", "articles", "fused"):
        run = run_pipeline(parse_pipeline(exprs[stage]), queries, ctx)
        got = [run[q].ids for q, _ in captions]
        want = [tuple(d for d, _ in r) for r in old.images[stage]]
        assert got == want, stage


def test_reranked_articles_equal_the_orchestration(built, tiny_cross):
    paths, root, captions = built
    params = RankParams(rerank=f"cross:{tiny_cross}", rerank_depth=5)
    index = ReferenceIndex.open("fix", root)
    texts = [t for _, t in captions[:6]]
    old = index.rank(texts, params, ("articles_reranked", "fused"))
    run = run_pipeline(parse_pipeline(parts(params, "fix")["_reranked"]), [Query(q, t) for q, t in captions[:6]],
                       Context(root=root))
    assert [run[q].ids for q, _ in captions[:6]] == [tuple(a for a, _ in r) for r in old.articles["articles_reranked"]]
    fused = run_pipeline(parse_pipeline(parts(params, "fix")["fused"]), [Query(q, t) for q, t in captions[:6]],
                         Context(root=root))
    assert [fused[q].ids for q, _ in captions[:6]] == [tuple(d for d, _ in r) for r in old.images["fused"]]


def test_submit_with_the_shown_pipeline_file_equals_the_default_and_an_edit_changes_it(built, tmp_path):
    from engine.cli import app
    paths, root, _ = built
    shown = CliRunner().invoke(app, ["pipeline", "show", "eventa"])
    assert shown.exit_code == 0 and "pipeline = '''" in shown.output and '"eventa/images"' in shown.output
    assert shown.output.startswith("# ") and "--name N" in shown.output.splitlines()[1]
    pipe = tmp_path / "eventa.toml"
    pipe.write_text(shown.output)  # names the default index's collections: read as the index --name names
    renamed = tmp_path / "fix.toml"
    renamed.write_text(shown.output.replace('"eventa/', '"fix/'))  # naming the index's own: the same
    outs = {}
    for label, extra in (("default", []), ("file", ["--pipeline", str(pipe)]),
                         ("own", ["--pipeline", str(renamed)])):
        out = tmp_path / label / "submission.zip"
        res = CliRunner().invoke(app, ["eventa", "submit", "--queries", str(paths.queries), "--out", str(out),
                                       "--name", "fix", "--root", str(root), "--quiet", *extra])
        assert res.exit_code == 0, res.output
        outs[label] = (out.parent / "submission.csv").read_text()
    assert outs["default"] == outs["file"] == outs["own"]
    images_only = tmp_path / "images.toml"
    images_only.write_text("pipeline = 'retrieve(\"fix/images\", k=10)'\n")
    out = tmp_path / "img" / "submission.zip"
    res = CliRunner().invoke(app, ["eventa", "submit", "--queries", str(paths.queries), "--out", str(out),
                                   "--name", "fix", "--root", str(root), "--quiet", "--pipeline", str(images_only)])
    assert res.exit_code == 0, res.output
    assert (out.parent / "submission.csv").read_text() != outs["default"]


def test_submit_refuses_a_pipeline_file_reading_another_index(built, tmp_path, run_cli):
    paths, root, _ = built
    other = tmp_path / "other.toml"
    other.write_text("pipeline = 'retrieve(\"fix/images\", k=10) ^ retrieve(\"elsewhere/images\", k=10)'\n")
    out = tmp_path / "o" / "submission.zip"
    code, _, err = run_cli("eventa", "submit", "--queries", paths.queries, "--out", out, "--name", "fix",
                           "--root", root, "--pipeline", other)
    assert code == 2 and err.count("\n") == 1 and "'elsewhere/images'" in err and "not in the index 'fix'" in err, err
    assert not out.exists()
