"""EVENTA Track 2 pipeline: database reading, long-caption pooling, build → submit → eval on a generated
OpenEvents-layout fixture (real photos from scikit-image), and on coco-mini when ../shared/data is there."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from engine.core.ranking.text_pooling import encode_queries, pack_passages, similarity, split_sentences
from engine.errors import EngineError
from engine.tasks.eventa.build import build_eventa
from engine.tasks.eventa.data import Fields, read_database, read_labeled
from engine.tasks.eventa.cli import EventaEvalOptions
from engine.tasks.eventa.evaluate import eval_command, eval_eventa, format_stage_table
from engine.tasks.eventa.fixture import coco_as_eventa, make_eventa_fixture
from engine.tasks.eventa.rank import EventaIndex, RankParams
from engine.tasks.eventa.submission import validate_eventa

pytest.importorskip("skimage")


# ---------------------------------------------------------------- long texts

def test_sentences_are_split_and_long_ones_cut_into_windows_without_losing_words():
    long = "Then " + " ".join(f"w{i}" for i in range(119))
    text = f"First sentence here. Second one! {long}. \"Quoted third?\" Yes."
    parts = split_sentences(text, max_words=50)
    assert parts[:2] == ["First sentence here.", "Second one!"]
    assert [len(p.split()) for p in parts[2:5]] == [50, 50, 20]
    assert " ".join(parts).split() == text.split()


def test_passages_keep_whole_sentences_under_the_budget_and_repeat_the_title():
    content = " ".join(f"Sentence number {i} has exactly seven words." for i in range(40))
    passages = pack_passages(content, max_words=60, prefix="The Title")
    assert len(passages) > 1
    assert all(p.startswith("The Title\n") for p in passages)
    assert all(len(p.split()) <= 60 for p in passages)
    body = " ".join(p.split("\n", 1)[1] for p in passages)
    assert body.split() == content.split()


def test_sentence_pooling_sees_what_truncation_drops(text_encoder):
    filler = "The committee met again to discuss the annual budget and the schedule of works. " * 25
    caption = filler + "In the corner a small tabby cat sleeps on a cushion."
    docs = text_encoder.encode_texts(["a cat sleeping", "a cup of coffee"])
    full = encode_queries(text_encoder, [caption], "full")
    sentences = encode_queries(text_encoder, [caption], "max")
    assert sentences.vectors.shape[0] > 20  # every sentence was encoded
    s_full, s_max = similarity(full, 0, docs, "full"), similarity(sentences, 0, docs, "max")
    assert s_max[0] > s_max[1] + 0.2          # the cat sentence is found
    assert s_max[0] > s_full[0] + 0.2         # the truncated encoding never saw it
    mean = similarity(sentences, 0, docs, "mean")
    assert np.isclose(np.linalg.norm(sentences.pooled()[0]), 1.0, atol=1e-5) and mean.shape == (2,)


# ---------------------------------------------------------------- reading the challenge's files

def test_openevents_layout_with_custom_field_names(tmp_path):
    db = tmp_path / "database.json"
    db.write_text(json.dumps({
        "a1": {"headline": "Storm hits coast", "body": "Waves. Wind.", "pics": ["i1", 2], "date": "2020"},
        "a2": {"headline": "Match report", "body": "Goals.", "pics": "i3, i4"},
        "a3": {"headline": "No pictures", "body": "Text only."},
    }))
    with pytest.raises(EngineError, match=r"'title'.*title_field"):
        read_database(db)
    arts = read_database(db, Fields(title="headline", content="body", images="pics"))
    assert [a.id for a in arts] == ["a1", "a2", "a3"]
    assert arts[0].images == ["i1", "2"] and arts[1].images == ["i3", "i4"] and arts[2].images == []
    assert arts[0].text == "Storm hits coast\nWaves. Wind." and arts[0].meta["date"] == "2020"


def test_json_list_layout_needs_an_id_field(tmp_path):
    db = tmp_path / "articles.jsonl"
    db.write_text('{"article_id": "x", "title": "T", "content": "C", "images": ["p"]}\n'
                  '{"article_id": "x", "title": "again", "content": "C", "images": []}\n')
    arts = read_database(db)
    assert [(a.id, a.title) for a in arts] == [("x", "T")]  # the repeated id keeps its first article


def test_labeled_csv_with_image_index_and_missing_columns(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("image_index,caption,retrieved_article_id,retrieved_image_id\n7,A cat.,a1,i9\n")
    [row] = read_labeled(path)
    assert (row.qid, row.text, row.article, row.image) == ("7", "A cat.", "a1", "i9")
    bad = tmp_path / "bad.csv"
    bad.write_text("query_id,query_text\n1,hello\n")
    with pytest.raises(EngineError, match="correct image id"):
        read_labeled(bad)


def test_auto_pooling_is_truncation_where_the_caption_fits_and_best_sentence_past_it(text_encoder):
    from engine.core.ranking.text_pooling import fits, words_for
    short = "A tabby cat sleeps on a cushion. The committee met again to discuss the annual budget."
    long = "The committee met again to discuss the annual budget and the schedule of works. " * 25 + \
        "In the corner a small tabby cat sleeps on a cushion."
    assert fits(text_encoder, short) and not fits(text_encoder, long)
    assert len(long.split()) > words_for(text_encoder)
    auto = encode_queries(text_encoder, [short, long], "auto")
    full = encode_queries(text_encoder, [short, long], "full")
    sentences = encode_queries(text_encoder, [long], "max")
    docs = text_encoder.encode_texts(["a cat sleeping", "a cup of coffee"])
    assert list(auto.owner).count(0) == 1 and np.allclose(auto.rows_of(0), full.rows_of(0), atol=1e-5)
    assert np.allclose(similarity(auto, 0, docs, "auto"), similarity(full, 0, docs, "full"), atol=1e-5)
    assert np.allclose(auto.rows_of(1), sentences.vectors, atol=1e-5)
    assert np.allclose(similarity(auto, 1, docs, "auto"), similarity(sentences, 0, docs, "max"), atol=1e-5)
    assert similarity(auto, 1, docs, "auto")[0] > similarity(full, 1, docs, "full")[0] + 0.2  # what truncation cut


def test_the_default_image_stage_reads_a_long_caption_by_sentences_and_a_short_one_whole():
    from engine.tasks.eventa.stages import parts
    steps = parts(RankParams(), "fix")
    assert RankParams().image_pooling == "auto"
    assert 'retrieve("fix/images", pooling="auto"' in steps["images"]
    assert 'similarity("fix/images"' in steps["fused"] and 'pooling="auto")' in steps["fused"]
    assert 'group="article", pooling="mean"' in steps["_dense"]  # the article stage keeps its own pooling
    assert 'pooling="full"' in parts(RankParams(image_pooling="full"), "fix")["images"]


def test_a_bad_image_pooling_is_one_line_naming_the_flag(run_cli):
    code, out, err = run_cli("eventa", "submit", "--queries", "q.csv", "--out", "o.zip", "--image-pooling", "bogus")
    assert code != 0 and "--image-pooling" in err and "bogus" in err and "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1


def test_bad_tuning_values_are_user_errors():
    for params in (RankParams(pooling="median"), RankParams(image_pooling="truncate"), RankParams(article_weight=1.5), RankParams(image_fusion="x"),
                   RankParams(dense_weight=0, bm25_weight=0)):
        with pytest.raises(EngineError):
            params.check()


# ---------------------------------------------------------------- end to end on the generated fixture

@pytest.fixture(scope="module")
def built(tmp_path_factory, conse_encoder, text_encoder):
    base = tmp_path_factory.mktemp("eventa")
    paths = make_eventa_fixture(base / "data", n_articles=12, images_per_article=2, image_size=96)
    root = base / "indexes"
    summary = build_eventa(paths.database, paths.images, "fix", root)
    return paths, root, summary


def test_fixture_is_deterministic_and_in_openevents_layout(tmp_path, built):
    paths, _, _ = built
    again = make_eventa_fixture(tmp_path / "again", n_articles=12, images_per_article=2, image_size=96)
    assert again.database.read_text() == paths.database.read_text()
    db = json.loads(paths.database.read_text())
    first = next(iter(db.values()))
    assert set(first) == {"url", "date", "title", "images", "content"} and len(first["images"]) == 2
    assert all((paths.images / f"{i}.jpg").is_file() for a in db.values() for i in a["images"])


def test_build_indexes_images_passages_and_bm25_and_reports_the_broken_file(built):
    _, root, summary = built
    assert summary["counts"]["articles"] == 12 and summary["counts"]["images"] == 24
    index = EventaIndex.open("fix", root)
    assert len(index.image_ids) == 24 and "broken0000000000" not in index.image_row
    skipped = [s["id"] for s in index.images.manifest["skipped"]]
    assert skipped == ["broken0000000000"]
    assert set(index.passage_article) == set(index.article_images)
    assert len(index.bm25) == 12
    with pytest.raises(EngineError, match="already exists"):
        build_eventa(summary["database"], summary["images"], "fix", root)
    with pytest.raises(EngineError, match="no EVENTA index 'nope'.*build it first"):
        EventaIndex.open("nope", root)


def test_cli_submit_writes_a_valid_zip_with_csv_beside_it(built, tmp_path):
    from engine.cli import app
    paths, root, _ = built
    out = tmp_path / "sub" / "submission.zip"
    res = CliRunner().invoke(app, ["eventa", "submit", "--queries", str(paths.queries), "--out", str(out),
                                   "--name", "fix", "--root", str(root), "--quiet"])
    assert res.exit_code == 0, res.output
    assert out.is_file() and (out.parent / "submission.csv").is_file()
    assert validate_eventa(out, paths.queries).ok
    with open(out.parent / "submission.csv", newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    n_queries = sum(1 for _ in open(paths.queries)) - 1
    assert len(rows) == n_queries
    assert all(len(set(r[1:])) == 10 and "#" not in r for r in rows)  # 24 images: ten real ones each


def test_each_stage_alone_and_fused(built):
    paths, root, _ = built
    table = eval_eventa(paths.labeled, "fix", root, RankParams(), poolings=("mean", "max"), sweep=(0.0, 1.0))
    for pooling, stages in table.items():
        images, articles, fused = (stages[s]["eventa"] for s in ("images", "articles", "fused"))
        # the article stage knows the story (not which of its two photos), the image stage knows the subject
        assert stages["articles"]["article_r@10"] >= 0.9
        assert stages["articles"]["eventa.r@1"] <= 0.75
        assert fused > articles + 0.1 and fused > images + 0.3, (pooling, stages)
        assert stages["fused w=0"]["eventa"] < fused  # image similarity alone inside the top articles is worse


def test_empty_articles_leave_the_image_stage_intact(built, tmp_path):
    """The real OpenEvents sample's shape: every article empty. The article stage ties everywhere, so the
    default fused ranking must be the image stage's, not an arbitrary article order's images."""
    paths, _, _ = built
    db = json.loads(paths.database.read_text())
    for a in db.values():
        a["title"], a["content"] = "", ""
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(db))
    build_eventa(empty, paths.images, "blank", tmp_path)
    table = eval_eventa(paths.labeled, "blank", tmp_path, RankParams(), poolings=("mean",))
    stages = table["mean"]
    assert stages["fused"]["eventa"] >= stages["images"]["eventa"] > 0
    texts = [r[1] for r in csv.reader(open(paths.queries))][1:4]
    assert _ranked(tmp_path, "blank", texts, RankParams(), "fused") == \
        _ranked(tmp_path, "blank", texts, RankParams(), "images")


def test_default_image_stage_never_below_truncation_on_long_captions_where_truncation_wins(built, tmp_path):
    """The issue's shape (empty articles: fused is the image stage) on long news captions of the fixture's
    photos, where whole-caption encoding beats the sentence mean: the default scores at least truncation."""
    from engine.tasks.eventa.fixture import news_caption
    paths, _, _ = built
    db = json.loads(paths.database.read_text())
    for a in db.values():
        a["title"], a["content"] = "", ""
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(db))
    build_eventa(empty, paths.images, "blank", tmp_path)
    rows = list(csv.reader(open(paths.labeled)))
    rng = np.random.default_rng(7)
    for r in rows[1:]:  # each caption's own first sentence (what the photo shows) in ~120 words of story
        r[1] = news_caption(rng, r[1].split(". ")[0], int(rng.integers(90, 160)), lead=0.0)
    long = tmp_path / "long.csv"
    csv.writer(open(long, "w", newline="")).writerows(rows)
    score = {p: eval_eventa(long, "blank", tmp_path, RankParams(image_pooling=p), poolings=("mean",))["mean"]
             for p in ("auto", "full", "mean")}
    overall = {p: (t["images"]["eventa"], t["fused"]["eventa"]) for p, t in score.items()}
    assert overall["full"][0] > overall["mean"][0], overall  # a set where truncation wins
    assert overall["auto"][0] >= overall["full"][0] and overall["auto"][1] >= overall["full"][1], overall


def _ranked(root, name, texts, params, stage):
    """Image ids per caption by one row of the default pipeline's steps (`engine.tasks.eventa.stages.parts`)."""
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.run import run_pipeline
    from engine.tasks.eventa.stages import parts
    run = run_pipeline(parse_pipeline(parts(params, name)[stage]), [Query(str(i), t) for i, t in enumerate(texts)],
                       Context(root=root))
    return [list(run[str(i)].ids) for i in range(len(texts))]


def test_top_articles_0_skips_the_article_stage(built):
    paths, root, _ = built
    texts = [r[1] for r in csv.reader(open(paths.queries))][1:4]
    assert _ranked(root, "fix", texts, RankParams(top_articles=0), "fused") == \
        _ranked(root, "fix", texts, RankParams(top_articles=0), "images")
    with pytest.raises(EngineError, match="at least 0"):
        RankParams(top_articles=-1).check()


def test_article_reranking_stage_orders_as_cross_encoder_predict(built, tiny_cross):
    from sentence_transformers import CrossEncoder

    from engine.core.sources import STORED_TEXT
    paths, root, _ = built
    index = EventaIndex.open("fix", root)
    docs: dict = {}
    for item in index.passages.items:  # an article's text: its first passage (title and opening)
        docs.setdefault(item["article"], item[STORED_TEXT])
    text = [r[1] for r in csv.reader(open(paths.queries))][1]
    params = RankParams(rerank=f"cross:{tiny_cross}", rerank_depth=5)
    reranked = _ranked(root, "fix", [text], params, "_reranked")[0]
    fused = _ranked(root, "fix", [text], RankParams(), "_articles")[0]
    ref = CrossEncoder(str(tiny_cross), device="cpu").predict([(text, docs[a]) for a in fused[:5]])
    want = [fused[i] for i in np.argsort(-ref, kind="stable")] + fused[5:]
    assert reranked == want
    table = eval_eventa(paths.labeled, "fix", root, params, poolings=("mean",), limit=4)
    assert "articles_reranked" in table["mean"] and "article_r@10" in table["mean"]["articles_reranked"]
    with pytest.raises(EngineError, match="unknown reranker spec"):
        RankParams(rerank="nope").check()


def test_eval_command_rejects_bad_sweep_and_pooling(built):
    paths, root, _ = built
    with pytest.raises(EngineError, match="sweep takes comma-separated article weights"):
        eval_command(EventaEvalOptions(paths.labeled, "fix", "mean", sweep="heavy", root=root), RankParams())
    with pytest.raises(EngineError, match="sweep weights must lie between 0 and 1"):
        eval_command(EventaEvalOptions(paths.labeled, "fix", "mean", sweep="1.5", root=root), RankParams())
    with pytest.raises(EngineError, match="pooling takes a comma-separated list"):
        eval_command(EventaEvalOptions(paths.labeled, "fix", "median", root=root), RankParams())


def test_messages_name_the_command_line_flags_through_the_cli(run_cli, built, monkeypatch, capsys, tmp_path):
    paths, root, _ = built
    db = tmp_path / "database.json"
    db.write_text(json.dumps({"a1": {"headline": "Storm", "content": "Waves.", "images": ["i1"]}}))
    code, _, err = run_cli("eventa", "build", "--database", db, "--images", paths.images,
                           "--name", "x", "--root", tmp_path / "idx")
    assert code == 2 and "no article has a 'title' field" in err and "--title-field" in err
    code, _, err = run_cli("eventa", "build", "--database", paths.database, "--images",
                           paths.images, "--name", "x", "--root", tmp_path / "idx", "--passage-words", "8")
    assert code == 2 and "--passage-words must be a whole number of at least 16, not 8" in err
    code, _, err = run_cli("eventa", "eval", "--queries", paths.labeled, "--name", "fix",
                           "--root", root, "--sweep", "heavy")
    assert code == 2 and "--sweep takes comma-separated article weights" in err
    code, _, err = run_cli("eventa", "submit", "--queries", paths.queries, "--out",
                           tmp_path / "sub.csv", "--name", "fix", "--root", root)
    assert code == 2 and "sub.csv: the submission to write is a zip" in err
    code, _, err = run_cli("eventa", "submit", "--queries", paths.queries, "--out",
                           tmp_path / "submission.zip", "--name", "fix", "--root", root, "--article-weight", "2")
    assert code == 2 and "--article-weight must be between 0 and 1, not 2.0" in err


def test_stage_table_as_text_and_markdown():
    table = {"mean": {"images": {"eventa": 0.5, "eventa.map": 0.25}, "fused w=0.5": {"article_r@1": 1.0}}}
    text = format_stage_table(table).splitlines()
    assert text[0].split() == ["pooling", "stage", "Overall", "mAP", "MRR", "R@1", "R@5", "R@10", "art", "R@1",
                               "art", "R@10"]
    assert text[1].split()[:4] == ["mean", "images", "0.500", "0.250"] and text[1].endswith("–")
    assert text[2].startswith("mean     fused w=0.5") and text[2].split()[-2] == "1.000"
    md = format_stage_table(table, markdown=True).splitlines()
    assert md[1] == "| --- | --- | " + " | ".join(["---:"] * 8) + " |"
    assert md[2].startswith("| mean | images | 0.500 | 0.250 | – |")


# ---------------------------------------------------------------- what is on disk

def test_index_is_two_collections_with_the_article_parts_attached(built):
    from engine.core.collection import Collection, list_collections
    from engine.tasks.eventa.build import FORMAT
    _, root, summary = built
    folder = root / "fix"
    assert sorted(p.name for p in folder.iterdir()) == ["articles", "images"]
    assert list_collections(folder) == ["articles", "images"]
    articles = Collection.open("articles", folder)
    assert set(articles.stored) == {"bm25", "article_images"}
    assert articles.extra["format"] == FORMAT and articles.extra["counts"] == summary["counts"]
    db = json.loads(Path(summary["database"]).read_text())
    assert articles.document("article_images") == {aid: a["images"] for aid, a in db.items()}
    assert articles.extra["image_collection"]["generation"] == Collection.open("images", folder).manifest["generation"]
    assert {it["article"] for it in articles.items} == set(db)


def _copy_index(built, tmp_path, name: str = "fix"):
    import shutil
    paths, root, _ = built
    shutil.copytree(root / "fix", tmp_path / "idx" / name)
    return paths, tmp_path / "idx", tmp_path / "idx" / name


def _make_format_1(folder, paths) -> None:
    """The layout engine 0.1 wrote: the passage collection alone, `bm25/` and `eventa.json` beside it."""
    from engine.core.storage.index.bm25 import BM25Index
    from engine.core.collection import Collection
    from engine.io.atomic import write_json
    from engine.tasks.eventa.build import passage_items
    articles = read_database(paths.database)
    Collection.build("articles", items=passage_items(articles, 150), kind="text", root=folder, force=True)
    BM25Index.build([a.id for a in articles], [a.text for a in articles]).save(folder / "bm25")
    write_json(folder / "eventa.json", {"format": 1, "article_images": {a.id: a.images for a in articles}})


def test_format_1_index_is_one_line_error_then_rebuilt_reusing_its_image_embeddings(run_cli, built, tmp_path, monkeypatch,
                                                                                     capsys):
    from engine.core.collection import Collection
    paths, root, folder = _copy_index(built, tmp_path)
    _make_format_1(folder, paths)
    images_before = Collection.open("images", folder).manifest
    for command in (["submit", "--queries", paths.queries, "--out", tmp_path / "s.zip"],
                    ["eval", "--queries", paths.labeled]):
        code, out, err = run_cli("eventa", *command, "--name", "fix", "--root", root)
        assert code == 2 and out == ""
        assert err.count("error:") == 1 and "Traceback" not in err
        message = " ".join(err.split())
        assert f"{folder} is an EVENTA index of format 1 (the old one)" in message
        assert "`engine eventa build`" in message and "(--force)" in message
        assert "its image embeddings are reused" in message
    with pytest.raises(EngineError, match="already exists.*force"):
        build_eventa(paths.database, paths.images, "fix", root)
    from engine.tasks.eventa.build import BuildOptions
    build_eventa(paths.database, paths.images, "fix", root, BuildOptions(force=True))
    assert sorted(p.name for p in folder.iterdir()) == ["articles", "images"]
    assert Collection.open("images", folder).manifest == images_before  # not encoded again
    fresh = _ranked(built[1], "fix", ["a cat at the city festival"], RankParams(), "fused")
    again = _ranked(root, "fix", ["a cat at the city festival"], RankParams(), "fused")
    assert again == fresh


def test_old_passage_collection_without_parts_is_format_1(built, tmp_path):
    paths, root, folder = _copy_index(built, tmp_path)
    _make_format_1(folder, paths)
    (folder / "eventa.json").unlink()
    import shutil
    shutil.rmtree(folder / "bm25")
    manifest = json.loads((folder / "articles" / "manifest.json").read_text())
    del manifest["format"]  # engine 0.1 wrote no format
    (folder / "articles" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(EngineError, match="format 1"):
        EventaIndex.open("fix", root)


def test_build_cut_short_says_so_and_the_same_build_finishes_it(built, tmp_path):
    from engine.core.collection import Collection
    from engine.tasks.eventa.build import passage_items
    paths, root, folder = _copy_index(built, tmp_path)
    # the passages were re-encoded but the parts not yet attached
    Collection.build("articles", items=passage_items(read_database(paths.database), 150), kind="text",
                     root=folder, force=True)
    with pytest.raises(EngineError, match=r"'fix' in .* is incomplete \(a build was cut short\)"):
        EventaIndex.open("fix", root)
    build_eventa(paths.database, paths.images, "fix", root)  # no force needed: nothing finished is there
    assert len(EventaIndex.open("fix", root).article_images) == 12


def test_index_state_of_empty_and_interrupted_first_builds(tmp_path):
    from engine.tasks.eventa.build import index_state
    assert index_state(tmp_path / "none") == "none"
    (tmp_path / "first" / "images" / ".partial").mkdir(parents=True)  # killed while encoding the images
    assert index_state(tmp_path / "first") == "incomplete"
    with pytest.raises(EngineError, match="'first' in .* is incomplete"):
        EventaIndex.open("first", tmp_path)


def test_images_rebuilt_after_the_articles_is_incomplete(built, tmp_path):
    from engine.core.collection import Collection
    _, root, folder = _copy_index(built, tmp_path)
    Collection.open("images", folder).attach(documents={"note": "a newer generation"})
    with pytest.raises(EngineError, match="incomplete"):
        EventaIndex.open("fix", root)


def test_rebuild_with_the_same_input_keeps_both_collections(built, tmp_path):
    from engine.core.collection import Collection
    from engine.tasks.eventa.build import BuildOptions
    paths, root, folder = _copy_index(built, tmp_path)
    before = {n: Collection.open(n, folder).manifest["roles"] for n in ("images", "articles")}
    summary = build_eventa(paths.database, paths.images, "fix", root, BuildOptions(force=True))
    after = {n: Collection.open(n, folder).manifest["roles"] for n in ("images", "articles")}
    assert after["images"] == before["images"]
    assert after["articles"]["embeddings"] == before["articles"]["embeddings"]  # passages not re-encoded
    assert after["articles"]["bm25"] != before["articles"]["bm25"]  # the parts are a new generation
    assert summary["counts"]["passages"] == 12


# ---------------------------------------------------------------- coco-mini: real photos and captions

@pytest.mark.shared
def test_coco_mini_pseudo_articles(shared_path, tmp_path):
    coco = shared_path("coco-mini")
    paths = coco_as_eventa(coco, tmp_path / "data", limit=24)
    labeled = read_labeled(paths.labeled)
    db = json.loads(paths.database.read_text())
    assert len(labeled) == len(db) == 24
    assert all(q.text not in db[q.article]["title"] + db[q.article]["content"] for q in labeled)
    build_eventa(paths.database, paths.images, "coco", tmp_path / "idx")
    table = eval_eventa(paths.labeled, "coco", tmp_path / "idx", RankParams(), poolings=("mean",))["mean"]
    assert table["articles"]["eventa.r@1"] > table["images"]["eventa.r@1"]
    assert table["images"]["eventa.r@10"] > 0.5  # the offline bridge finds real photos from a caption
    assert table["fused"]["eventa"] > table["images"]["eventa"]


def test_cli_eval_prints_every_stage_as_json(built, tmp_path):
    from engine.cli import app
    paths, root, _ = built
    res = CliRunner().invoke(app, ["eventa", "eval", "--queries", str(paths.labeled), "--name", "fix", "--root",
                                   str(root), "--pooling", "mean", "--limit", "8", "--json", "--quiet",
                                   "--out", str(tmp_path / "t.json")])
    assert res.exit_code == 0, res.output
    table = json.loads(res.stdout)["mean"]
    assert list(table) == ["images", "articles_dense", "articles_bm25", "articles", "fused"]
    assert all(0.0 <= v["eventa"] <= 1.0 for v in table.values())
    assert json.loads((tmp_path / "t.json").read_text())["stages"]["mean"] == table
