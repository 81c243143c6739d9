"""What the docs claim, checked against the code and the files that measured it: the README's extras are the
package's, its suite time is the one tests/README.md measured, docs/formats.md's EVENTA header is the one
`submit` writes, and every page of the service and the limits runs a command block in the docs test."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def text(path: str) -> str:
    return " ".join((REPO / path).read_text(encoding="utf-8").split())


def test_the_readme_names_every_extra():
    import tomllib
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = text("README.md")
    missing = [name for name in extras if name != "test" and f"`{name}`" not in readme]
    assert not missing, f"README.md's extras list lacks {missing}"


def test_the_readme_quotes_the_suite_time_tests_readme_measured():
    row = next(line for line in (REPO / "tests/README.md").read_text().splitlines()
               if line.startswith("| default (`pytest`)"))
    measured = re.search(r"(\d[\d,]* tests), ([^|]+? on 2 cores)", row)
    assert measured, row
    readme = text("README.md")
    assert f"{measured.group(1)} in {measured.group(2)}" in readme, "README.md's suite time is not tests/README.md's"


def test_formats_say_what_the_tasks_read_and_write():
    from engine.tasks.eventa.submission import header
    formats = text("docs/formats.md")
    cols = header()
    assert len(cols) == 11 and "11 columns" in formats and f"`{cols[0]},{cols[1]},…,{cols[-1]}`" in formats
    assert "image_id_1..10,image_id" not in formats       # not the 21 columns it once said
    assert "task-data/train-tasks/<task_id>/train.jsonl" in formats
    assert "1 is the most relevant** and 2 the second most relevant" in formats
    assert "`tags` — a list of strings" in formats


def test_the_plot_hint_works_outside_a_checkout(run_cli, monkeypatch, tmp_path):
    import builtins
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError(name)
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    (tmp_path / "p.toml").write_text("pipeline = 'retrieve(\"docs\")'\n")
    code, _, err = run_cli("experiment", tmp_path / "p.toml", "--queries", tmp_path / "q.tsv", "--qrels",
                           tmp_path / "qrels.txt", "--plot", tmp_path / "x.png")
    assert code != 0 and "pip install 'engine[plot]'" in err and "Traceback" not in err


@pytest.mark.parametrize("doc", ["docs/serve.md", "docs/limits.md"])
def test_the_page_has_a_command_block_the_docs_test_runs(doc):
    raw = (REPO / doc).read_text(encoding="utf-8")
    runs = [m for m in re.finditer(r"^```bash\n(.*?)^```", raw, re.S | re.M)
            if "docs-test: skip" not in raw[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]]
    assert runs and all(line.startswith("engine ") for m in runs for line in m.group(1).splitlines() if line)


def test_rerank_doc_says_a_depth_below_k_is_refused(run_cli):
    assert "`--rerank-depth 3 -k 5` is refused in one line" in text("docs/rerank.md")
    assert "at least `-k`)" not in text("docs/rerank.md")
