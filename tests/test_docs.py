"""Tables in the docs are generated from the registries they describe: a stale one fails here with the
command that prints the fresh table."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from engine.core.encoders.registry import model_table
from engine.display import format_table
from engine.eval.metrics import metric_table
from engine.eval.profiles import PROFILES

REPO = Path(__file__).resolve().parents[1]


def block(path, name: str) -> str:
    text = (REPO / path).read_text(encoding="utf-8")
    m = re.search(rf"<!-- {name}:begin[^\n]*-->\n(.*?)\n<!-- {name}:end -->", text, re.S)
    assert m, f"{path} has no {name} block"
    return m.group(1)


@pytest.mark.parametrize("path,name,table,command", [
    ("README.md", "models", lambda: model_table(), "engine models --markdown"),
    ("docs/eval.md", "metrics", lambda: metric_table(), "engine metrics --markdown"),
    ("docs/eval.md", "profiles", lambda: (["profile", "metrics", "rules"],
                                         [[f"`{p.name}`", f"`{p.metrics}`", p.help] for p in PROFILES.values()]),
     "engine metrics --markdown"),
])
def test_generated_tables_are_current(path, name, table, command):
    assert block(path, name) == format_table(*table(), markdown=True, left=3), \
        f"the {name} table in {path} is stale: replace it with the output of `{command}`"


# ---------------------------------------------------------------- every documented command line runs
#
# Each ```bash block of README.md and docs/*.md is run, command by command, in a folder of tiny generated
# files named as the docs name them, with a fake joint text–image encoder (the real models are tested
# elsewhere; here the contract is the command line). A ```text block's `$ engine …` lines are transcripts:
# they must end without a traceback. A block that needs the network, a GPU, a running server or data that is
# not here is marked in the doc, on the line before it: <!-- docs-test: skip (the reason) -->.

SKIP = re.compile(r"<!-- docs-test: skip \((.+?)\) -->\s*$")
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
DOC_FILES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
SUBSTITUTE = {"~/photos/": "photos/", "/tmp/evfix": "evfix"}  # keep the run inside its sandbox


def doc_blocks(path: str) -> list[tuple[int, str, list[str], str | None]]:
    """(line, language, command lines, skip reason) of each shell or transcript block of a doc."""
    text = (REPO / path).read_text(encoding="utf-8")
    out = []
    for m in BLOCK.finditer(text):
        lang, body = m.group(1), m.group(2)
        if lang not in ("bash", "sh", "console", "text"):
            continue
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = SKIP.search(before)
        joined = body.replace("\\\n", " ")
        commands = []
        for raw in joined.splitlines():
            cmd = raw.strip()
            if lang == "text":
                if not cmd.startswith("$ "):
                    continue
                cmd = cmd[2:]
            if cmd and not cmd.startswith("#"):
                commands.append(cmd)
        if commands:
            out.append((line, lang, commands, reason.group(1) if reason else None))
    return out


def _write(folder, name: str, text: str) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def make_sandbox(folder, doc: str = "") -> None:
    """The tiny files the docs' examples name (a style set in NTCIR-B's layout for docs/lora.md)."""
    import shutil
    from engine.core.demo import demo_photos
    photos = demo_photos()[:3]
    (folder / "photos").mkdir()
    for p in photos:
        shutil.copy(p, folder / "photos" / p.name)
    shutil.copy(photos[0], folder / "query.jpg")
    docs = ["d1", "d2", "d3"]
    run = lambda order, rid: "".join(f"{q} Q0 {d} {r} {10 - r}.0 {rid}\n" for q in ("q1", "q2")  # noqa: E731
                                      for r, d in enumerate(order, 1))
    for name, order in (("my.run", docs), ("run.txt", docs), ("bm25.run", docs), ("gte.run", docs[::-1]),
                        ("tfidf.run", ["d2", "d1", "d3"]), ("bge.run", ["d3", "d1", "d2"])):
        _write(folder, name, run(order, name.split(".")[0]))
    qrels = "q1 0 d1 1\nq1 0 d2 0\nq2 0 d2 2\nq2 0 d3 1\n"
    for name in ("qrels.txt", "dse.qrels", "train.qrels"):
        _write(folder, name, qrels)
    _write(folder, "tiers.tsv", "qid\tgroup\nq1\thigh\nq2\tlow\n")
    _write(folder, "queries.tsv", "q1\ta dog\nq2\ta cat\n")
    _write(folder, "topics.tsv", "q1\ta dog\nq2\ta cat\n")
    _write(folder, "topics.txt", "t1\nt2\n")
    _write(folder, "queries.csv", "query_id,query_text\nq1,a dog\nq2,a cat\n")
    _write(folder, "labeled.csv", "query_id,caption,retrieved_image_id\nq1,a dog,d1\nq2,a cat,d3\n")
    for name in ("doc_ids.txt", "image_ids.txt"):
        _write(folder, name, "\n".join(docs) + "\n")
    _write(folder, "images.csv", "image_id\n" + "\n".join(docs) + "\n")
    _write(folder, "models.csv", "model_id\nm1\nm2\n")
    _write(folder, "ground-truth.csv", "task_id,model_id,relevance_score\nt1,m1,2\nt1,m2,0\nt2,m1,0\nt2,m2,1\n")
    _write(folder, "tasks.csv", "task_id,task_criticalness\nt1,high\nt2,low\n")
    _write(folder, "a.run", "t1 Q0 m1 1 2.0 Run01\nt1 Q0 m2 2 1.0 Run01\nt2 Q0 m2 1 1.0 Run01\nt2 Q0 m1 2 0.5 Run01\n")
    _write(folder, "articles.jsonl", "".join(json.dumps({"id": f"a{i}", "title": t, "content": f"{t} and more"}) + "\n"
                                             for i, t in enumerate(("Storm at sea", "Dog show", "Cat cafe"))))
    table = "id,text,split,year,lang,source\n" + "".join(
        f"n{i},{t},{'ab'[i % 2]},{2018 + i},{('en', 'de')[i % 2]},{('wire', 'paper')[i % 3 == 0]}\n"
        for i, t in enumerate(("invoice 482913 paid", "floods in the old town", "budget talks", "elections today")))
    for name in ("articles.csv", "docs.csv"):
        _write(folder, name, table)
    _write(folder, "more.csv", "id,text,split,year\nn9,a new article,a,2024\n")
    _write(folder, "changed.csv", "id,text,split,year\nn1,floods in the new town,b,2019\n")
    _write(folder, "gone.txt", "n2\n")
    _write(folder, "dense.toml", "pipeline = 'retrieve(\"docs\", mode=\"dense\", k=10)'\n")
    _write(folder, "hybrid.toml", "pipeline = '(retrieve(\"docs\", mode=\"dense\", k=10) | "
                                  "retrieve(\"docs\", mode=\"bm25\", k=10)) % 5'\n")
    shutil.copy(photos[1], folder / "q.jpg")
    _write(folder, "pairs.csv", "query,document\n" + "".join(
        f"{q},{d}\n" for q, d in (("storm", "Storm at sea"), ("dog", "Dog show"), ("cat", "Cat cafe"),
                                   ("sea storm", "waves and wind"), ("puppy", "a small dog"), ("kitten", "a small cat"),
                                   ("rain", "floods in the old town"), ("money", "budget talks"))))
    import numpy as np
    np.save(folder / "vectors.npy", np.random.default_rng(0).normal(size=(6, 12)).astype(np.float32))
    _write(folder, "vector_ids.txt", "".join(f"v{i}\n" for i in range(6)))
    llms = ["llm-a", "llm-b", "llm-c"]
    _write(folder, "llm_ids.txt", "\n".join(llms) + "\n")
    _write(folder, "llm_dev_data.tsv", "".join(f"d{i}\tquestion {i} about {('math', 'poems', 'code')[i % 3]}\n"
                                               for i in range(12)))
    _write(folder, "dev.qrels", "".join(f"d{i} 0 {llms[i % 3]} 2\nd{i} 0 {llms[(i + 1) % 3]} 1\n" for i in range(12)))
    _write(folder, "test_queries.tsv", "t1\tquestion about math\nt2\tquestion about poems\n")
    from fixtures.dse_synthetic import generate, write_corpus
    write_corpus(generate(n_records=40, n_cases=10, n_train_cases=2, seed=3), folder / "dse-synth")
    if doc.endswith("lora.md"):
        import importlib.util
        spec = importlib.util.spec_from_file_location("make_style_set", REPO / "benchmarks" / "make_style_set.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault("make_style_set", module)  # its dataclasses look their module up
        spec.loader.exec_module(module)
        module.make_style_set(folder / "style-set", "skimage", 4, 3, size=64, test_fraction=0.34)
    if doc.endswith("models.md"):
        from fixtures.tiny_families import docs_sandbox
        docs_sandbox(folder)
    from engine.tasks.eventa.submission import run_to_submission
    run_to_submission(folder / "run.txt", folder, folder / "queries.csv")


@pytest.mark.parametrize("doc", DOC_FILES)
def test_every_documented_command_runs(run_cli, joint_encoder, doc, tmp_path, monkeypatch, capsys):
    """Every command line of the doc's shell blocks exits 0 (transcripts: no traceback), in order."""
    import shlex

    blocks = doc_blocks(doc)
    todo = [(line, lang, cmds) for line, lang, cmds, reason in blocks if reason is None]
    if not todo:
        pytest.skip(f"{doc}: no command block to run (none, or each marked docs-test: skip)")
    make_sandbox(tmp_path, doc)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENGINE_CACHE", str(tmp_path / "cache"))  # stage outputs of this doc's collections only
    failures = []
    for line, lang, commands in todo:
        for cmd in commands:
            for old, new in SUBSTITUTE.items():
                cmd = cmd.replace(old, new)
            words = shlex.split(cmd, comments=True)
            if not words or words[0] != "engine":
                failures.append(f"{doc}:{line}: `{cmd}` is not an engine command; mark the block "
                                "<!-- docs-test: skip (why) -->")
                continue
            try:
                code, _, err = run_cli(*words[1:])
            except Exception as exc:  # a traceback
                import traceback
                code, err = -1, "".join(traceback.format_exception(exc)[-3:])
            ok = code in (0, 1, 2) and "Traceback" not in err if lang == "text" else code == 0
            if not ok:
                failures.append(f"{doc}:{line}: `{cmd}` exited {code}: {err.strip()[-300:]}")
    assert not failures, "\n".join(failures)
