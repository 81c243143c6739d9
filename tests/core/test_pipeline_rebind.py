"""A task's pipeline file read against the index `--name` names: the default index's collections are read as
that index's (`expand`'s via too), nothing else in the text changes, and another index's collection is refused
in one line naming the file and the collection."""
from __future__ import annotations

import pytest

from engine.core.ranking.pipeline.parse import parse_pipeline
from engine.core.ranking.pipeline.rebind import read_index_pipeline, rebind
from engine.errors import EngineError

TEXT = ('(retrieve("eventa/articles", where=\'source == "eventa/images"\', k=20)'
        ' >> expand("eventa/images", via="eventa/articles:article_images")'
        ' >> rerank("cross:eventa/model", depth=5, docs="eventa/articles") ^ retrieve("eventa/images")) % 10')


def test_the_default_index_collections_are_read_as_the_named_index():
    stage = rebind(TEXT, "eventa", "news")
    want = parse_pipeline(TEXT.replace('("eventa/', '("news/').replace('via="eventa/', 'via="news/')
                          .replace('docs="eventa/', 'docs="news/'))
    assert str(stage) == str(want)
    assert 'source == "eventa/images"' in str(stage) and "cross:eventa/model" in str(stage)  # not collections
    assert str(rebind(TEXT, "eventa", "eventa")) == str(parse_pipeline(TEXT))


def test_a_single_collection_index_is_rebound_whole():
    stage = rebind('score("dsebench", k=10) | score("dsebench", mode="bm25", k=10)', "dsebench", "synth")
    assert str(stage) == str(parse_pipeline('score("synth", k=10) | score("synth", mode="bm25", k=10)'))


def test_a_file_reading_another_index_is_refused_in_one_line(tmp_path):
    ok = tmp_path / "ok.toml"
    ok.write_text("pipeline = '''\n" + TEXT + "\n'''\n")
    assert "news/images" in str(read_index_pipeline(ok, "news", "eventa", "engine eventa submit"))
    bad = tmp_path / "bad.toml"
    bad.write_text("pipeline = 'retrieve(\"news/images\") ^ retrieve(\"other/images\")'\n")
    with pytest.raises(EngineError) as err:
        read_index_pipeline(bad, "news", "eventa", "engine eventa submit")
    assert str(bad) in str(err.value) and "'other/images'" in str(err.value) and "\n" not in str(err.value)
    # a name that only starts like the index is another index
    near = tmp_path / "near.toml"
    near.write_text("pipeline = 'retrieve(\"newsroom/images\")'\n")
    with pytest.raises(EngineError, match="newsroom/images"):
        read_index_pipeline(near, "news", "eventa", "engine eventa submit")
