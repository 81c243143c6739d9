"""Hostile pipeline and query files: arguments of the wrong type, a collection name too long for a folder, a
chain too deep to walk, refusals that name the file's line, and files that are no regular file (a FIFO, a
device). Each is one line and a nonzero exit, never a traceback or a hang."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.core.ranking.pipeline.parse import MAX_DEPTH, parse_pipeline, read_pipeline_file
from engine.errors import EngineError


@pytest.fixture(scope="module")
def idx(tmp_path_factory, install_fake):
    """A two-item collection `docs` built by the fake encoder (no model), with its query file."""
    from engine.core.collection import Collection
    base = tmp_path_factory.mktemp("pipe-inputs")
    (base / "docs.csv").write_text("id,text\nd1,rain and floods\nd2,a school\n")
    (base / "q.tsv").write_text("q1\train\n")
    with pytest.MonkeyPatch.context() as mp:
        install_fake(mp)
        Collection.build("docs", texts=base / "docs.csv", root=base / "idx")
        yield base


@pytest.mark.parametrize("text, message", [
    ('retrieve("docs", group=["a"])', r"retrieve\(\): group must be text or None, not a list"),
    ('retrieve("docs") >> rerank("cross:x", docs=5)', r"rerank\(\): docs must be text or None, not 5"),
    ('retrieve(5)', r"retrieve\(\): collection must be text, not 5"),
    ('retrieve("docs", k="ten")', r"retrieve\(\): k must be a number, not text"),
    ('fuse(retrieve("a"), retrieve("b"), weights=["x", 1])', r"fuse\(\): weights must be a list of numbers or None"),
    ('retrieve("docs") >> rerank("cross:x", fields="title")', r"fields must be a list of texts or None"),
])
def test_an_argument_of_the_wrong_type_is_one_line(text, message):
    with pytest.raises(EngineError, match=message) as info:
        parse_pipeline(text)
    assert "\n" not in str(info.value)


def test_a_chain_deeper_than_the_limit_is_refused_and_one_at_it_walks(tmp_path):
    chain = lambda n: " >> ".join(['retrieve("docs")'] + ['rerank("cross:x", depth=5)'] * (n - 1))  # noqa: E731
    for n in (MAX_DEPTH + 1, 500, 900):
        with pytest.raises(EngineError, match="stages deep, over the limit|too many stages to parse") as info:
            parse_pipeline(chain(n), "p.toml: ")
        assert "\n" not in str(info.value) and str(info.value).startswith("p.toml: ")
    stage = parse_pipeline(chain(MAX_DEPTH))
    assert str(parse_pipeline(str(stage))) == str(stage)   # the text of the deepest allowed walks back


def test_a_refusal_names_the_files_line_and_column(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('# a comment\ndescription = "two stages"\n\npipeline = \'\'\'\n\n  retrieve("docs")\n'
                 '  >> nope()\n\'\'\'\n')
    with pytest.raises(EngineError, match=r"p.toml: line 7, column 6: 'nope' is not a stage"):
        read_pipeline_file(f)
    f.write_text('description = "one line"\npipeline = \'retrieve("docs") >> nope()\'\n')
    with pytest.raises(EngineError, match=r"p.toml: line 2, column 33: 'nope' is not a stage"):
        read_pipeline_file(f)
    f.write_text('\npipeline = """retrieve("docs",\n   k=[x for x in y])"""\n')
    with pytest.raises(EngineError, match=r"p.toml: line 3, column 6: ListComp is not allowed"):
        read_pipeline_file(f)
    f.write_text('pipeline = \'\'\'\nretrieve("docs"\n\'\'\'\n')
    with pytest.raises(EngineError, match=r"p.toml: line \d+, column \d+: not a pipeline expression"):
        read_pipeline_file(f)


def test_a_collection_name_too_long_for_a_folder_is_one_line(run_cli, idx, tmp_path):
    for name in ("x" * 300, "a/" + "y" * 300, "é" * 200):
        pipe = tmp_path / "long.toml"
        pipe.write_text(f"pipeline = 'retrieve(\"{name}\")'\n")
        code, _, err = run_cli("pipeline", "run", pipe, "--queries", idx / "q.tsv", "--root", idx / "idx",
                               "--out", tmp_path / "x.run", "--no-cache")
        assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "a folder name holds at most 255" in err and not (tmp_path / "x.run").exists()


def _engine(*args, timeout=60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="POSIX files")
def test_a_fifo_or_a_device_is_refused_not_read(idx, tmp_path):
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    qfifo = tmp_path / "q.jsonl"
    os.mkfifo(qfifo)
    pipe = tmp_path / "ok.toml"
    pipe.write_text("pipeline = 'retrieve(\"docs\")'\n")
    cases = [(fifo, idx / "q.tsv", "a FIFO"), ("/dev/zero", idx / "q.tsv", "a device"),
             (pipe, qfifo, "a FIFO"), (pipe, "/dev/zero", "a device")]
    for file, queries, kind in cases:
        r = _engine("pipeline", "run", file, "--queries", queries, "--root", idx / "idx", "--out",
                    tmp_path / "x.run", "--no-cache", "-q")
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and kind in r.stderr, r.stderr
        assert not (tmp_path / "x.run").exists()


def test_a_jsonl_line_that_is_no_object_names_file_and_line(run_cli, idx, tmp_path):
    pipe = tmp_path / "ok.toml"
    pipe.write_text("pipeline = 'retrieve(\"docs\")'\n")
    for body in ('{"qid": "a", "text": "x", "examples": ["d1"]}\n[1, 2]\n', '{"qid": "a", "text": "x"}\n"text"\n'):
        q = tmp_path / "q.jsonl"
        q.write_text(body)
        code, _, err = run_cli("pipeline", "run", pipe, "--queries", q, "--root", idx / "idx",
                               "--out", tmp_path / "x.run", "--no-cache")
        assert code != 0 and "Traceback" not in err and "q.jsonl:2" in err, err


def test_a_pipeline_file_with_a_bom_is_read(tmp_path):
    f = tmp_path / "bom.toml"
    f.write_bytes(b"\xef\xbb\xbfpipeline = 'retrieve(\"docs\") >> nope()'\n")
    with pytest.raises(EngineError, match=r"bom.toml: line 1, column 33: 'nope' is not a stage"):
        read_pipeline_file(f)
    f.write_bytes(b"\xef\xbb\xbfpipeline = 'retrieve(\"docs\") % 3'\n")
    assert str(read_pipeline_file(f)) == 'retrieve("docs") % 3'


def test_jsonl_queries_with_examples_read_ids_and_texts_as_every_reader_does(tmp_path):
    from engine.core.ranking.pipeline.query import read_queries_file
    q = tmp_path / "q.jsonl"
    q.write_text('{"qid": "a", "text": ["storm", "sea"], "examples": ["d1"]}\n{"qid": 7, "text": 5}\n')
    got = read_queries_file(q)
    assert [(x.qid, x.text, x.examples) for x in got] == [("a", "storm, sea", ("d1",)), ("7", "5", ())]
    for line, words in (('{"qid": ["a"], "examples": []}', "q.jsonl:1"), ('{"qid": "a", "examples": [true]}',
                        "q.jsonl:1: 'examples' must be a list"), ('{"qid": "a", "text": {"o": 1}, "examples": []}',
                        "q.jsonl:1")):
        q.write_text(line + "\n")
        with pytest.raises(EngineError, match=words):
            read_queries_file(q)
