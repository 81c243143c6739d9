"""Hostile inputs a user may give (bad images, ids, queries, options, files) and the one-line error (or the
right result) each must get. The fake encoder keeps them fast; a test that needs the
model to stay unloaded says so through `fake_encoder["loads"]`."""
from __future__ import annotations

import json
import time
import zipfile

import numpy as np
import pytest
from PIL import Image

from engine.core.collection import MANIFEST, Collection
from engine.core.images import ImageReadError, load_image
from engine.errors import EngineError
from engine.eval.evaluate import evaluate_files
from engine.io.tables import read_queries, read_rows
from fixtures.hostile_images import png_claiming

GOOD_ROW = "ab,cd,ef,gh,ij,kl,mn,op,qr,st"


def texts_csv(path, n=6):
    path.write_text("id,text\n" + "".join(f"d{i},text number {i} about things\n" for i in range(n)))
    return path


def one_line(exc) -> str:
    text = str(exc.value if hasattr(exc, "value") else exc)
    assert "\n" not in text and "Traceback" not in text
    return text


# ---------------------------------------------------------------- memory and time blow-ups

def test_extreme_aspect_png_is_refused_before_decoding(tmp_path, fake_encoder):
    thin = tmp_path / "imgs" / "thin.png"
    thin.parent.mkdir()
    Image.new("RGB", (60000, 1), "white").save(thin)
    Image.new("RGB", (40, 30), "red").save(tmp_path / "imgs" / "ok.png")
    with pytest.raises(ImageReadError, match="aspect ratio 60,000:1"):
        load_image(thin)
    col = Collection.build("c", images=tmp_path / "imgs", root=tmp_path / "idx")
    assert col.ids == ["ok"] and "max_image_aspect" in col.manifest["skipped"][0]["reason"]
    with pytest.raises(EngineError, match="thin.png: .*aspect ratio"):
        col.search(image=str(thin))


def test_decompression_bomb_header_is_refused_before_decoding(tmp_path):
    bomb = png_claiming(tmp_path / "bomb.png", 100_000, 100_000)
    with pytest.raises(ImageReadError, match="10,000,000,000 pixels is over the limit"):
        load_image(bomb)


def test_zip_bomb_is_refused_by_ratio_and_by_size(tmp_path, monkeypatch):
    from engine.tasks.eventa.submission import parse_eventa_submission
    bomb = tmp_path / "submission.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("submission.csv", b"\0" * (20 << 20))
    problems = parse_eventa_submission(bomb).problems
    assert len(problems) == 1 and "max_zip_ratio" in str(problems[0])
    monkeypatch.setenv("ENGINE_MAX_ZIP_MEMBER_BYTES", "1000000")
    assert "max_zip_member_bytes" in str(parse_eventa_submission(bomb).problems[0])


def test_grade_1e300_with_ndcg_exp_is_refused_at_once(tmp_path):
    (tmp_path / "q.txt").write_text("q1 0 d1 1e300\n")
    (tmp_path / "r.txt").write_text("q1 Q0 d1 1 1.0 r\n")
    start = time.perf_counter()
    with pytest.raises(EngineError, match="q.txt:1: relevance 1e300 is beyond ±100") as exc:
        evaluate_files(tmp_path / "r.txt", tmp_path / "q.txt", "ndcg_exp@5")
    one_line(exc)
    assert time.perf_counter() - start < 30  # it never ended before


# ---------------------------------------------------------------- tracebacks

@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_deeply_nested_json_is_one_line(tmp_path, suffix):
    path = tmp_path / f"deep{suffix}"
    path.write_text('{"id": "a", "text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(EngineError, match="nested 100,001 levels deep is over the limit") as exc:
        read_rows(path)
    one_line(exc)


def test_deep_json_in_task_commands(run_cli, tmp_path, monkeypatch, capsys):
    deep = tmp_path / "judgments.json"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    for args in (["convert", "dsebench-qrels", deep, tmp_path / "q.txt"], ["convert", "dsebench-run", deep,
                 tmp_path / "r.txt"]):
        code, _, err = run_cli(*args)
        assert code == 2 and "max_json_depth" in err and "Traceback" not in err


def test_5001_digit_number_is_one_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": ' + "9" * 5001 + ', "text": "x"}\n')
    with pytest.raises(EngineError, match=r"t.jsonl:1: a number of 5001 characters .*max_number_chars") as exc:
        read_rows(path)
    one_line(exc)


def test_huge_grades_are_one_line_errors(run_cli, tmp_path, monkeypatch, capsys):
    from engine.tasks.dse.data import read_dsebench_judgments
    judg = tmp_path / "j.json"
    judg.write_text(json.dumps([{"case_id": "1", "candidate_dataset_id": "d", "query_rel": 2000, "target_sim": 2}]))
    with pytest.raises(EngineError, match="query_rel 2000"):
        read_dsebench_judgments(judg)
    (tmp_path / "q.txt").write_text("q1 0 d1 2000\n")
    (tmp_path / "r.txt").write_text("q1 Q0 d1 1 1.0 r\n")
    code, _, err = run_cli("eval", tmp_path / "r.txt", tmp_path / "q.txt", "--metrics",
                           "ndcg_exp@5")
    assert code == 2 and "relevance 2000 is beyond" in err and "Traceback" not in err


def _corrupt_zip(path):
    rows = "\n".join(f"q{i}," + GOOD_ROW for i in range(200))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("submission.csv", "query_id,image_id_1,image_id_2,image_id_3,image_id_4,image_id_5,image_id_6,"
                    "image_id_7,image_id_8,image_id_9,image_id_10\n" + rows + "\n")
    data = bytearray(path.read_bytes())
    for i in range(60, 120):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    return path


def test_corrupt_zip_member_is_one_line(run_cli, tmp_path, monkeypatch, capsys):
    sub = _corrupt_zip(tmp_path / "submission.zip")
    (tmp_path / "q.txt").write_text("q1 0 ab 1\n")
    for args in (["validate", "eventa", sub], ["eval", sub, tmp_path / "q.txt"]):
        code, out, err = run_cli(*args)
        assert code in (1, 2) and "damaged zip member" in out + err and "Traceback" not in out + err


def _recompute_checksums(folder):
    from engine.core.storage.store.generations import sha256
    m = json.loads((folder / MANIFEST).read_text())
    for name in m["files"]:
        m["files"][name] = {"bytes": (folder / name).stat().st_size, "sha256": sha256(folder / name)}
    (folder / MANIFEST).write_text(json.dumps(m))


def _vectors_collection(tmp_path, n=20):
    vecs = np.random.default_rng(0).normal(size=(n, 8)).astype(np.float32)
    return Collection.from_vectors("c", [f"i{k}" for k in range(n)], vecs, None, "text", root=tmp_path)


def test_truncated_index_with_recomputed_checksums(tmp_path):
    col = _vectors_collection(tmp_path)
    index = col.file("index")
    index.write_bytes(index.read_bytes()[:index.stat().st_size // 2])  # the header over the embeddings, or a whole file
    _recompute_checksums(col.path)
    with pytest.raises(EngineError, match="truncated|not a FAISS index") as exc:
        Collection.open("c", tmp_path)
    one_line(exc)


def test_short_items_file_with_recomputed_checksums(tmp_path):
    col = _vectors_collection(tmp_path)
    items = col.file("items")
    items.write_text("".join(items.read_text().splitlines(keepends=True)[:-3]))
    _recompute_checksums(col.path)
    with pytest.raises(EngineError, match=r"items-\d+\.jsonl is \d+ bytes, but its offsets end at \d+") as exc:
        Collection.open("c", tmp_path)
    one_line(exc)


# ---------------------------------------------------------------- silent wrong results

def test_unterminated_csv_quote_is_an_error_not_merged_rows(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('id,text\na,"hello\nb,world\nc,more\n')
    with pytest.raises(EngineError, match=r"t.csv:\d+: malformed CSV .*quote left open"):
        read_rows(path)


def test_nan_text_is_refused_and_json_output_is_valid(tmp_path):
    from engine.io.jsonio import dumps
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "text": NaN}\n')
    with pytest.raises(EngineError, match="t.jsonl:1: NaN is not valid JSON"):
        read_rows(path)
    assert json.loads(dumps({"score": float("nan"), "x": [float("inf")]})) == {"score": None, "x": [None]}


def test_nan_in_search_json_prints_null(tmp_path, monkeypatch, capsys):
    _vectors_collection(tmp_path)
    import engine.commands.collection as core_cli
    core_cli.print_json({"hits": [{"score": float("nan")}]})
    assert json.loads(capsys.readouterr().out) == {"hits": [{"score": None}]}


def test_dict_id_is_an_error(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": {"a": 1}, "text": "x"}\n')
    with pytest.raises(EngineError, match=r"q.jsonl:1: query id \{'a': 1\} is a dict"):
        read_queries(path)
    from engine.core.sources import text_items
    with pytest.raises(EngineError, match="is a dict; ids are strings or integers"):
        text_items(path)


def test_huge_single_token_text_warns_and_past_the_line_limit_errs(tmp_path, fake_encoder, monkeypatch, capsys):
    path = tmp_path / "t.csv"
    path.write_text("id,text\na," + "x" * 200_000 + "\nb,short\n")
    Collection.build("c", texts=path, root=tmp_path)
    assert "exceed the model's 256-token window" in " ".join(capsys.readouterr().err.split())
    monkeypatch.setenv("ENGINE_MAX_LINE_BYTES", "100000")
    with pytest.raises(EngineError, match="t.csv:2: a field is over the limit of 100,000 bytes"):
        read_rows(path)


def test_empty_metrics_option_is_an_error(run_cli, tmp_path, monkeypatch, capsys):
    (tmp_path / "q.txt").write_text("q1 0 d1 1\n")
    (tmp_path / "r.txt").write_text("q1 Q0 d1 1 1.0 r\n")
    code, _, err = run_cli("eval", tmp_path / "r.txt", tmp_path / "q.txt", "--metrics", "")
    assert code == 2 and "no metrics given" in err


def test_duplicate_keys_in_a_json_run_are_an_error(tmp_path):
    from engine.tasks.dse.data import read_json_run
    path = tmp_path / "run.json"
    path.write_text('{"1": {"d1": 0.5, "d1": 0.9}}')
    with pytest.raises(EngineError, match="key 'd1' appears twice"):
        read_json_run(path)


@pytest.mark.parametrize("k", ["0", "-1"])
def test_k_below_one_is_refused_before_anything_loads(run_cli, tmp_path, monkeypatch, capsys, k, fake_encoder):
    code, _, err = run_cli("search", "nothing", "query", "-k", k, "--root", tmp_path)
    assert code == 2 and "--top-k must be a whole number of at least 1" in err
    col = _vectors_collection(tmp_path)
    with pytest.raises(EngineError, match="at least 1"):
        col.search_vectors(np.ones(8, np.float32), k=int(k))


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_or_blank_query_is_refused(run_cli, tmp_path, monkeypatch, capsys, text, fake_encoder):
    code, _, err = run_cli("search", "nothing", text, "--root", tmp_path)
    assert code == 2 and "the text query is empty" in err
    Collection.build("c", texts=texts_csv(tmp_path / "t.csv"), root=tmp_path)
    with pytest.raises(EngineError, match="the text query is empty"):
        Collection.open("c", tmp_path).search(text=text)
    assert fake_encoder["text"] == 1  # the build's one batch; no query was encoded


def test_manifest_without_files_or_with_a_wrong_count(tmp_path):
    col = _vectors_collection(tmp_path)
    m = json.loads((col.path / MANIFEST).read_text())
    (col.path / MANIFEST).write_text(json.dumps({k: v for k, v in m.items() if k != "files"}))
    with pytest.raises(EngineError, match="lists no files to verify"):
        Collection.open("c", tmp_path)
    (col.path / MANIFEST).write_text(json.dumps({**m, "count": 25}))
    with pytest.raises(EngineError, match=r"shape \(20, 8\), but .* says count 25"):
        Collection.open("c", tmp_path)
    (col.path / MANIFEST).write_text(json.dumps({**m, "dim": "8"}))
    with pytest.raises(EngineError, match="'dim' is '8', expected int"):
        Collection.open("c", tmp_path)


# ---------------------------------------------------------------- late or missing checks

def test_invalid_index_factory_fails_before_the_model_loads(run_cli, tmp_path, fake_encoder, monkeypatch, capsys):
    code, _, err = run_cli("build", "c", "--texts", texts_csv(tmp_path / "t.csv"),
                           "--index", "IVF,Bogus", "--root", tmp_path)
    assert code == 2 and "FAISS cannot make index 'IVF,Bogus'" in err
    assert fake_encoder["loads"] == 0 and fake_encoder["text"] == 0


def test_ids_with_white_space_fail_at_build_or_are_replaced(run_cli, tmp_path, fake_encoder, monkeypatch, capsys):
    path = tmp_path / "t.csv"
    path.write_text("id,text\nIMG 001.jpg,a photo\nIMG_002,another\n")
    code, _, err = run_cli("build", "c", "--texts", path, "--root", tmp_path)
    assert code == 2 and "'IMG 001.jpg'" in err and "--id-policy replace" in err
    assert fake_encoder["loads"] == 0
    code, _, err = run_cli("build", "c", "--texts", path, "--root", tmp_path,
                           "--id-policy", "replace")
    assert code == 0 and Collection.open("c", tmp_path).ids == ["IMG_001.jpg", "IMG_002"]
    clash = tmp_path / "clash.csv"
    clash.write_text("id,text\na b,x\na_b,y\n")
    with pytest.raises(EngineError, match="duplicate id \\(after replacing white space\\) 'a_b'"):
        Collection.build("d", texts=clash, root=tmp_path, id_policy="replace")


def test_query_ids_with_white_space_fail_before_the_model_loads(run_cli, tmp_path, fake_encoder, monkeypatch, capsys):
    Collection.build("c", texts=texts_csv(tmp_path / "t.csv"), root=tmp_path)
    fake_encoder["loads"] = 0
    queries = tmp_path / "q.tsv"
    queries.write_text("q 1\tsome words\n")
    code, _, err = run_cli("search", "c", "--queries", queries, "--out", tmp_path / "r.txt",
                           "--root", tmp_path)
    assert code == 2 and "'q 1'" in err and fake_encoder["loads"] == 0


def test_eval_warns_with_counts_when_qrels_queries_are_missing(run_cli, tmp_path, monkeypatch, capsys):
    (tmp_path / "q.txt").write_text("".join(f"q{i} 0 d1 1\n" for i in range(79)))
    (tmp_path / "r.txt").write_text("".join(f"q{i} Q0 d1 1 1.0 r\n" for i in range(5)))
    code, _, err = run_cli("eval", tmp_path / "r.txt", tmp_path / "q.txt")
    assert code == 0 and "74 of 79 qrels queries are missing from the run" in " ".join(err.split())


def test_version_and_flags_in_help(run_cli, monkeypatch, capsys):
    from engine import __version__
    code, out, _ = run_cli("--version")
    assert code == 0 and out.strip() == f"engine {__version__}"
    code, out, _ = run_cli("build", "--help")
    line = next(ln for ln in out.splitlines() if "--force" in ln)
    assert "<bool>" not in line and "BOOLEAN" not in line
