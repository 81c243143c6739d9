"""Property-based fuzzing of every reader of user files: for any bytes, a reader returns a parse or raises
one `EngineError` of one line, never another exception, within bounded time and Python memory.

Inputs are built from the pieces that broke readers before (huge and non-finite numbers, open quotes, deep
brackets, ids with spaces, NUL bytes) joined by the separators the formats use, plus mutations of valid
files. The `default` profile runs a few examples per reader (the default suite); `-m slow` runs many.
"""
from __future__ import annotations

import io
import json
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import EngineError

TOKENS = ["q1", "q2", "Q0", "d1", "d2", "0", "1", "2", "-1", "1.5", "1e300", "-1e309", "NaN", "nan", "inf",
          "9" * 5001, '"', '"a,b"', "{", "}", "[", "]", '{"id": 1}', "[" * 300, "\x00", "é", "id", "text",
          "query_id", "image_id_1", "#", "IMG 001.jpg", " ", "", "r1", "true", "null", "case_id", "model_id",
          "task_id", "f1", "0.5", "\ufeff"]
SEPARATORS = [" ", "\t", ",", "", ": "]

lines = st.lists(st.lists(st.sampled_from(TOKENS), max_size=12).flatmap(
    lambda parts: st.sampled_from(SEPARATORS).map(lambda sep: sep.join(parts))), max_size=12)
hostile_text = st.one_of(lines.map("\n".join), st.text(max_size=300))

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True),
                      st.text(max_size=20), st.sampled_from(["IMG 001.jpg", "q1", "d1", "1e300"]))
json_values = st.recursive(json_leaf, lambda kids: st.one_of(
    st.lists(kids, max_size=5), st.dictionaries(st.sampled_from(
        ["id", "text", "query", "case_id", "candidate_dataset_id", "query_rel", "target_sim", "title",
         "description", "tags", "1", "d1", "score", "image_path"]), kids, max_size=6)), max_leaves=30)
json_text = st.one_of(json_values.map(lambda v: json.dumps(v, allow_nan=True)), hostile_text)


def _mutate(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    b = bytearray(data)
    for pos, val in flips:
        if b:
            b[pos % len(b)] = val
    return bytes(b)


def _zip_bytes(text: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("submission.csv", text)
    return buf.getvalue()


zip_bytes = st.tuples(hostile_text, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                             max_size=6)).map(lambda t: _mutate(_zip_bytes(t[0]), t[1]))


def _readers() -> dict[str, tuple[str, Callable[[Path], object], st.SearchStrategy]]:
    """name → (file suffix, reader, strategy of file contents)."""
    from engine.core.sources import image_items, text_items
    from engine.eval.groups import read_groups
    from engine.io.runs import parse_qrels, parse_run, read_qrels, read_run
    from engine.io.ids import read_id_list
    from engine.io.tables import read_queries, read_rows
    from engine.tasks.dse import data as dse
    from engine.tasks.eventa.data import read_database
    from engine.tasks.eventa.submission import (
        parse_eventa_submission,
        read_eventa_submission,
    )
    from engine.tasks.lora import data as lora
    from engine.tasks.model_ranking import data as mr

    return {
        "trec run": (".txt", read_run, hostile_text),
        "trec run (parse)": (".txt", parse_run, hostile_text),
        "qrels": (".txt", read_qrels, hostile_text),
        "qrels (parse)": (".txt", parse_qrels, hostile_text),
        "csv table": (".csv", read_rows, hostile_text),
        "tsv table": (".tsv", read_rows, hostile_text),
        "jsonl table": (".jsonl", read_rows, json_text),
        "json table": (".json", read_rows, json_text),
        "query file (tsv)": (".tsv", read_queries, hostile_text),
        "query file (jsonl)": (".jsonl", read_queries, json_text),
        "id list": (".txt", read_id_list, hostile_text),
        "id table": (".csv", read_id_list, hostile_text),
        "groups": (".tsv", read_groups, hostile_text),
        "text table": (".csv", text_items, hostile_text),
        "text table (jsonl)": (".jsonl", text_items, json_text),
        "image table": (".csv", image_items, hostile_text),
        "eventa submission csv": (".csv", read_eventa_submission, hostile_text),
        "eventa submission zip": (".zip", parse_eventa_submission, zip_bytes),
        "eventa database": (".json", read_database, json_text),
        "dse datasets": (".json", dse.read_datasets, json_text),
        "dse judgments": (".json", dse.read_dsebench_judgments, json_text),
        "dse json run": (".json", dse.read_json_run, json_text),
        "dse queries": (".tsv", dse.read_dse_queries, hostile_text),
        "dse cases": (".tsv", dse.read_cases, hostile_text),
        "ntcir tasks.csv": (".csv", mr.read_task_table, hostile_text),
        "ntcir models.csv": (".csv", mr.read_models, hostile_text),
        "ntcir ground truth": (".csv", lambda p: mr.read_ground_truth(p, ["m1", "m2"]), hostile_text),
        "ntcir qrels csv": (".csv", mr.read_ntcir_a_qrels, hostile_text),
        "ntcir groups csv": (".csv", mr.read_ntcir_a_groups, hostile_text),
        "lora models": (".csv", lora.read_models, hostile_text),
        "lora train": (".csv", lora.read_train, hostile_text),
    }


READERS = _readers()
SECONDS = 10
PYTHON_BYTES = 256 << 20


def check_reader(tmp_path: Path, name: str, content: str | bytes) -> str:
    """Run one reader on one input; returns "ok" or "error", fails on anything else."""
    suffix, reader, _ = READERS[name]
    path = tmp_path / f"input{suffix}"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
    else:
        path.write_bytes(content)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        reader(path)
        outcome = "ok"
    except EngineError as exc:
        assert "\n" not in str(exc), f"{name}: a multi-line error: {exc}"
        outcome = "error"
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert time.perf_counter() - start < SECONDS, f"{name} took over {SECONDS} s"
    assert peak < PYTHON_BYTES, f"{name} allocated {peak / 2**20:.0f} MiB"
    return outcome


@pytest.mark.parametrize("name", list(READERS))
def test_reader_gives_a_parse_or_one_line_error(tmp_path_factory, name):
    tmp = tmp_path_factory.mktemp("fuzz")

    @given(READERS[name][2])
    def prop(content):
        check_reader(tmp, name, content)

    prop()


@given(json_values, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4))
def test_manifest_fuzz_opens_or_says_why(tmp_path_factory, replacement, flips):
    """A collection whose manifest has a key replaced by anything, or bytes flipped, opens or errs in one line."""
    import numpy as np

    from engine.core.collection import MANIFEST, Collection
    tmp = tmp_path_factory.mktemp("manifest")
    col = Collection.from_vectors("c", ["a", "b", "c"], np.eye(3, 4, dtype=np.float32), None, "text", root=tmp)
    manifest = json.loads((col.path / MANIFEST).read_text())
    key = sorted(manifest)[len(flips) % len(manifest)]
    manifest[key] = replacement
    data = _mutate(json.dumps(manifest, allow_nan=True).encode(), flips)
    (col.path / MANIFEST).write_bytes(data)
    try:
        opened = Collection.open("c", tmp)
        opened.hits(*opened.search_vectors(np.ones(4, np.float32), k=2))
    except EngineError as exc:
        assert "\n" not in str(exc)
