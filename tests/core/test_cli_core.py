"""The core commands as users run them: tables, JSON, runs, and one-line errors with no traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from typer.testing import CliRunner

from engine.cli import app

runner = CliRunner()


def engine(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real console entry (main), which is what turns errors into one line."""
    return subprocess.run([sys.executable, "-c", "import sys; from engine.cli import main; sys.argv[0]='engine'; main()", *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=600)


def test_build_search_info_and_run(tmp_path):
    src = tmp_path / "docs.tsv"
    src.write_text("id\ttext\na\tfresh bread from the bakery\nb\tstock market news today\nc\ta cat sleeping\n")
    root = str(tmp_path / "idx")
    r = runner.invoke(app, ["build", "docs", "--texts", str(src), "--root", root, "--quiet"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["search", "docs", "kitten napping", "--root", root, "-k", "2", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["hits"][0]["id"] == "c" and len(data["hits"]) == 2
    r = runner.invoke(app, ["search", "docs", "kitten napping", "--root", root, "-k", "1"])
    assert "rank" in r.stdout and " c " in r.stdout
    r = runner.invoke(app, ["info", "docs", "--root", root, "--json"])
    assert json.loads(r.stdout)["count"] == 3
    queries = tmp_path / "topics.tsv"
    queries.write_text("101\tbakery bread\n102\tshares and stocks\n")
    run = tmp_path / "out.run"
    r = runner.invoke(app, ["search", "docs", "--queries", str(queries), "--out", str(run), "--root", root, "-q"])
    assert r.exit_code == 0, r.output
    first = {line.split()[0]: line.split()[2] for line in reversed(run.read_text().splitlines())}
    assert first == {"101": "a", "102": "b"}
    r = runner.invoke(app, ["bench", "docs", "--root", root, "--n", "8", "--batch", "4", "-q",
                            "--out", str(tmp_path / "bench.json")])
    assert r.exit_code == 0, r.output
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert bench["queries"] == 8 and bench["search_single"]["calls"] == 8
    assert bench["encode_single"]["p50_ms"] > 0 and bench["index_bytes"] > 0
    r = runner.invoke(app, ["bench", "docs", "--root", root, "--n", "50", "--batch", "4", "-q", "--seconds", "1e-9",
                            "--out", str(tmp_path / "bench.json")])  # each measurement stops after its first call
    assert r.exit_code == 0, r.output
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert [bench[m]["calls"] for m in ("encode_single", "encode_batch", "search_single", "search_batch")] == [1] * 4


def test_errors_are_one_line_without_traceback(tmp_path):
    r = engine("search", "nothing-here", "a query", "--root", str(tmp_path))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.strip().startswith("error: no collection 'nothing-here'")
    bad = tmp_path / "q.tsv"
    bad.write_text("1\tfirst\n1\tsecond\n")
    r = engine("search", "x", "--queries", str(bad), "--out", str(tmp_path / "r"), "--root", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_clip_without_weights_offline_says_how_to_supply_them(tmp_path, sample_photos):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "cat.png").write_bytes(sample_photos["chelsea"].read_bytes())
    r = engine("build", "c", "--images", str(folder), "--root", str(tmp_path), "--model", "clip:ViT-B-32:openai",
               env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert "could not fetch open_clip weights 'openai'" in r.stderr and "checkpoint" in r.stderr
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_messages_name_flags_on_the_command_line_and_parameters_in_python(tmp_path):
    """Engine code marks options with opt(); the CLI shows the flag of the command that ran."""
    import pytest

    from engine.core.collection import Collection
    from engine.errors import EngineError
    src = tmp_path / "d.tsv"
    src.write_text("id\ttext\na\tbread\n")
    r = engine("build", "d", "--texts", str(src), "--root", str(tmp_path), "--chunk-size", "0")
    assert r.returncode == 2 and "--chunk-size must be a whole number of at least 1, not 0" in r.stderr
    with pytest.raises(EngineError, match="^chunk_size must be at least 1, not 0$"):
        Collection.build("d", texts=src, root=tmp_path, chunk_size=0)
    with pytest.raises(EngineError, match="unknown build setting"):
        Collection.build("d", texts=src, root=tmp_path, chunk_sise=5)


def test_models_and_metrics_list_their_registries():
    r = runner.invoke(app, ["models"])
    assert r.exit_code == 0 and "clip:ARCH:WEIGHTS" in r.stdout and "`" not in r.stdout
    r = runner.invoke(app, ["metrics", "--markdown"])
    assert r.exit_code == 0 and "| `ndcg_exp`, `ndcg_exp@k` |" in r.stdout and "| `dsebench` |" in r.stdout


def test_a_core_command_assembles_without_the_tasks():
    """The root group loads a command's module when that command runs: `engine search` imports no task, no
    evaluation and no service; `engine eval` only the task packages (their run formats), not their commands;
    `engine validate` every task's command module (each adds its format)."""
    code = ("import sys; from engine.cli import root_command\n"
            "for name in ('search', 'eval', 'validate'):\n"
            "    root_command().get_command(None, name)\n"
            "    print(sorted(m for m in sys.modules if m.startswith(('engine.tasks', 'engine.eval', 'engine.serve'))))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    search, evaluation, validate = [eval(line) for line in r.stdout.splitlines()]
    assert search == []
    assert "engine.tasks.eventa" in evaluation and not any(m.startswith("engine.tasks") and m.endswith(".cli")
                                                           for m in evaluation)
    assert {"engine.tasks.eventa.cli", "engine.tasks.dse.cli", "engine.tasks.lora.cli",
            "engine.tasks.model_ranking.cli"} <= set(validate)


def test_every_command_of_the_lazy_root_is_the_full_apps():
    """The lazy root lists the same commands, with the same parameters, as the app tests drive."""
    import typer

    from engine.cli import root_command
    full = typer.main.get_command(app)
    lazy = root_command()
    assert sorted(lazy.list_commands(None)) == sorted(full.commands)
    for name in full.commands:
        params = [(p.name, p.opts, p.default) for p in lazy.get_command(None, name).params]
        assert params == [(p.name, p.opts, p.default) for p in full.commands[name].params], name