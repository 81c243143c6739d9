"""Hostile inputs through every command, as a user would type them, and the tally of what each got.

Each input runs `engine …` (the fake encoder of tests/conftest.py, so no model is needed) in a process of its
own, capped at --memory GiB of address space and --timeout seconds, and is classed as

    clear error   exit 2 (or 1 from `validate`) with one `error:` line or a list of problems, no traceback
    handled       exit 0 on an input that is valid, however odd (a CMYK JPEG, a PNG named .jpg)
    traceback     a Python traceback on stderr
    silent        exit 0 on an input that is wrong (a result where an error was due)
    blow-up       killed by the memory cap, or past the time limit

and its peak resident memory (ru_maxrss) is kept, so the worst hostile image's can be read off the JSON.

    python benchmarks/hostile_inputs.py [--out benchmarks/results/hostile_inputs.json] [--memory 3] [--timeout 60]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]
WRITER = REPO / "tests" / "hardening" / "writer.py"

ERROR, OK = "error", "ok"
EVENTA_HEAD = "query_id," + ",".join(f"image_id_{i}" for i in range(1, 11))


def run(args: list[str], memory_gib: float, timeout: float) -> dict:
    """One command in a capped child; its outcome, seconds and peak RSS."""
    def cap() -> None:
        limit = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200", FAKE_ENCODER_REPORT_RSS="1")
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(WRITER), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=cap)  # noqa: PLW1509 (no threads here)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    rss = [int(line.split("=")[1]) for line in err.splitlines() if line.startswith("PEAK_RSS_KIB=")]
    err = "\n".join(line for line in err.splitlines() if not line.startswith("PEAK_RSS_KIB="))
    return {"rc": proc.returncode, "out": out, "err": err, "seconds": time.perf_counter() - start,
            "timed_out": timed_out, "rss_kib": rss[0] if rss else None}


def classify(expect: str, res: dict) -> str:
    err = res["err"]
    if res["timed_out"] or "MemoryError" in err or res["rc"] in (-9, 137) or "Cannot allocate memory" in err:
        return "blow-up"
    if "Traceback" in err:
        return "traceback"
    if res["rc"] == 0:
        return "handled" if expect == OK else "silent"
    if res["rc"] == 2 and err.count("error:") == 1:
        return "clear error" if expect == ERROR else "refused valid input"
    if res["rc"] == 1 and ("problem" in res["out"] + err or ":" in res["out"]):
        return "clear error" if expect == ERROR else "refused valid input"
    return "other"


# ---------------------------------------------------------------- the corpus

def _zip(members: dict[str, bytes], level: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=level) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def corpus(work: Path) -> list[tuple[str, str, str, list]]:
    """(group, name, expected, args) for every input; files are written under `work`."""
    from hardening.test_hostile_images import EXPECT as IMAGE_EXPECT
    from fixtures.hostile_images import SUFFIX, make

    w = work
    cases: list[tuple[str, str, str, list]] = []
    good_run, good_qrels = w / "run.txt", w / "qrels.txt"
    good_run.write_text("q1 Q0 d1 1 1.0 r\nq1 Q0 d2 2 0.5 r\n")
    good_qrels.write_text("q1 0 d1 1\nq1 0 d2 0\n")

    def file(name: str, content: str | bytes) -> Path:
        p = w / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
        return p

    runs = {
        "empty": "", "blank lines": "\n\n", "five fields": "q1 Q0 d1 1 1.0\n", "qrels given as run": "q1 0 d1 1\n",
        "score NaN": "q1 Q0 d1 1 NaN r\n", "score inf": "q1 Q0 d1 1 inf r\n", "score text": "q1 Q0 d1 1 high r\n",
        "score 1e300": "q1 Q0 d1 1 1e300 r\n", "score 5001 digits": "q1 Q0 d1 1 " + "9" * 5001 + " r\n",
        "duplicate doc": "q1 Q0 d1 1 1 r\nq1 Q0 d1 2 0.5 r\n", "binary": b"\x00\xff\xfe" * 100,
        "latin-1": "q1 Q0 d\xe9 1 1 r\n".encode("latin-1"), "NUL in id": "q1 Q0 d\x001 1 1 r\n",
        "20 MB line": "q1 Q0 " + "d" * (20 << 20) + " 1 1 r\n",
    }
    for name, content in runs.items():
        cases.append(("trec run", name, ERROR, ["eval", file(f"run-{len(cases)}.txt", content), good_qrels]))
    qrels = {
        "empty": "", "grade 1.5": "q1 0 d1 1.5\n", "grade 1e300": "q1 0 d1 1e300\n", "grade 2000": "q1 0 d1 2000\n",
        "grade NaN": "q1 0 d1 NaN\n", "grade 5001 digits": "q1 0 d1 " + "9" * 5001 + "\n",
        "judged twice": "q1 0 d1 1\nq1 0 d1 2\n", "run given as qrels": "q1 Q0 d1 1 1.0 r\n",
    }
    for name, content in qrels.items():
        for metrics in ("ndcg@10", "ndcg_exp@5"):
            cases.append(("qrels", f"{name} ({metrics})", ERROR,
                          ["eval", good_run, file(f"qrels-{len(cases)}.txt", content), "--metrics", metrics]))
    cases.append(("eval options", "--metrics ''", ERROR, ["eval", good_run, good_qrels, "--metrics", ""]))
    cases.append(("eval options", "--metrics bogus", ERROR, ["eval", good_run, good_qrels, "--metrics", "bogus@x"]))
    cases.append(("eval options", "74 of 79 queries missing (warned)", OK,
                  ["eval", file("run-few.txt", "".join(f"q{i} Q0 d1 1 1 r\n" for i in range(5))),
                   file("qrels-many.txt", "".join(f"q{i} 0 d1 1\n" for i in range(79)))]))
    cases.append(("eval options", "valid run", OK, ["eval", good_run, good_qrels, "--json"]))

    subs = {
        "zip bomb 1 GB of zeros": _zip({"submission.csv": b"\0" * (1 << 30)}),
        "corrupt member": None, "not a zip": b"PK\x03\x04garbage", "empty zip": _zip({}),
        "two members": _zip({"submission.csv": EVENTA_HEAD.encode(), "x.txt": b"x"}),
        "stored, CR in line": _zip({"submission.csv": (EVENTA_HEAD + "\nq1\r,a\n").encode()}, zipfile.ZIP_STORED),
    }
    rows = EVENTA_HEAD + "\n" + "".join(f"q{i}," + ",".join(f"i{j}" for j in range(10)) + "\n" for i in range(300))
    good_zip = bytearray(_zip({"submission.csv": rows.encode()}))
    for i in range(60, 140):
        good_zip[i] ^= 0x5A
    subs["corrupt member"] = bytes(good_zip)
    for name, content in subs.items():
        z = file(f"sub-{len(cases)}.zip", content)
        cases.append(("eventa zip", f"validate: {name}", ERROR, ["validate", "eventa", z]))
        cases.append(("eventa zip", f"eval: {name}", ERROR, ["eval", z, good_qrels]))
    csvs = {
        "unterminated quote": 'id,text\na,"hello\nb,world\n', "NUL in an id": "id,text\na\x00b,c\n",
        "dict id (jsonl)": None, "NaN text (jsonl)": None, "5001-digit id (jsonl)": None, "deep JSON (json)": None,
        "duplicate header": "id,id\na,b\n", "no id column": "name,text\na,b\n", "empty file": "",
        "ids with spaces": "id,text\nIMG 001.jpg,a photo\n", "empty id": "id,text\n,text\n",
        "too many fields": "id,text\na,b,c\n", "latin-1": "id,text\na,caf\xe9\n".encode("latin-1"),
        "20 MB single token": "id,text\na," + "x" * (20 << 20) + "\n", "duplicate ids": "id,text\na,x\na,y\n",
    }
    special = {"dict id (jsonl)": ("jsonl", '{"id": {"a": 1}, "text": "x"}\n'),
               "NaN text (jsonl)": ("jsonl", '{"id": "a", "text": NaN}\n'),
               "5001-digit id (jsonl)": ("jsonl", '{"id": ' + "9" * 5001 + ', "text": "x"}\n'),
               "deep JSON (json)": ("json", "[" * 100000 + "]" * 100000)}
    for name, content in csvs.items():
        suffix, content = special.get(name, ("csv", content))
        t = file(f"texts-{len(cases)}.{suffix}", content)
        cases.append(("build --texts", name, ERROR, ["build", f"c{len(cases)}", "--texts", t, "--root", w / "idx"]))
    for name, content in {"NUL in a text": "id,text\na,b\x00c\n", "quoted newlines": 'id,text\na,"two\nlines"\n',
                          "BOM and CRLF": "\ufeffid,text\r\na,b\r\n", "integer ids (jsonl)": '{"id": 7, "text": "x"}\n',
                          "list text (jsonl)": '{"id": "a", "text": ["x", "y"]}\n'}.items():
        t = file(f"texts-{len(cases)}.{'jsonl' if 'jsonl' in name else 'csv'}", content)
        cases.append(("build --texts", name, OK, ["build", f"c{len(cases)}", "--texts", t, "--root", w / "idx"]))
    good_texts = file("texts-good.csv", "id,text\n" + "".join(f"d{i},text {i}\n" for i in range(20)))
    for name, extra in {"--index bogus": ["--index", "IVF,Bogus"], "--id-policy bogus": ["--id-policy", "x"],
                        "--chunk-size 0": ["--chunk-size", "0"], "--batch-size -1": ["--batch-size", "-1"]}.items():
        cases.append(("build options", name, ERROR, ["build", f"c{len(cases)}", "--texts", good_texts, "--root",
                                                     w / "idx", *extra]))
    cases.append(("build options", "ids with spaces, --id-policy replace", OK,
                  ["build", "spaces", "--texts", file("sp.csv", "id,text\nIMG 001.jpg,a photo\n"), "--root",
                   w / "idx", "--id-policy", "replace"]))

    # images: each hostile image in a folder beside a good one (skipped and listed = handled), and as a query
    imgs = w / "images"
    imgs.mkdir()
    from PIL import Image
    Image.new("RGB", (32, 32), "red").save(imgs / "good.png")
    subprocess.run([sys.executable, str(WRITER), "build", "pics", "--images", str(imgs), "--root", str(w / "idx"),
                    "-q"], check=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    for kind, want in IMAGE_EXPECT.items():
        folder = w / f"imgdir-{kind}"
        folder.mkdir()
        shutil.copy(imgs / "good.png", folder / "good.png")
        path = make(kind, folder / f"hostile{SUFFIX.get(kind, '.png')}")
        cases.append(("build --images", kind, OK, ["build", f"img-{kind}", "--images", folder, "--root", w / "idx"]))
        cases.append(("search --image", kind, OK if isinstance(want, tuple) else ERROR,
                      ["search", "pics", "--image", path, "--root", w / "idx", "--json"]))

    subprocess.run([sys.executable, str(WRITER), "build", "docs", "--texts", str(good_texts), "--root",
                    str(w / "idx"), "-q"], check=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    for name, args in {"-k 0": ["-k", "0", "text"], "-k -1": ["-k", "-1", "text"], "empty query": [""],
                       "blank query": ["   "], "no query": [],
                       "query ids with spaces": ["--queries", file("q.tsv", "q 1\tsome words\n"), "--out", w / "o"],
                       "--out without --queries": ["text", "--out", w / "o"],
                       "run id with a space": ["--queries", file("q2.tsv", "q1\twords\n"), "--out", w / "o",
                                               "--run-id", "my run"]}.items():
        cases.append(("search", name, ERROR, ["search", "docs", *args, "--root", w / "idx"]))
    cases.append(("search", "a 100 KB query", OK, ["search", "docs", "x" * 100_000, "--root", w / "idx"]))

    # damaged collections (checksums recomputed after the damage, so only structure can tell)
    for name in ("truncated index", "short items", "wrong count", "no files section", "dim as text",
                 "manifest not JSON", "manifest deep JSON", "manifest NaN count", "embeddings header damaged",
                 "index missing", "roles not a dict"):
        cases.append(("damaged collection", name, ERROR, ["info", damage(w, name), "--root", w / "idx"]))

    judg = {"deep JSON": "[" * 50000 + "]" * 50000, "5001-digit grade": '[{"case_id": 1, "candidate_dataset_id": 2, '
            '"query_rel": ' + "9" * 5001 + ', "target_sim": 1}]', "grade 2000": '[{"case_id": "1", '
            '"candidate_dataset_id": "d", "query_rel": 2000, "target_sim": 2}]', "not a list": '{"a": 1}',
            "NaN grade": '[{"case_id": "1", "candidate_dataset_id": "d", "query_rel": NaN, "target_sim": 1}]'}
    for name, content in judg.items():
        cases.append(("convert dsebench-qrels", name, ERROR,
                      ["convert", "dsebench-qrels", file(f"j-{len(cases)}.json", content), w / "out.txt"]))
    jruns = {"deep JSON": "{" + '"a":{' * 5000 + "}" * 5001, "duplicate keys": '{"1": {"d1": 0.5, "d1": 0.9}}',
             "score 1e400": '{"1": {"d1": 1e400}}', "score NaN": '{"1": {"d1": NaN}}', "dict score": '{"1": {"d": {}}}',
             "doc id with space": '{"1": {"d 1": 0.5}}'}
    for name, content in jruns.items():
        cases.append(("convert dsebench-run", name, ERROR,
                      ["convert", "dsebench-run", file(f"jr-{len(cases)}.json", content), w / "out.txt"]))
    ntcir = {"unterminated quote": 'task_id,model_id,score\n"t1,m1,0.5\n', "NaN score": "task_id,m1\nt1,NaN\n",
             "empty": "", "no task column": "x,y\n1,2\n"}
    for name, content in ntcir.items():
        cases.append(("convert ntcir-a-qrels", name, ERROR,
                      ["convert", "ntcir-a-qrels", file(f"gt-{len(cases)}.csv", content), w / "out.txt"]))
    cases.append(("cli", "--version", OK, ["--version"]))
    return cases + task_file_cases(w, file) + surface_cases(w, file)


def task_file_cases(w: Path, file) -> list[tuple[str, str, str, list]]:
    """Task files and output paths (the option values run in-process: `option_cases`)."""
    cases: list[tuple[str, str, str, list]] = []
    good_run = w / "run.txt"
    folder = w / "a-folder"
    folder.mkdir(exist_ok=True)
    plain = file("plain-file", "x")
    for name, out in (("out is a folder", folder), ("out under a file", plain / "x.run"),
                      ("out in a missing folder (created)", w / "new" / "fused.run")):
        cases.append(("output paths", f"fuse: {name}", OK if "created" in name else ERROR,
                      ["fuse", good_run, good_run, "--out", out]))
        cases.append(("output paths", f"convert dsebench-run: {name}", OK if "created" in name else ERROR,
                      ["convert", "dsebench-run", file("ok-run.json", '{"1": {"d1": 0.5}}'), out]))
    judgment = {"case_id": "1", "candidate_dataset_id": "d1", "query_rel": 1, "target_sim": 2}
    for name, change in (("null case id", {"case_id": None}), ("grade 7", {"query_rel": 7}),
                         ("object case id", {"case_id": {"o": 1}}), ("tab in candidate", {"candidate_dataset_id": "d\t1"}),
                         ("valid", {})):
        cases.append(("convert dsebench-qrels", f"dsebench judgments: {name}", OK if name == "valid" else ERROR,
                      ["convert", "dsebench-qrels", file(f"j21-{len(cases)}.json", json.dumps([{**judgment, **change}])),
                       w / "q.txt"]))
    for name, content in (("tab inside an id", 'task_id,task_criticalness\n"t\t1",high\n'),
                          ("space inside an id", "task_id,task_criticalness\nt 1,high\n"),
                          ("valid", "task_id,task_criticalness\nt1,high\n")):
        cases.append(("convert ntcir-a-groups", name, OK if name == "valid" else ERROR,
                      ["convert", "ntcir-a-groups", file(f"tasks-{len(cases)}.csv", content), w / "g.tsv"]))
    datasets = file("datasets-obj.json", json.dumps([{"id": "d1", "title": {"o": 1}, "description": "x"}]))
    cases.append(("dse build", "object-valued title", ERROR, ["dse", "build", "--datasets", datasets,
                                                              "--root", w / "idx21"]))
    database = file("db-obj.json", json.dumps({"a1": {"title": "T", "content": {"o": 1}, "images": ["i1"]}}))
    (w / "ev-images").mkdir(exist_ok=True)
    cases.append(("eventa build", "object content", ERROR, ["eventa", "build", "--database", database, "--images",
                                                           w / "ev-images", "--root", w / "idx21"]))
    llm = file("llm_ids.txt", "good\nbad id\n")
    dev = file("dev.tsv", "q1\twhat is love\nq2\twhat is life\n")
    dq = file("dev.qrels", "q1 0 good 1\nq2 0 good 1\n")
    cases.append(("mllm", "--llm-ids with 'bad id'", ERROR, ["mllm", "--dev-queries", dev, "--qrels", dq,
                                                             "--llm-ids", llm, "--cv", "--root", w / "idx21"]))
    col = "flip"
    from conftest import install_fake_encoder  # tests/conftest.py: the children's fake encoder

    from engine.core.collection import Collection
    install_fake_encoder()  # this process builds with it too
    c = Collection.build(col, texts=file("flip.csv", "id,text\na1,one text\nb2,another text\n"), root=w / "idx21")
    c.file("items").write_bytes(c.file("items").read_bytes().replace(b'"id"', b'"ie"', 1))
    cases.append(("search", "items file with one flipped byte", ERROR, ["search", col, "words", "--root",
                                                                        w / "idx21"]))
    return cases


def npy_bytes(shape: tuple, data: bytes, descr: str = "<f4") -> bytes:
    """A .npy file whose header says `shape` over `data` (which may not match it)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + data


def surface_cases(w: Path, file) -> list[tuple[str, str, str, list]]:
    """The last wave's surfaces (output targets, --vectors/--ids/--meta, --where, delete/--add/--sync, text
    that is not UTF-8, modes and rerankers on the wrong collection, EVENTA scoring)."""
    from conftest import install_fake_encoder  # tests/conftest.py: the children's fake encoder
    from PIL import Image

    from engine.core.collection import Collection
    install_fake_encoder()
    cases: list[tuple[str, str, str, list]] = []
    idx = w / "idx33"
    texts = file("s33.csv", "id,text,year\n" + "".join(f"d{i},text {i} about bread,{2015 + i}\n" for i in range(8)))
    Collection.build("t", texts=texts, root=idx, bm25=True)
    (w / "img33").mkdir(exist_ok=True)
    for n in range(3):
        Image.new("RGB", (24, 24), (80 * n, 20, 20)).save(w / "img33" / f"p{n}.png")
    Collection.build("im", images=w / "img33", root=idx, model="fake-image")
    queries = file("q33.tsv", "q1\tbread\nq2\ttext 3\n")
    good_run = w / "run.txt"
    special = []
    if os.path.exists("/dev/null"):
        link = w / "null-link"
        if not link.is_symlink():
            link.symlink_to("/dev/null")
        special.append(("a link to /dev/null", link))
    fifo = w / "pipe33"
    if not fifo.exists():
        os.mkfifo(fifo)
    special.append(("a named pipe", fifo))
    for name, target in special:
        cases.append(("output targets", f"search --out {name}", ERROR,
                      ["search", "t", "--queries", queries, "--out", target, "--root", idx]))
        cases.append(("output targets", f"fuse --out {name}", ERROR, ["fuse", good_run, good_run, "--out", target]))
    for name, root in (("--root at a file", texts), ("--root at /dev/full", "/dev/full"),
                       ("--root in /proc", "/proc/self")):
        if os.path.exists(str(root)):
            cases.append(("output targets", f"build {name}", ERROR, ["build", "x", "--texts", texts, "--root", root]))
            cases.append(("output targets", f"delete {name}", ERROR,
                          ["delete", "x", "--ids", file("del0.txt", "d1\n"), "--root", root]))
    if os.path.isdir("/proc/self"):
        cases.append(("output targets", "search --out in /proc", ERROR,
                      ["search", "t", "--queries", queries, "--out", "/proc/self/x.run", "--root", idx]))
        cases.append(("output targets", "rerank train --out in /proc", ERROR,
                      ["rerank", "train", "--pairs", file("pairs33.csv", "query,document\na,b\n"), "--base",
                       "all-MiniLM-L6-v2", "--out", "/proc/self/ce"]))
        cases.append(("output targets", "adapt --out in /proc", ERROR,
                      ["adapt", "--pairs", w / "pairs33.csv", "--base", "conse", "--out", "/proc/self/ad"]))
        cases.append(("output targets", "fuse --out in /proc", ERROR,
                      ["fuse", good_run, good_run, "--out", "/proc/self/f.run"]))
    cases.append(("output targets", "fuse --out a new file", OK, ["fuse", good_run, good_run, "--out", w / "f33.run"]))

    rng = np.random.default_rng(0)
    good = rng.standard_normal((6, 16)).astype(np.float32)

    def vec(name: str, content: bytes, expect: str, *extra) -> None:
        cases.append(("--vectors", name, expect, ["build", f"v{len(cases)}", "--vectors", file(f"v{len(cases)}.npy",
                                                                                             content),
                                                  "--root", idx, *extra]))

    def saved(x: np.ndarray) -> bytes:
        buf = io.BytesIO()
        np.save(buf, x)
        return buf.getvalue()

    for name, value in (("NaN", np.nan), ("+inf", np.inf), ("-inf", -np.inf)):
        x = good.copy()
        x[3, 5] = value
        vec(f"a {name} value", saved(x), ERROR)
    for scale in (1e30, 1e-30, 1e-44, 1e38):
        vec(f"values near {scale:g}", saved((good * scale).astype(np.float32)), OK)
    x = good.copy()
    x[2] = 0
    vec("an all-zero row (warned)", saved(x), OK)
    vec("header: fewer rows than the data", npy_bytes((3, 16), good.tobytes()), ERROR)
    vec("header: fewer columns than the data", npy_bytes((6, 8), good.tobytes()), ERROR)
    vec("header: negative rows", npy_bytes((-6, 16), good.tobytes()), ERROR)
    vec("header: more rows than the data", npy_bytes((60, 16), good.tobytes()), ERROR)
    vec("float64", saved(good.astype(np.float64)), ERROR)
    vec("3-D", saved(good.reshape(2, 3, 16)), ERROR)
    vec("no rows", saved(np.zeros((0, 16), np.float32)), ERROR)
    vec("not a .npy", b"hello", ERROR)
    vec("8-d under a 16-d --encoder", saved(good[:, :8].copy()), ERROR, "--encoder", "minilm")
    vec("16-d under a 16-d --encoder", saved(good), OK, "--encoder", "minilm")
    vec("float16", saved(good.astype(np.float16)), OK)

    gv = file("good33.npy", saved(good))

    six = [f"x{i}" for i in range(6)]
    for name, lines, expect, policy in (
            ("an id with a space (strict)", six[:2] + ["has space"] + six[3:], ERROR, "strict"),
            ("an id with a space (replace)", six[:2] + ["has space"] + six[3:], OK, "replace"),
            ("an id with a tab (strict)", six[:2] + ["a\tb"] + six[3:], ERROR, "strict"),
            ("an id with a tab (replace)", six[:2] + ["a\tb"] + six[3:], OK, "replace"),
            ("ids with surrounding white space", [f"  {i}\t" for i in six], OK, "strict"),
            ("a repeated id", six[:5] + ["x0"], ERROR, "strict"),
            ("five ids for six vectors", six[:5], ERROR, "strict"),
            ("'a b' and 'a_b' under replace", six[:4] + ["a b", "a_b"], ERROR, "replace")):
        cases.append(("--ids / --meta", name, expect, ["build", f"i{len(cases)}", "--vectors", gv, "--root", idx,
                                                      "--ids", file(f"ids{len(cases)}.txt", "\n".join(lines) + "\n"),
                                                      "--id-policy", policy]))
    good_row = '{"t": "ok"}'
    for name, row, expect in (("NaN", '{"s": NaN}', ERROR), ("a repeated key", '{"a": 1, "a": 2}', ERROR),
                              ("200-deep nesting", '{"a": ' + "[" * 200 + "]" * 200 + "}", ERROR),
                              ("a 500-digit number", '{"n": ' + "9" * 500 + "}", ERROR),
                              ("bytes that are not UTF-8", b'{"t": "\xff"}', ERROR),
                              ("a list, not an object", "[1, 2]", ERROR),
                              ("unicode and nesting (valid)", '{"t": "caf\u00e9", "m": {"a": [1, 2]}}', OK)):
        data = row if isinstance(row, bytes) else row.encode()
        meta = file(f"meta{len(cases)}.jsonl", (good_row + "\n").encode() * 5 + data + b"\n")
        cases.append(("--ids / --meta", f"--meta row with {name}", expect,
                      ["build", f"m{len(cases)}", "--vectors", gv, "--meta", meta, "--root", idx]))
    cases.append(("--ids / --meta", "--meta with 5 rows for 6 vectors", ERROR,
                  ["build", f"m{len(cases)}", "--vectors", gv, "--meta", file("meta5.jsonl", (good_row + "\n") * 5),
                   "--root", idx]))
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
        import datetime
        for name, table, expect in (("a binary column", pa.table({"b": [b"\x00"] * 6}), ERROR),
                                    ("a NaN", pa.table({"f": [1.0, float("nan"), 2.0, 3.0, 4.0, 5.0]}), ERROR),
                                    ("dates (valid)",
                                     pa.table({"d": [datetime.date(2020, 1, i + 1) for i in range(6)]}), OK)):
            path = w / f"meta{len(cases)}.parquet"
            pq.write_table(table, path)
            cases.append(("--ids / --meta", f"parquet --meta with {name}", expect,
                          ["build", f"p{len(cases)}", "--vectors", gv, "--meta", path, "--root", idx]))
    except ImportError:
        pass

    for name, where, expect in (("5000 brackets", "(" * 5000 + "year > 1" + ")" * 5000, ERROR),
                                ("5000 nots", "not " * 5000 + "year > 1", ERROR),
                                ("64 nots (at the limit)", "not " * 64 + "year > 1", OK),
                                ("a field no item has", "yaer > 2016", ERROR),
                                ("a syntax error", "year >", ERROR),
                                ("an unterminated string", 'year == "2016', ERROR),
                                ("2000 flat ors", " or ".join(["year == 2016"] * 2000), OK),
                                ("valid", "year >= 2018 and not year == 2020", OK)):
        cases.append(("--where", name, expect, ["search", "t", "bread", "--where", where, "--root", idx]))

    cases.append(("delete / add / sync", "delete an id line with surrounding tabs", OK,
                  ["delete", "t", "--ids", file("del1.txt", "\td7\t\n"), "--root", idx]))
    cases.append(("delete / add / sync", "delete unknown ids (warned)", OK,
                  ["delete", "t", "--ids", file("del2.txt", "nope\n"), "--root", idx]))
    cases.append(("delete / add / sync", "delete every item", ERROR,
                  ["delete", "t", "--ids", file("del3.txt", "".join(f"d{i}\n" for i in range(8))), "--root", idx]))
    cases.append(("delete / add / sync", "delete from a missing collection", ERROR,
                  ["delete", "nosuch", "--ids", w / "del1.txt", "--root", idx]))
    for name, extra in (("--add --force", ["--force"]), ("--add --index IVF4,Flat", ["--index", "IVF4,Flat"]),
                        ("--add --query-prompt", ["--query-prompt", "q: "]), ("--add --store sq8", ["--store", "sq8"])):
        cases.append(("delete / add / sync", name, ERROR, ["build", "t", "--texts", texts, "--add", *extra,
                                                           "--root", idx]))
    bad = w / "bad33"
    bad.mkdir(exist_ok=True)
    (bad / "x.png").write_bytes(b"not an image")
    (bad / "y.jpg").write_bytes(b"\xff\xd8 truncated")
    mixed = w / "mixed33"
    mixed.mkdir(exist_ok=True)
    (mixed / "b.png").write_bytes(b"not an image")
    Image.new("RGB", (24, 24), "red").save(mixed / "a.png")
    cases.append(("delete / add / sync", "--images --chunk-size 1 with a bad image", OK,
                  ["build", "mx", "--images", mixed, "--chunk-size", "1", "--model", "fake-image", "--root", idx]))
    cases.append(("delete / add / sync", "--add of only unreadable images", OK,
                  ["build", "im", "--images", bad, "--add", "--chunk-size", "1", "--root", idx]))
    cases.append(("delete / add / sync", "a build where no image is readable", ERROR,
                  ["build", "nb", "--images", bad, "--model", "fake-image", "--root", idx]))

    cases.append(("text and modes", "a query that is not UTF-8", ERROR, ["search", "t", "caf\udcff", "--root", idx]))
    cases.append(("text and modes", "--query-prompt that is not UTF-8", ERROR,
                  ["build", "qp", "--texts", texts, "--query-prompt", "\udcfe", "--root", idx]))
    cases.append(("text and modes", "--mode hybrid on an image collection", ERROR,
                  ["search", "im", "red", "--mode", "hybrid", "--root", idx]))
    cases.append(("text and modes", "--rerank cross: a missing folder", ERROR,
                  ["search", "t", "bread", "--rerank", "cross:missing_dir", "--root", idx]))
    cases.append(("text and modes", "--rerank on an image collection", ERROR,
                  ["search", "im", "red", "--rerank", "cross:missing_dir", "--root", idx]))
    labeled = file("lab33.csv", "query_index,caption,retrieved_article_id,retrieved_image_id\nq1,a bus,a1,img3\n")
    sub_run = file("sub33.run", "q1 Q0 img3 1 2 x\n")
    cases.append(("eventa scoring", "convert eventa-submission", OK, ["convert", "eventa-submission", sub_run,
                                                                      w / "sub33"]))
    cases.append(("eventa scoring", "convert eventa-qrels", OK, ["convert", "eventa-qrels", labeled, w / "q33.qrels"]))
    cases.append(("eventa scoring", "eval submission.zip labeled.csv", OK,
                  ["eval", w / "sub33" / "submission.zip", labeled]))
    cases.append(("eventa scoring", "convert eventa-qrels of a run file", ERROR,
                  ["convert", "eventa-qrels", sub_run, w / "q34.qrels"]))
    return cases


def option_cases(work: Path) -> list[tuple[str, str, list[str]]]:
    """(command, option, argv) for every numeric option of every command with each value outside its declared
    range: -1, 0, nan, inf, 1e309, 10^30 and a word; required arguments get existing dummy files."""
    import typer

    from engine.cli import app
    from engine.io.options import UNCHECKED_COMMANDS, ranges_of
    dummy = work / "dummy.csv"
    dummy.write_text("id,text\nx,y\n")
    folder = work / "dummy-folder"
    folder.mkdir(exist_ok=True)
    out = []

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        params = getattr(command, "params", [])
        if not path or path[0] in UNCHECKED_COMMANDS or not params:
            return
        base = []
        for p in params:
            if p.required:
                ann = str(getattr(getattr(p, "type_descriptor", None), "annotation", ""))
                value = str(folder if p.name in ("images", "out_dir") else dummy if "Path" in ann else "x")
                base += [value] if not getattr(p, "opts", [""])[0].startswith("-") else [max(p.opts, key=len), value]
        ranges = ranges_of(command.callback)
        for p in params:
            r = ranges.get(p.name)
            ann = str(getattr(getattr(p, "type_descriptor", None), "annotation", ""))
            if r is None or not getattr(p, "opts", None) or "Path" in ann:  # `dse --folds` is a folder
                continue
            flag = max(p.opts, key=len)
            for value in ("-1", "0", "nan", "inf", "1e309", str(10**30), "abc"):
                try:
                    r.check(p.name, value)
                    continue  # in range: not a hostile value for this option
                except Exception:
                    pass
                out.append((" ".join(path), flag, [*path, *base, flag, value, "--root", str(work / "idx-opt")]
                            if any(q.name == "root" for q in params) else [*path, *base, flag, value]))
    walk(typer.main.get_command(app), [])
    return out


def run_in_process(argv: list[str]) -> dict:
    """`engine ARGV` in this process (option values are refused before any work): rc, stderr."""
    import contextlib
    import engine.cli as cli
    err, out = io.StringIO(), io.StringIO()
    sys.argv = ["engine", *argv]
    rc = 0
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            cli.main()
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # noqa: BLE001 - a traceback is an outcome to count
        return {"rc": 1, "err": f"Traceback: {type(exc).__name__}: {exc}"}
    return {"rc": rc, "err": err.getvalue()}


def option_tally(work: Path) -> list[dict]:
    """Every out-of-range value of every numeric option: refused in one line naming the flag, or not."""
    results = []
    for command, flag, argv in option_cases(work):
        res = run_in_process(argv)
        err = res["err"]
        outcome = ("traceback" if "Traceback" in err else "silent" if res["rc"] == 0 else
                   "clear error" if res["rc"] == 2 and err.count("error:") == 1 and flag in err else "other")
        results.append({"group": f"options: {command}", "input": f"{flag} {argv[-1] if argv[-2] != '--root' else argv[-3]}",
                        "expected": ERROR, "outcome": outcome, "rc": res["rc"], "seconds": 0,
                        "peak_rss_mib": None, "message": (err.strip().splitlines() or [""])[-1][:300]})
    return results


def damage(w: Path, how: str) -> str:
    """A collection damaged in one way, checksums recomputed; returns its name."""
    from engine.core.collection import MANIFEST, Collection
    from engine.core.storage.store.generations import sha256
    name = "dmg-" + how.replace(" ", "-")
    col = Collection.from_vectors(name, [f"i{k}" for k in range(20)],
                                  np.random.default_rng(0).normal(size=(20, 8)).astype(np.float32), None, "text",
                                  root=w / "idx")
    m = json.loads((col.path / MANIFEST).read_text())
    text = None
    if how == "truncated index":
        col.file("index").write_bytes(col.file("index").read_bytes()[:200])
    elif how == "short items":
        col.file("items").write_text("".join(col.file("items").read_text().splitlines(True)[:-3]))
    elif how == "wrong count":
        m["count"] = 25
    elif how == "no files section":
        del m["files"]
    elif how == "dim as text":
        m["dim"] = "8"
    elif how == "manifest not JSON":
        text = "{not json"
    elif how == "manifest deep JSON":
        text = "[" * 100000 + "]" * 100000
    elif how == "manifest NaN count":
        text = json.dumps({**m, "count": float("nan")})
    elif how == "embeddings header damaged":
        data = bytearray(col.file("embeddings").read_bytes())
        data[10:40] = b"x" * 30
        col.file("embeddings").write_bytes(bytes(data))
    elif how == "index missing":
        col.file("index").unlink()
    elif how == "roles not a dict":
        m["roles"] = ["embeddings"]
    if "files" in m and how not in ("index missing",):
        for f in m["files"]:
            if (col.path / f).exists():
                m["files"][f] = {"bytes": (col.path / f).stat().st_size, "sha256": sha256(col.path / f)}
    (col.path / MANIFEST).write_text(text if text is not None else json.dumps(m))
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "hostile_inputs.json")
    ap.add_argument("--memory", type=float, default=3.0, help="address-space cap per input, GiB")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--group", action="append", help="only the groups starting with this (repeatable)")
    ap.add_argument("--options", action="store_true", help="also every out-of-range value of every numeric "
                    "option, in this process")
    ap.add_argument("--only-options", action="store_true", help="only those")
    args = ap.parse_args()
    args.options = args.options or args.only_options
    work = Path(tempfile.mkdtemp(prefix="hostile-"))
    results = []
    try:
        if args.options:
            results += option_tally(work)
        for group, name, expect, cmd in ([] if args.only_options else corpus(work)):
            if args.group and not group.startswith(tuple(args.group)):
                continue
            res = run(cmd, args.memory, args.timeout)
            outcome = classify(expect, res)
            results.append({"group": group, "input": name, "expected": expect, "outcome": outcome,
                            "rc": res["rc"], "seconds": round(res["seconds"], 2),
                            "peak_rss_mib": round(res["rss_kib"] / 1024, 1) if res["rss_kib"] else None,
                            "message": (res["err"].strip().splitlines() or [""])[-1][:300]})
            print(f"{outcome:12s} {group:24s} {name[:40]:40s} {res['seconds']:6.2f}s  "
                  f"{results[-1]['message'][:90]}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    columns = ["clear error", "handled", "traceback", "silent", "blow-up", "refused valid input", "other"]
    groups: dict[str, dict[str, int]] = {}
    for r in results:
        g = groups.setdefault(r["group"], {c: 0 for c in columns})
        g[r["outcome"]] += 1
    total = {c: sum(g[c] for g in groups.values()) for c in columns}
    print("\n| inputs | tried | " + " | ".join(columns) + " |")
    print("|---|---:|" + "---:|" * len(columns))
    for name, g in {**groups, "**all**": total}.items():
        print(f"| {name} | {sum(g.values())} | " + " | ".join(str(g[c]) for c in columns) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"columns": columns, "groups": groups, "total": total, "inputs": results},
                                   indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
