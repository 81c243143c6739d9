"""`engine experiment`'s outputs: `--out DIR` written into again when DIR exists, `--plot` checked before any
pipeline runs, and `--stages` leaving the pipelines' Holm-corrected p as it was (stage rows corrected apart)."""
from __future__ import annotations

import json

import pytest

DOCS = ("id,text\nd1,floods hit the river town after heavy rain\nd2,the bridge over the river was closed\n"
        "d3,a new school opened in the city centre\nd4,heavy rain is expected in the mountains\n"
        "d5,the football team won the cup final\nd6,students return to school after the summer\n"
        "d7,a storm brought heavy rain and river floods\nd8,the city council approved a new bridge\n")
QUERIES = "q1\triver floods after rain\nq2\tschool students\nq3\ta new bridge\nq4\tfootball cup\nq5\theavy rain\n"
QRELS = "q1 0 d1 1\nq1 0 d7 1\nq2 0 d6 1\nq2 0 d3 1\nq3 0 d8 1\nq4 0 d5 1\nq5 0 d4 1\nq5 0 d7 1\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory, install_fake):
    from engine.core.collection import Collection
    folder = tmp_path_factory.mktemp("experiment-outputs")
    (folder / "docs.csv").write_text(DOCS)
    (folder / "q.tsv").write_text(QUERIES)
    (folder / "qrels.txt").write_text(QRELS)
    with pytest.MonkeyPatch.context() as mp:
        install_fake(mp)
        Collection.build("docs", texts=folder / "docs.csv", root=folder / "idx", bm25=True)
        yield folder


def pipes(folder):
    files = {"dense": 'retrieve("docs", mode="dense", k=8) % 3',
             "bm25": 'retrieve("docs", mode="bm25", k=8) % 3',
             "chain": 'retrieve("docs", mode="bm25", k=8) >> similarity("docs", weight=0.7) % 3'}
    for name, text in files.items():
        (folder / f"{name}.toml").write_text(f"pipeline = '{text}'\n")
    return [folder / f"{name}.toml" for name in files]


def experiment(run_cli, base, *args):
    return run_cli("experiment", *pipes(base), "--queries", base / "q.tsv", "--qrels", base / "qrels.txt",
                   "--root", base / "idx", "--no-cache", "--metrics", "ndcg@3,recall@3", *args)


def test_out_is_written_into_again_when_it_exists(run_cli, base, tmp_path):
    out = tmp_path / "runs"
    for _ in range(2):
        code, _, err = experiment(run_cli, base, "--out", out, "--json")
        assert code == 0, err
        assert sorted(p.name for p in out.iterdir()) == ["bm25.run", "chain.run", "dense.run"]
    (tmp_path / "afile").write_text("x")
    code, _, err = experiment(run_cli, base, "--out", tmp_path / "afile")
    assert code != 0 and "is a file" in err and "Traceback" not in err


@pytest.mark.parametrize("where", ["parent-is-a-file", "proc"])
def test_an_unwritable_plot_is_refused_before_any_pipeline_runs(run_cli, base, tmp_path, where):
    pytest.importorskip("matplotlib")
    (tmp_path / "afile").write_text("x")
    png = tmp_path / "afile" / "p.png" if where == "parent-is-a-file" else "/proc/engine-plot.png"
    out = tmp_path / "runs"
    code, _, err = experiment(run_cli, base, "--out", out, "--plot", png)
    assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "cannot be written" in err and not out.exists()   # refused before the runs were made


def test_stages_leave_the_pipelines_holm_p_as_it_was(run_cli, base):
    code, out, err = experiment(run_cli, base, "--json")
    assert code == 0, err
    without = {p["name"]: p for p in json.loads(out)["pipelines"]}
    code, out, err = experiment(run_cli, base, "--json", "--stages")
    assert code == 0, err
    rows = {p["name"]: p for p in json.loads(out)["pipelines"]}
    assert "chain[1]" in rows and set(without) < set(rows)
    for name in ("bm25", "chain"):
        assert rows[name]["p_holm"] == without[name]["p_holm"] and rows[name]["p"] == without[name]["p"]
    assert rows["chain[1]"]["p_holm"]["ndcg@3"] == pytest.approx(min(1.0, rows["chain[1]"]["p"]["ndcg@3"]))
    code, out, _ = experiment(run_cli, base, "--stages")
    assert "the 1 stage rows corrected apart" in out and "over the other 2 pipelines" in out
