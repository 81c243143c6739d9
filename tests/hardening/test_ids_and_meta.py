"""Ids and metadata as `--vectors` builds and `engine delete` read them: an id line is the whole line (white
space inside is refused or replaced per `--id-policy`, never cut to its first word), `--meta` refuses what the
JSON reader refuses everywhere (docs/limits.md), and a delete that could not keep BM25 aligned is refused."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.core.storage.builder.update import delete_ids
from engine.core.collection import Collection
from engine.errors import EngineError


@pytest.fixture()
def vecs(tmp_path):
    np.save(tmp_path / "v.npy", np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32))
    return tmp_path


@pytest.mark.parametrize("line", ["has space", "a\tb"])
def test_an_id_with_white_space_is_refused_or_replaced_never_cut(run_cli, vecs, monkeypatch, capsys, line):
    (vecs / "ids.txt").write_text(f"x1\n{line}\nx3\n")
    args = ("build", "v", "--vectors", vecs / "v.npy", "--ids", vecs / "ids.txt", "--root", vecs / "idx")
    code, out, err = run_cli(*args)
    assert code == 2 and "hold white space" in err and "Traceback" not in err, err
    code, out, err = run_cli(*args, "--id-policy", "replace")
    assert code == 0, err
    assert Collection.open("v", vecs / "idx").ids == ["x1", line.replace(" ", "_").replace("\t", "_"), "x3"]


@pytest.mark.parametrize("row, words", [
    ('{"score": NaN}', "NaN is not valid JSON"),
    ('{"a": 1, "a": 2}', "key 'a' appears twice"),
    ('{"a": ' + "[" * 200 + "]" * 200 + "}", "max_json_depth"),
    ('{"n": ' + "9" * 500 + "}", "max_number_chars"),
    (b'{"t": "\xff\xfe"}', "not UTF-8"),
])
def test_meta_refuses_what_every_json_reader_refuses(run_cli, vecs, monkeypatch, capsys, row, words):
    good = '{"t": "ok"}\n'
    data = row if isinstance(row, bytes) else row.encode()
    (vecs / "meta.jsonl").write_bytes(good.encode() + data + b"\n" + good.encode())
    code, out, err = run_cli("build", "v", "--vectors", vecs / "v.npy", "--meta",
                             vecs / "meta.jsonl", "--root", vecs / "idx")
    assert code == 2 and words in err and "meta.jsonl" in err and "Traceback" not in err, err
    assert not (vecs / "idx" / "v" / "manifest.json").exists()


def test_parquet_meta_with_a_binary_column_or_nan_is_one_line(run_cli, vecs, monkeypatch, capsys):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    for table, words in ((pa.table({"blob": [b"\x00\x01", b"x", b"y"]}), "column 'blob': binary data"),
                         (pa.table({"f": [1.0, float("nan"), 2.0]}), "column 'f': nan is not a finite number")):
        pq.write_table(table, vecs / "meta.parquet")
        code, out, err = run_cli("build", "v", "--vectors", vecs / "v.npy", "--meta",
                                 vecs / "meta.parquet", "--root", vecs / "idx", "--force")
        assert code == 2 and words in err and "Traceback" not in err, err
    import datetime
    pq.write_table(pa.table({"day": [datetime.date(2020, 1, d) for d in (1, 2, 3)]}), vecs / "meta.parquet")
    code, out, err = run_cli("build", "v", "--vectors", vecs / "v.npy", "--meta",
                             vecs / "meta.parquet", "--root", vecs / "idx", "--force")
    assert code == 0, err
    col = Collection.open("v", vecs / "idx")
    assert col.items_at([1])[0]["day"] == "2020-01-02"
    from engine.core.ranking.hybrid import filter_mask
    assert filter_mask(col, 'day == "2020-01-02"').tolist() == [False, True, False]


def test_delete_reads_an_id_line_with_surrounding_tabs(run_cli, vecs, monkeypatch, capsys):
    (vecs / "ids.txt").write_text("x1\nx2\nx3\n")
    code, out, err = run_cli("build", "v", "--vectors", vecs / "v.npy", "--ids",
                             vecs / "ids.txt", "--root", vecs / "idx")
    assert code == 0, err
    (vecs / "gone.txt").write_text("\tx2\t\n")
    code, out, err = run_cli("delete", "v", "--ids", vecs / "gone.txt", "--root", vecs / "idx")
    assert code == 0, err
    assert Collection.open("v", vecs / "idx").ids == ["x1", "x3"]


def test_delete_refuses_a_bm25_it_could_not_rebuild(tmp_path):
    from engine.core.storage.index.bm25 import named_analyzer
    from engine.core.storage.builder.lexical import bm25_files
    ids, texts = ["a", "b", "c"], ["bread and butter", "castle walls", "bread crust"]
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    col = Collection.from_vectors("v", ids, x, None, "vectors", root=tmp_path, files=bm25_files(ids, texts, named_analyzer("english")))
    generation = col.manifest["generation"]
    with pytest.raises(EngineError, match="BM25 index over texts its items do not name") as exc:
        delete_ids("v", ["b"], root=tmp_path)
    assert "\n" not in str(exc.value)
    assert json.loads((tmp_path / "v" / "manifest.json").read_text())["generation"] == generation
