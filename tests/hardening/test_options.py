"""Every numeric option has a declared range checked before any work, output paths are checked for
writability first, and each defect the campaign found (tracebacks, silent wrong results, a corrupted
collection) is one line now. Each test here failed on the main of before the fix."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import typer

from engine.core.collection import Collection
from engine.errors import EngineError


# ---------------------------------------------------------------- the option layer

def _numeric_options():
    """(command path, parameter name, {int} or {float}, the command's declared ranges) of every int/float option,
    and every --batch-size; read from the click parameter type's name, which every typer version (its own click
    or a vendored one) gives."""
    from engine.cli import app
    from engine.io.options import ranges_of
    root = typer.main.get_command(app)
    out = []

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        for p in getattr(command, "params", []):
            kind = getattr(p.type, "name", "")
            base = {int} if kind.startswith("int") else {float} if kind.startswith("float") else {str}
            if base & {int, float} or p.name == "batch_size":
                out.append((" ".join(path), p.name, base, ranges_of(command.callback)))
    walk(root, [])
    return out


def test_every_numeric_option_has_a_declared_range():
    from engine.io.options import UNCHECKED_COMMANDS
    options = _numeric_options()
    assert len(options) > 60  # the walk found the app's options
    missing = [f"{c} --{n}" for c, n, _, ranges in options if c.split(" ")[0] not in UNCHECKED_COMMANDS
               and n not in ranges]
    assert not missing, f"declare a range beside the option's declaration (a Range in its annotation) for: {missing}"


def test_every_declared_range_refuses_out_of_range_and_non_finite_values_in_one_line():
    from engine.io.options import UNCHECKED_COMMANDS, check_options
    for command, name, base, ranges in _numeric_options():
        if command.split(" ")[0] in UNCHECKED_COMMANDS:
            continue
        r = ranges[name]
        bads = ["nan", "inf", "-inf"] if float in base else []
        if r.lo is not None:
            below = int(r.lo) - 1 if r.integer else r.lo - 1
            bads.append(str(below - 1 if r.zero and below == 0 else below))  # 0 has its own meaning there
        if r.hi is not None:
            bads.append(str(int(r.hi) + 1) if r.integer else str(r.hi * 2 + 1))
        for bad in bads:
            value = bad if r.listed or name == "batch_size" else float(bad) if float in base else int(bad)
            with pytest.raises(EngineError) as exc:
                check_options(command, {name: value}, ranges)
            assert "\n" not in str(exc.value) and name in str(exc.value), (command, name, bad)


def _touch(tmp_path, name, text="x\n") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("args,message", [
    (["eventa", "submit", "--queries", "{f}", "--out", "{d}/s.zip", "--batch-size", "-1"],
     "--batch-size must be a whole number of at least 1, not -1"),
    (["eventa", "submit", "--queries", "{f}", "--out", "{d}/s.zip", "--batch-size", "0"], "--batch-size"),
    (["eventa", "eval", "--queries", "{f}", "--batch-size", "-1"], "--batch-size"),
    (["eventa", "eval", "--queries", "{f}", "--limit", "-1"], "--limit must be a whole number of at least 1"),
    (["eventa", "submit", "--queries", "{f}", "--out", "{d}/s.zip", "--dense-weight", "inf"], "--dense-weight"),
    (["mllm", "--dev-queries", "{f}", "--qrels", "{f}", "--temperature", "0"], "--temperature must be greater than 0"),
    (["mllm", "--dev-queries", "{f}", "--qrels", "{f}", "--k", "0"], "--k must be a whole number of at least 1"),
    (["mllm", "--dev-queries", "{f}", "--qrels", "{f}", "--cv", "--repeats", "0"], "--repeats"),
    (["lora", "build", "--train", "{f}", "--images", "{d}", "--text-weight", "nan"], "--text-weight"),
    (["lora", "build", "--train", "{f}", "--images", "{d}", "--batch-size", "0"], "--batch-size"),
    (["lora", "submit", "--queries", "{f}", "--out", "{d}/r.run", "--text-weight", "nan"], "--text-weight"),
    (["lora", "submit", "--queries", "{f}", "--out", "{d}/r.run", "--batch-size", "0"], "--batch-size"),
    (["compare", "{f}", "{f}", "{f}", "--seed", "-1"], "--seed must be a whole number of at least 0"),
    (["compare", "{f}", "{f}", "{f}", "--resamples", "100000000"], "--resamples must be at most 100000"),
    (["modelret-a", "--train", "{f}", "--sample", "-1"], "--sample"),
    (["build", "c", "--texts", "{f}", "--recall", "nan"], "--recall"),
    (["search", "c", "q", "--k-factor", "inf"], "--k-factor"),
])
def test_bad_option_values_are_one_line_before_any_work(run_cli, tmp_path, monkeypatch, capsys, args, message):
    f = _touch(tmp_path, "in.csv")
    args = [a.format(f=f, d=tmp_path) for a in args]
    code, out, err = run_cli(*args, "--root", tmp_path / "idx") if args[0] in (
        "build", "search") else run_cli(*args)
    assert code == 2 and message in err and "Traceback" not in err and err.count("\n") == 1, err
    assert not (tmp_path / "idx").exists() and not (tmp_path / "s.zip").exists()


@pytest.mark.parametrize("target", ["folder", "under_file", "read_only"])
def test_output_paths_are_checked_before_the_work(run_cli, tmp_path, monkeypatch, capsys, target):
    run = _touch(tmp_path, "a.run", "q1 Q0 d1 1 1.0 r\n")
    if target == "folder":
        out = tmp_path / "outdir"
        out.mkdir()
    elif target == "under_file":
        out = _touch(tmp_path, "plain") / "fused.run"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        out = folder / "fused.run"
    code, _, err = run_cli("fuse", run, run, "--out", out)
    assert code == 2 and "Traceback" not in err and str(out) in err and err.count("\n") == 1, err


def test_atomic_writes_name_a_bad_target_in_one_line(tmp_path):
    from engine.io.atomic import write_json
    (tmp_path / "d").mkdir()
    with pytest.raises(EngineError, match="is a folder"):
        write_json(tmp_path / "d", {})
    _touch(tmp_path, "f")
    with pytest.raises(EngineError, match="is a file, not a folder"):
        write_json(tmp_path / "f" / "x.json", {})


# ---------------------------------------------------------------- defects, one by one

def test_ray_build_gets_an_integer_batch_size(monkeypatch):
    """`engine build --texts F --ray` passed the CLI's "32" to Ray Data's map_batches (TypeError)."""
    import engine.core.storage.builder.ray_encode as ray_encode
    from engine.core.storage.builder.options import BuildOptions
    from engine.core.sources import Item
    seen = []

    class Data:
        def map_batches(self, fn, **kwargs):
            seen.append(kwargs["batch_size"])
            return self

        def iter_batches(self, **kwargs):
            return iter(())

    class FakeRay:
        put = staticmethod(lambda obj: obj)

        class data:
            ActorPoolStrategy = staticmethod(lambda size: size)
            from_items = staticmethod(lambda rows, override_num_blocks: Data())
            from_arrow = staticmethod(lambda tables: Data())
            from_arrow_refs = staticmethod(lambda refs: Data())

    monkeypatch.setattr(ray_encode, "import_ray", lambda: FakeRay)
    monkeypatch.setattr(ray_encode, "cluster_resources", lambda: (2, 0))
    monkeypatch.setitem(__import__("sys").modules, "ray", type("M", (), {"cloudpickle": None}))

    class Enc:
        spec, dim, info = "fake", 4, {}
    items = [Item(f"t{i}", f"text {i}") for i in range(3)]
    list(ray_encode.encode_on_ray(Enc(), "text", items, [0], BuildOptions(batch_size="32")))
    assert seen == [32] and all(type(b) is int for b in seen)


def test_the_store_refuses_a_non_finite_number_in_a_manifest(tmp_path):
    from engine.core.storage.store.generations import commit
    with pytest.raises(EngineError, match="text_weight"):
        commit(tmp_path / "c", {"config": {"text_weight": float("nan")}}, {})
    assert not (tmp_path / "c" / "manifest.json").exists()
    vecs = np.ones((3, 4), np.float32)
    with pytest.raises(EngineError, match="not a finite number"):
        Collection.from_vectors("c", ["a", "b", "c"], vecs, None, "text", root=tmp_path,
                                extra={"weight": float("inf")})
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_lora_config_refuses_a_nan_text_weight():
    from engine.tasks.lora.model import LoraConfig
    with pytest.raises(EngineError, match="finite"):
        LoraConfig(text_weight=float("nan")).check()


def test_a_build_names_the_collection_of_another_kind_it_replaces(run_cli, tmp_path, monkeypatch, capsys, fake_encoder):
    Collection.from_vectors("c", ["a", "b"], np.eye(2, 8, dtype=np.float32), None, "image", root=tmp_path)
    src = _touch(tmp_path, "t.csv", "id,text\nx,some words\ny,other words\n")
    code, _, err = run_cli("build", "c", "--texts", src, "--root", tmp_path)
    assert code == 2 and "already exists" in err
    code, _, err = run_cli("build", "c", "--texts", src, "--root", tmp_path, "--force", "-q")
    assert code == 0 and "replacing 'c'" in err and "kind 'image'" in err and "kind 'text'" in err, err


def test_lora_build_over_a_plain_collection_names_it(tmp_path):
    from engine.tasks.lora.pipeline import build_adapter
    Collection.from_vectors("lora", ["a", "b"], np.eye(2, 8, dtype=np.float32), None, "text", root=tmp_path)
    with pytest.raises(EngineError, match="is a collection of kind 'text', not a LoRA adapter; replace it with"):
        build_adapter(tmp_path / "train.csv", tmp_path, name="lora", root=tmp_path)


def test_dsebench_judgments_refuse_null_ids_and_grades_over_two(tmp_path):
    from engine.tasks.dse.data import read_dsebench_judgments
    rec = {"case_id": "1", "candidate_dataset_id": "d1", "query_rel": 1, "target_sim": 2}
    for bad, message in (({"case_id": None}, "case_id is null"), ({"query_rel": 7}, "from 0 to 2"),
                         ({"candidate_dataset_id": "d 1"}, "white space"), ({"case_id": {"o": 1}}, "dict")):
        path = tmp_path / "j.json"
        path.write_text(json.dumps([{**rec, **bad}]))
        with pytest.raises(EngineError, match=message):
            read_dsebench_judgments(path)


def test_ntcir_groups_refuse_a_tab_inside_an_id(tmp_path):
    from engine.tasks.model_ranking.data import read_ntcir_a_groups
    path = _touch(tmp_path, "tasks.csv", 'task_id,task_criticalness\n"t\t1",high\n')
    with pytest.raises(EngineError, match="white space"):
        read_ntcir_a_groups(path)


def test_llm_ids_with_white_space_are_refused_not_cut(tmp_path):
    from engine.io.ids import read_id_list
    path = _touch(tmp_path, "llm_ids.txt", "good\nbad id\n")
    with pytest.raises(EngineError, match=r"llm_ids.txt:2: id 'bad id' holds white space"):
        read_id_list(path, unique=True, whole_line=True)


def test_dse_object_title_is_an_error_not_its_python_spelling(tmp_path):
    from engine.tasks.dse.data import read_datasets
    path = tmp_path / "datasets.json"
    path.write_text(json.dumps([{"id": "d1", "title": {"o": 1}, "description": "x"}]))
    with pytest.raises(EngineError, match="record 1 .d1.: title: dict"):
        read_datasets(path)


def test_eventa_object_content_is_an_error(tmp_path):
    from engine.tasks.eventa.data import read_database
    path = tmp_path / "database.json"
    path.write_text(json.dumps({"a1": {"title": "T", "content": {"o": 1}, "images": ["i1"]}}))
    with pytest.raises(EngineError, match="content"):
        read_database(path)


def test_a_flipped_byte_in_the_items_file_is_one_line(tmp_path, monkeypatch, capsys):
    col = Collection.from_vectors("c", ["a1", "b2"], np.eye(2, 8, dtype=np.float32), None, "text", root=tmp_path)
    items = col.file("items")
    items.write_bytes(items.read_bytes().replace(b'"id"', b'"ie"', 1))
    col = Collection.open("c", tmp_path)
    with pytest.raises(EngineError, match="damaged"):
        col.hits(*col.search_vectors(np.eye(1, 8, dtype=np.float32), 2))
    with pytest.raises(EngineError, match="damaged"):
        Collection.open("c", tmp_path).ids


def test_query_texts_are_cut_to_the_documented_bound():
    from engine.io.limits import limit, truncate_query
    text = "word " * 200_000
    cut = truncate_query(text)
    assert len(cut) <= limit("max_query_chars") and text.startswith(cut) and truncate_query("short") == "short"


def test_missing_extra_prints_the_extra_verbatim(run_cli, monkeypatch, capsys):
    import engine.commands.collection as core_cli
    from engine.errors import missing_extra

    def boom() -> None:
        raise missing_extra("fastapi, uvicorn and python-multipart", "serve")
    monkeypatch.setattr(core_cli, "list_cmd", boom)
    code, _, err = run_cli("list")
    assert code == 2 and "pip install 'engine[serve]'" in err and 'pip install -e ".[serve]"' in err
    assert "are not installed" in err


def test_eventa_queries_with_an_image_index_column(tmp_path):
    from engine.io.tables import read_queries
    from engine.tasks.eventa.data import LABEL_ID_COLUMNS
    path = _touch(tmp_path, "q.csv", "image_index,caption\n7,a storm at sea\n")
    assert read_queries(path, id_columns=LABEL_ID_COLUMNS) == [("7", "a storm at sea")]
    path = _touch(tmp_path, "q2.csv", "idx,caption\n7,a storm at sea\n")
    assert read_queries(path, id_column="idx") == [("7", "a storm at sea")]


def test_eventa_submit_has_the_id_column_option_its_message_promises(run_cli, monkeypatch, capsys):
    code, out, _ = run_cli("eventa", "submit", "--help")
    assert code == 0 and "--id-column" in out and "--text-column" in out


def test_index_auto_on_a_few_hundred_vectors_is_flat(tmp_path):
    x = np.random.default_rng(0).normal(size=(390, 16)).astype(np.float32)
    col = Collection.from_vectors("a", [str(i) for i in range(390)], x, None, "image", root=tmp_path, index="auto",
                                  queries=x[:50] + 0.01)
    assert col.manifest["index_factory"] == "Flat"


def test_build_progress_moves_within_a_chunk():
    from engine.core.storage.builder.chunks import encode_local
    from engine.core.storage.builder.options import BuildOptions
    from engine.core.sources import Item

    class Enc:
        def encode_texts(self, texts, batch_size):
            return np.ones((len(texts), 4), np.float32)
    ticks = []
    items = [Item(f"t{i}", "x") for i in range(1000)]
    [(c, data)] = encode_local(Enc(), "text", items, [0], BuildOptions(batch_size=8, chunk_size=1024),
                               lambda c, n: ticks.append(n))
    assert len(ticks) >= 3 and sum(ticks) == 1000 and data["emb"].shape == (1000, 4)
    assert data["ok"].tolist() == list(range(1000))


def test_transfer_params_never_read_zero_as_default():
    from engine.tasks.model_ranking.transfer import TransferParams, TransferOptions
    for bad in ({"temperature": 0.0}, {"k": 0}, {"temperature": math.inf}):
        with pytest.raises(EngineError):
            TransferOptions(**bad).grid(100)
        with pytest.raises(EngineError):
            TransferOptions(**bad).fixed(TransferParams())
