"""Hostile inputs through every command, as a user would type them: the tally issue 16 asks for.

Each input runs `engine …` (the fake encoder of tests/hardening, so no model is needed) in a process of its
own, capped at --memory GiB of address space and --timeout seconds, and is classed as

    clear error   exit 2 (or 1 from `validate`) with one `error:` line or a list of problems, no traceback
    handled       exit 0 on an input that is valid, however odd (a CMYK JPEG, a PNG named .jpg)
    traceback     a Python traceback on stderr
    silent        exit 0 on an input that is wrong (a result where an error was due)
    blow-up       killed by the memory cap, or past the time limit

and its peak resident memory (ru_maxrss) is kept: the worst hostile image's is quoted in the closing note.

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
    from hardening.test_hostile_images import SUFFIX, make

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
    return cases


def damage(w: Path, how: str) -> str:
    """A collection damaged in one way, checksums recomputed; returns its name."""
    from engine.core.collection import MANIFEST, Collection
    from engine.core.store.generations import sha256
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
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hostile-"))
    results = []
    try:
        for group, name, expect, cmd in corpus(work):
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
