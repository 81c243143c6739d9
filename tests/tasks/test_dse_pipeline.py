"""DSEBench's untuned rankings as pipelines of core stages equal the feature-matrix orchestration on the
generated corpus (every method, with a reranker too); `--pipeline FILE` runs a user's edited one."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from engine.cli import app
from engine.core.ranking.pipeline import Context
from engine.core.ranking.pipeline.parse import parse_pipeline
from engine.core.ranking.pipeline.run import run_pipeline
from engine.io.runs import read_run
from engine.tasks.dse.data import read_cases, read_dse_queries, select_cases
from engine.tasks.dse.index import DseIndex
from engine.tasks.dse.rank import case_queries, prepare_cases
from engine.tasks.dse.stages import default_pipeline
from fixtures.dse_reference import reference_rankings

runner = CliRunner()




@pytest.mark.parametrize("method", ["rrf", "query", "examples"])
def test_default_pipelines_equal_the_feature_orchestration(dse_corpus, method):
    paths, root = dse_corpus
    index = DseIndex.open("synth", root)
    cases, queries = read_cases(paths["cases"]), read_dse_queries(paths["queries"])
    ids = select_cases(cases, "all")
    old = reference_rankings(prepare_cases(index, cases, queries, ids), index.ids, method, 50)
    qs = case_queries(index.pos, cases, queries, ids)
    run = run_pipeline(parse_pipeline(default_pipeline(method, 50, "synth")), qs, Context(root=root))
    assert {q: [d for d, _ in r] for q, r in old.items()} == {q.qid: list(run[q.qid].ids) for q in qs}


def test_submit_with_the_shown_file_equals_the_default_and_rerank_matches(dse_corpus, tmp_path, tiny_cross):
    paths, root = dse_corpus
    shown = runner.invoke(app, ["pipeline", "show", "dse"])
    assert shown.exit_code == 0
    pipe = tmp_path / "dse.toml"
    assert '"dsebench"' in shown.output and "--name N" in shown.output.splitlines()[1]
    pipe.write_text(shown.output)  # the default index's collection, read as the index --name names
    base = ["dse", "submit", "--queries", str(paths["queries"]), "--cases", str(paths["cases"]), "--name", "synth",
            "--root", str(root), "--quiet"]
    a, b = tmp_path / "a.run", tmp_path / "b.run"
    assert runner.invoke(app, base + ["--out", str(a)]).exit_code == 0
    res = runner.invoke(app, base + ["--out", str(b), "--pipeline", str(pipe), "--run-id", "dse-rrf"])
    assert res.exit_code == 0, res.output
    assert a.read_text() == b.read_text()
    # the reranked default through the file equals --rerank
    c, d = tmp_path / "c.run", tmp_path / "d.run"
    rr = ["--rerank", f"cross:{tiny_cross}", "--rerank-depth", "5", "--depth", "20"]
    assert runner.invoke(app, base + ["--out", str(c), *rr]).exit_code == 0
    pipe2 = tmp_path / "dse2.toml"
    pipe2.write_text("pipeline = '''\n" + default_pipeline("rrf", 20, "synth", f"cross:{tiny_cross}", 5) + "\n'''\n")
    assert runner.invoke(app, base + ["--out", str(d), "--pipeline", str(pipe2), "--run-id", "dse-rrf"]).exit_code == 0
    assert read_run(c) == read_run(d)


def test_submit_refuses_a_pipeline_file_reading_another_index(dse_corpus, tmp_path, run_cli):
    paths, root = dse_corpus
    other = tmp_path / "other.toml"
    other.write_text("pipeline = 'score(\"synth\", k=10) | score(\"another\", mode=\"bm25\", k=10)'\n")
    out = tmp_path / "o.run"
    code, _, err = run_cli("dse", "submit", "--queries", paths["queries"], "--cases", paths["cases"], "--name",
                           "synth", "--root", root, "--out", out, "--pipeline", other)
    assert code == 2 and err.count("\n") == 1 and "'another'" in err and "not in the index 'synth'" in err, err
    assert not out.exists()
