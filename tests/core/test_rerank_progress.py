"""Progress of long stages: a reranking command on a pseudo-terminal shows its meter (pairs done of the total,
the rate) and `--quiet` silences it; in a log (stderr not a terminal) a meter writes a line every few seconds;
meters inside meters share one display; listwise window counts match the windows asked."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_on_pty(args: list[str], cwd: Path) -> str:
    """`python -m engine ARGS` with stdin, stdout and stderr on a pseudo-terminal: everything it showed (its
    cache a new folder each time: the pairs are scored, not read back)."""
    import pty
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "PYTHONPATH": str(REPO),
           "ENGINE_CACHE": str(cwd / f"cache-{len(list(cwd.glob('cache-*')))}")}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "engine", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(master)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")[-2000:]
    return b"".join(chunks).decode(errors="replace")


@pytest.fixture
def rerank_inputs(tmp_path):
    from engine.io.runs import write_run
    docs = tmp_path / "docs.tsv"
    words = "cats dogs boats trains cheese rain music chess bread rivers stars maps".split()
    docs.write_text("id\ttext\n" + "".join(f"d{i}\tdocument {i} about {w}\n" for i, w in enumerate(words)))
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\ta question about animals\nq2\tfood and drink\n")
    run = tmp_path / "first.run"
    write_run(run, {q: [(f"d{i}", 10.0 - i) for i in range(12)] for q in ("q1", "q2")}, "first")
    return run, queries, docs


def test_reranking_shows_progress_on_a_terminal_and_not_with_quiet(tiny_lm, rerank_inputs, tmp_path):
    run, queries, docs = rerank_inputs
    args = ["rerank", str(run), "--queries", str(queries), "--docs", str(docs), "--model", f"llm:{tiny_lm}",
            "--depth", "12"]
    shown = run_on_pty(args + ["--out", str(tmp_path / "a.run")], tmp_path)
    assert "reranking" in shown and "24/24" in shown and "pairs/s" in shown, shown[-1500:]
    quiet = run_on_pty(args + ["--out", str(tmp_path / "b.run"), "--quiet"], tmp_path)
    assert "reranking" not in quiet and "pairs/s" not in quiet, quiet[-1500:]
    assert (tmp_path / "a.run").read_text() == (tmp_path / "b.run").read_text()


def test_a_meter_in_a_log_writes_a_line_every_few_seconds(monkeypatch, capsys):
    from engine import progress
    monkeypatch.setattr(progress, "LOG_EVERY", 0.05)
    progress.set_quiet(False)
    with progress.meter("reranking (llm:x)", 10, "pairs"):
        progress.advance(4)
        time.sleep(0.3)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("reranking (llm:x): 4/10 pairs")]
    assert len(lines) >= 2 and "/s, about" in lines[0] and "s left" in lines[0], err
    progress.set_quiet(True)
    try:
        with progress.meter("reranking (llm:x)", 10, "pairs"):
            progress.advance(4)
            time.sleep(0.2)
    finally:
        progress.set_quiet(False)
    assert "reranking" not in capsys.readouterr().err


def test_advance_counts_on_the_innermost_meter_and_outside_none():
    from engine import progress
    progress.advance(3)  # no meter open: nothing to count, nothing fails
    progress.set_quiet(True)
    try:
        with progress.meter("outer", 2, "pipelines") as outer:
            with progress.meter("inner", 5, "pairs") as inner:
                progress.advance(5)
            progress.advance(1)
    finally:
        progress.set_quiet(False)
    assert (inner.done, outer.done) == (5, 1)


@pytest.mark.parametrize("n, rounds", [(1, None), (2, None), (20, None), (21, None), (45, None), (100, None),
                                       (20, 3), (7, 2), (41, 5), (3, 1)])
def test_window_count_is_the_windows_asked(n, rounds):
    from engine.core.ranking.rerankers.listwise import Listwise, one_at_a_time, window_count
    asked = []
    lister = Listwise(one_at_a_time(lambda messages, tokens: asked.append(1) or "[1] > [2]"))
    lister.scores(query="q", docs=[f"d{i}" for i in range(n)], rounds=rounds)
    assert window_count(n, rounds) == len(asked)


def test_embed_reranker_on_a_text_encoder_runs_on_onnx_without_torch(text_encoder, tmp_path):
    """`embed:sbert:…` scores texts with the model's ONNX text side: the cosines of sentence-transformers'
    embeddings (to 1e-4, the same order), and a process that reranks with it never imports torch."""
    import numpy as np

    from engine.core.encoders.onnx_text import text_encoder as onnx_encoder
    from engine.core.ranking.rerankers.spec import load_reranker
    if onnx_encoder("all-MiniLM-L6-v2") is None:
        pytest.skip("onnxruntime is not installed")
    reranker = load_reranker("embed:sbert:all-MiniLM-L6-v2")
    assert reranker.info["runtime"] == "onnx"
    query, docs = "a dog playing on the beach", ["a puppy at the seaside", "tax law reform", "a cat indoors",
                                                  "dogs running in the sand by the sea", "long " * 300]
    got = reranker.score(query, docs)
    want = text_encoder.encode_texts(docs) @ text_encoder.encode_texts([query])[0]
    assert np.abs(got - want).max() < 1e-4
    assert list(np.argsort(-got)) == list(np.argsort(-want))
    code = ("import sys\nfrom engine.core.ranking.rerankers.spec import load_reranker\n"
            "r = load_reranker('embed:sbert:all-MiniLM-L6-v2')\nprint(r.score('a dog', ['a puppy', 'tax law']).round(3))\n"
            "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout.split("\n")
    assert out[1] == "[]", out
