"""Pipelines: the expression parser (stages only, positions in refusals), operators, a pipeline file equal to
the chained commands, experiments' p-values against scipy, the stage cache (hits, invalidation after a
rebuild), and the plot."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from engine.core.ranking.pipeline import Context, Query
from engine.core.ranking.pipeline.cache import StageCache
from engine.core.ranking.pipeline.parse import parse_pipeline, read_pipeline_file
from engine.core.ranking.pipeline.prefixes import prefixes
from engine.core.ranking.pipeline.run import run_pipeline
from engine.io.ranking import Ranking
from engine.errors import EngineError

DOCS = """id,text
d1,floods hit the river town after heavy rain
d2,the bridge over the river was closed for repairs
d3,a new school opened in the city centre
d4,heavy rain is expected tomorrow in the mountains
d5,the football team won the cup final
d6,students return to school after the summer
d7,a storm brought heavy rain and river floods
d8,the city council approved a new bridge
"""
QUERIES = "q1\triver floods after rain\nq2\tschool students\nq3\ta new bridge\nq4\tfootball cup\n"
QRELS = "q1 0 d1 1\nq1 0 d7 1\nq2 0 d6 1\nq2 0 d3 1\nq3 0 d8 1\nq4 0 d5 1\n"


@pytest.fixture(scope="module")
def docs(tmp_path_factory, text_encoder):
    from engine.core.collection import Collection
    base = tmp_path_factory.mktemp("pipe")
    (base / "docs.csv").write_text(DOCS)
    (base / "q.tsv").write_text(QUERIES)
    (base / "qrels.txt").write_text(QRELS)
    Collection.build("docs", texts=base / "docs.csv", root=base / "idx", bm25=True)
    return base


# ---------------------------------------------------------------- the ranking type

def test_ranking_orders_by_score_and_keeps_scores_strictly_decreasing():
    r = Ranking.of([("a", 1.0), ("b", 2.0), ("c", 1.0), ("a", 0.5)])
    assert r.ids == ("b", "a", "c") and all(x > y for x, y in zip(r.scores, r.scores[1:]))
    filled = r.cut(2).then(Ranking.of([("c", 9.0), ("b", 8.0), ("z", 7.0)]), k=4)
    assert filled.ids == ("b", "a", "c", "z") and filled.scores[2] == r.scores[1] - 1.0
    with pytest.raises(EngineError, match="NaN"):
        Ranking(["a"], [float("nan")])


# ---------------------------------------------------------------- the parser

def test_expression_round_trips_through_its_text():
    text = 'retrieve("docs", mode="hybrid", k=50) >> rerank("cross:/models/ce", depth=20) % 10'
    stage = parse_pipeline(text)
    assert str(stage) == text and str(parse_pipeline(str(stage))) == text
    fused = parse_pipeline('(retrieve("a") | retrieve("b", mode="bm25")) % 5 ^ retrieve("c")')
    assert str(parse_pipeline(str(fused))) == str(fused)
    assert len(prefixes(stage)) == 2


@pytest.mark.parametrize("text, message", [
    ('__import__("os").system("true")', "line 1, column 1: only stage constructors can be called"),
    ('retrieve("a") >> __import__("os")', r"line 1, column 18: '__import__' is not a stage"),
    ('retrieve("docs").search()', "line 1, column 1: only stage constructors can be called"),
    ('retrieve(docs)', r"line 1, column 10: 'docs' is a name"),
    ('retrieve("docs") >> os.path', "line 1, column 21: attributes are not allowed"),
    ('retrieve("docs") >> 3', "line 1, column 21: `>>` needs a stage on its right"),
    ('retrieve("docs", k=0)', "line 1, column 1: retrieve.*k must be a whole number of at least 1"),
    ('retrieve("docs", mode="fuzzy")', "mode must be one of dense, bm25, hybrid"),
    ('retrieve("docs") % "ten"', "`%` keeps the top k"),
    ('retrieve("docs",\n  k=[x for x in y])', "line 2, column 5: ListComp is not allowed"),
    ('retrieve("docs"', "not a pipeline expression"),
    ('lambda: 1', "Lambda is not allowed"),
    ('rerank("nope:x")', "unknown reranker spec"),
    ('fuse(retrieve("a"))', "two or more stages"),
    ('retrieve("docs", kk=3)', r"line 1, column 1: retrieve\(\): no argument 'kk'; it takes collection, mode, k"),
    ('retrieve()', r"retrieve\(\): missing 'collection'"),
    ('retrieve("a", collection="b")', r"retrieve\(\): argument 'collection' given twice"),
])
def test_parser_refuses_what_is_not_a_stage_with_its_position(text, message):
    with pytest.raises(EngineError, match=message):
        parse_pipeline(text)


def test_pipeline_file_needs_its_key(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text("stages = 'retrieve(\"docs\")'\n")
    with pytest.raises(EngineError, match="needs a key `pipeline`"):
        read_pipeline_file(bad)
    bad.write_text("pipeline = 'retrieve(\"docs\") >> nope()'\n")
    with pytest.raises(EngineError, match=r"p.toml: line 1, column 33: 'nope' is not a stage"):
        read_pipeline_file(bad)


def test_a_reordering_stage_cannot_come_first(docs):
    with pytest.raises(EngineError, match="start with a first stage"):
        run_pipeline(parse_pipeline('rerank("cross:x", depth=5)'), [Query("q", "x")], Context(root=docs / "idx"))


# ---------------------------------------------------------------- same results as the chained commands

def test_pipeline_file_equals_search_rerank_fuse_chained(run_cli, docs, tiny_cross, monkeypatch, capsys, tmp_path):
    idx, q = docs / "idx", docs / "q.tsv"
    ce = f"cross:{tiny_cross}"
    cmds = [
        ["search", "docs", "--queries", q, "--mode", "dense", "-k", "8", "--root", idx, "--out", tmp_path / "dense.run"],
        ["rerank", tmp_path / "dense.run", "--queries", q, "--docs", docs / "docs.csv", "--model", ce, "--depth", "5",
         "--out", tmp_path / "re.run"],
        ["search", "docs", "--queries", q, "--mode", "bm25", "-k", "8", "--root", idx, "--out", tmp_path / "bm25.run"],
        ["fuse", tmp_path / "re.run", tmp_path / "bm25.run", "--method", "rrf", "--depth", "6",
         "--out", tmp_path / "chained.run"],
    ]
    for c in cmds:
        code, out, err = run_cli(*c)
        assert code == 0, err
    pipe = tmp_path / "p.toml"
    pipe.write_text(f"pipeline = '''\nfuse(retrieve(\"docs\", mode=\"dense\", k=8) >> rerank(\"{ce}\", depth=5),\n"
                    "     retrieve(\"docs\", mode=\"bm25\", k=8), depth=6)\n'''\n")
    code, out, err = run_cli("pipeline", "run", pipe, "--queries", q, "--root", idx,
                             "--out", tmp_path / "pipe.run", "--no-cache")
    assert code == 0, err
    from engine.io.runs import read_run
    chained, piped = read_run(tmp_path / "chained.run"), read_run(tmp_path / "pipe.run")
    order = lambda run: {k: sorted(v, key=lambda d: -v[d]) for k, v in run.items()}  # noqa: E731
    assert order(piped) == order(chained)


def test_retrieve_then_rerank_equals_search_rerank(run_cli, docs, tiny_cross, monkeypatch, capsys, tmp_path):
    idx, q = docs / "idx", docs / "q.tsv"
    ce = f"cross:{tiny_cross}"
    code, _, err = run_cli("search", "docs", "--queries", q, "--mode", "hybrid", "-k", "3",
                           "--rerank", ce, "--rerank-depth", "6", "--root", idx, "--out", tmp_path / "s.run")
    assert code == 0, err
    pipe = tmp_path / "p.toml"
    pipe.write_text(f"pipeline = 'retrieve(\"docs\", mode=\"hybrid\", k=6) >> rerank(\"{ce}\", depth=6) % 3'\n")
    code, _, err = run_cli("pipeline", "run", pipe, "--queries", q, "--root", idx,
                           "--out", tmp_path / "p.run", "--no-cache")
    assert code == 0, err
    from engine.io.runs import read_run
    a, b = read_run(tmp_path / "s.run"), read_run(tmp_path / "p.run")
    assert {k: sorted(v, key=lambda d: -v[d]) for k, v in a.items()} == \
           {k: sorted(v, key=lambda d: -v[d]) for k, v in b.items()}


# ---------------------------------------------------------------- experiments and the cache

def _pipes(tmp_path):
    a, b, c = tmp_path / "dense.toml", tmp_path / "bm25.toml", tmp_path / "both.toml"
    a.write_text("pipeline = 'retrieve(\"docs\", mode=\"dense\", k=5) % 3'\n")
    b.write_text("pipeline = 'retrieve(\"docs\", mode=\"bm25\", k=5) % 3'\n")
    c.write_text("pipeline = '(retrieve(\"docs\", mode=\"dense\", k=5) | retrieve(\"docs\", mode=\"bm25\", k=5)) % 3'\n")
    return a, b, c


def test_experiment_p_values_equal_scipy_and_runs_are_written(run_cli, docs, monkeypatch, capsys, tmp_path):
    a, b, c = _pipes(tmp_path)
    code, out, err = run_cli("experiment", a, b, c, "--queries", docs / "q.tsv",
                             "--qrels", docs / "qrels.txt", "--root", docs / "idx", "--metrics", "ndcg@3,recall@3",
                             "--json", "--out", tmp_path / "runs", "--cache", tmp_path / "cache")
    assert code == 0, err
    got = json.loads(out)
    rows = {p["name"]: p for p in got["pipelines"]}
    assert list(rows) == ["dense", "bm25", "both"] and rows["dense"]["p"]["ndcg@3"] is None
    from engine.eval.evaluate import evaluate
    from engine.io.runs import read_qrels, read_run
    qrels = read_qrels(docs / "qrels.txt")
    per = {n: evaluate(read_run(tmp_path / "runs" / f"{n}.run"), qrels, "ndcg@3").per_query for n in rows}
    base = [per["dense"][q]["ndcg@3"] for q in qrels]
    raw = {}
    for n in ("bm25", "both"):
        other = [per[n][q]["ndcg@3"] for q in qrels]
        want = stats.ttest_rel(other, base).pvalue
        want = 1.0 if np.isnan(want) else want
        assert rows[n]["p"]["ndcg@3"] == pytest.approx(want)
        raw[n] = want
        assert rows[n]["metrics"]["ndcg@3"] == pytest.approx(np.mean(other))
    holm = sorted(raw.values())
    want_holm = {n: min(1.0, max(2 * holm[0], holm[1]) if raw[n] == holm[1] else 2 * holm[0]) for n in raw}
    for n in raw:
        assert rows[n]["p_holm"]["ndcg@3"] == pytest.approx(want_holm[n])
    assert all(s["stage"] for s in rows["both"]["stages"])


def test_cache_hits_on_a_second_experiment_and_a_rebuild_invalidates_it(run_cli, docs, tmp_path, monkeypatch, capsys):
    from engine.core.collection import Collection
    root = tmp_path / "idx"
    Collection.build("docs", texts=docs / "docs.csv", root=root, bm25=True)
    cache = tmp_path / "cache"
    qs = [Query("q1", "river floods"), Query("q2", "school")]
    first = 'retrieve("docs", mode="dense", k=5) % 3'
    second = 'retrieve("docs", mode="dense", k=5) % 2'
    ctx = Context(root=root, cache=StageCache(cache))
    run1 = run_pipeline(parse_pipeline(first), qs, ctx)
    assert [(r.text, r.cached) for r in ctx.log] == [('retrieve("docs", mode="dense", k=5)', False)]
    ctx2 = Context(root=root, cache=StageCache(cache))
    run2 = run_pipeline(parse_pipeline(second), qs, ctx2)
    assert [(r.text, r.cached) for r in ctx2.log] == [('retrieve("docs", mode="dense", k=5)', True)]
    assert run2["q1"].ids == run1["q1"].ids[:2]
    # another query set is another key
    ctx3 = Context(root=root, cache=StageCache(cache))
    run_pipeline(parse_pipeline(second), qs[:1], ctx3)
    assert ctx3.log[0].cached is False
    # a rebuilt collection (another generation) invalidates what read it
    Collection.build("docs", texts=docs / "docs.csv", root=root, bm25=True, force=True)
    ctx4 = Context(root=root, cache=StageCache(cache))
    run_pipeline(parse_pipeline(second), qs, ctx4)
    assert [(r.text, r.cached) for r in ctx4.log] == [('retrieve("docs", mode="dense", k=5)', False)]
    # through the CLI: the table says how many stages came from the cache
    p = tmp_path / "p.toml"
    p.write_text(f"pipeline = '{second}'\n")
    code, out, err = run_cli("experiment", p, "--queries", docs / "q.tsv", "--qrels",
                             docs / "qrels.txt", "--root", root, "--cache", cache, "--json")
    code, out, err = run_cli("experiment", p, "--queries", docs / "q.tsv", "--qrels",
                             docs / "qrels.txt", "--root", root, "--cache", cache, "--json")
    assert code == 0, err
    row = json.loads(out)["pipelines"][0]
    assert row["stages"] == [{"stage": 'retrieve("docs", mode="dense", k=5)', "cached": True,
                              "cost": {"cpu_s_per_query": 0.0, "wall_s_per_query": 0.0}}]  # read, not computed
    assert row["cost"] == {"cpu_s_per_query": 0.0, "wall_s_per_query": 0.0}


def test_stages_rows_and_plot(run_cli, docs, tmp_path, monkeypatch, capsys, tiny_cross):
    a, b, c = _pipes(tmp_path)
    d = tmp_path / "reranked.toml"
    d.write_text(f"pipeline = 'retrieve(\"docs\", mode=\"dense\", k=5) >> rerank(\"cross:{tiny_cross}\", depth=4) % 3'\n")
    png = tmp_path / "plot.png"
    code, out, err = run_cli("experiment", a, d, "--queries", docs / "q.tsv", "--qrels",
                             docs / "qrels.txt", "--root", docs / "idx", "--stages", "--plot", png, "--no-cache")
    assert code == 0, err
    assert "reranked[1]" in out and "p_holm" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, err = run_cli("experiment", a, "--queries", docs / "q.tsv", "--qrels",
                             docs / "qrels.txt", "--root", docs / "idx", "--plot", tmp_path / "x.jpg")
    assert code != 0 and "give a .png" in err


def test_pipeline_commands_list_and_refuse_in_one_line(run_cli, docs, monkeypatch, capsys, tmp_path):
    code, out, _ = run_cli("pipeline", "stages")
    assert code == 0 and "retrieve(collection" in out and "rerank(spec" in out
    code, _, err = run_cli("pipeline", "show", "nope")
    assert code != 0 and "no default pipeline for 'nope'" in err and "Traceback" not in err
    bad = tmp_path / "bad.toml"
    bad.write_text("pipeline = 'retrieve(\"missing\")'\n")
    code, _, err = run_cli("pipeline", "run", bad, "--queries", docs / "q.tsv", "--root",
                           docs / "idx", "--out", tmp_path / "x.run", "--no-cache")
    assert code != 0 and "missing" in err and "Traceback" not in err and not (tmp_path / "x.run").exists()
    (tmp_path / "outside").mkdir()   # a pipeline file reaches only the collections under --root
    for name in ("../outside", "/etc", "a/../../outside", "./docs"):
        bad.write_text(f"pipeline = 'retrieve(\"{name}\")'\n")
        code, _, err = run_cli("pipeline", "run", bad, "--queries", docs / "q.tsv", "--root",
                               docs / "idx", "--out", tmp_path / "x.run", "--no-cache")
        assert code != 0 and f"collection {name!r}: a name under the collections' root" in err, err


def test_search_by_example_from_a_jsonl_query_file(run_cli, docs, monkeypatch, capsys, tmp_path):
    """JSONL queries carry example item ids; `score(by="examples")` never returns them and ranks their
    neighbours first; a query with neither text nor a known example gets no line."""
    q = tmp_path / "q.jsonl"
    q.write_text('{"qid": "a", "text": "", "examples": ["d1"]}\n{"qid": "b", "text": "school", "examples": ["nope"]}\n'
                 '{"qid": "c", "text": "", "examples": []}\n')
    pipe = tmp_path / "ex.toml"
    pipe.write_text("pipeline = 'fuse(score(\"docs\", by=\"examples\", k=5), score(\"docs\", k=5)) % 3'\n")
    code, _, err = run_cli("pipeline", "run", pipe, "--queries", q, "--root", docs / "idx",
                           "--out", tmp_path / "ex.run", "--no-cache")
    assert code == 0, err
    lines = [line.split() for line in (tmp_path / "ex.run").read_text().splitlines()]
    a = [d for qid, _, d, *_ in lines if qid == "a"]
    assert "d1" not in a and a[0] == "d7"  # the other river-flood document
    assert [d for qid, _, d, *_ in lines if qid == "b"][0] in ("d3", "d6")
    assert not [1 for qid, *_ in lines if qid == "c"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"qid": "a", "examples": "d1"}\n')
    code, _, err = run_cli("pipeline", "run", pipe, "--queries", bad, "--root", docs / "idx",
                           "--out", tmp_path / "x.run", "--no-cache")
    assert code != 0 and "bad.jsonl:1: 'examples' must be a list" in err


@pytest.mark.parametrize("n", [3_000, 200_000])
def test_a_pipeline_chaining_thousands_of_stages_is_one_line(n):
    from engine.core.ranking.pipeline.parse import PipelineSyntaxError
    text = " | ".join(['retrieve("docs")'] * n)
    with pytest.raises(PipelineSyntaxError, match="nests or chains too many stages") as exc:
        parse_pipeline(text, "p.toml: ")
    assert "\n" not in str(exc.value)



@pytest.mark.parametrize("where", ["source == 'x'", 'source == "x"', "source == 'it\\'s'", "a == 'x' and b in [\"y\"]"])
def test_a_printed_string_argument_parses_back_to_the_same_value(where):
    """Quotes of either kind inside a string argument survive `str(stage)`: what `pipeline show`, the
    `--stages` labels and the cache keys are made of."""
    from engine.core.ranking.pipeline.parse import parse_pipeline
    from engine.core.ranking.pipeline.retrieve import Retrieve
    stage = Retrieve("docs", k=5, where=where)
    again = parse_pipeline(str(stage))
    assert again.where == where and str(again) == str(stage)


def test_experiment_reports_each_pipelines_cost_per_query(run_cli, docs, tmp_path, monkeypatch, capsys, tiny_cross):
    """CPU and wall seconds per query for every pipeline and stage, non-negative; a pipeline's is the sum of its
    stages'; a `--stages` prefix read from the cache costs what its stage cost where it was computed; the table
    has the column."""
    a, _, _ = _pipes(tmp_path)
    d = tmp_path / "reranked.toml"
    d.write_text(f"pipeline = 'retrieve(\"docs\", mode=\"dense\", k=5) >> rerank(\"cross:{tiny_cross}\", depth=4) % 3'\n")
    args = ["experiment", a, d, "--queries", docs / "q.tsv", "--qrels", docs / "qrels.txt", "--root", docs / "idx",
            "--stages", "--cache", tmp_path / "cache"]
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    rows = {p["name"]: p for p in json.loads(out)["pipelines"]}
    for row in rows.values():
        cost = row["cost"]
        assert set(cost) == {"cpu_s_per_query", "wall_s_per_query"} and min(cost.values()) >= 0
        for stage in row["stages"]:
            assert min(stage["cost"].values()) >= 0
        assert cost["cpu_s_per_query"] == pytest.approx(sum(s["cost"]["cpu_s_per_query"] for s in row["stages"]))
    rerank = next(s for s in rows["reranked"]["stages"] if s["stage"].startswith("rerank"))
    assert rerank["cost"]["cpu_s_per_query"] > 0 and rerank["cost"]["wall_s_per_query"] > 0
    first = next(s for s in rows["reranked"]["stages"] if s["stage"].startswith("retrieve"))
    prefix = rows["reranked[1]"]["stages"][0]
    assert prefix["stage"] == first["stage"] and prefix["cost"] == first["cost"]
    assert rows["reranked"]["cost"]["cpu_s_per_query"] > rows["reranked[1]"]["cost"]["cpu_s_per_query"]
    code, out, err = run_cli(*args)
    assert code == 0 and "CPU s/query" in out, err


def test_plot_has_a_panel_per_metric_and_the_cost_panel(docs, tmp_path, tiny_cross, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from engine.eval import experiment as ex
    pipes = [("dense", parse_pipeline('retrieve("docs", mode="dense", k=5) % 3')),
             ("reranked", parse_pipeline(f'retrieve("docs", mode="dense", k=5) >> rerank("cross:{tiny_cross}", '
                                         'depth=4) % 3'))]
    from engine.core.ranking.pipeline.query import read_queries_file
    from engine.io.runs import read_qrels
    qs = read_queries_file(docs / "q.tsv")
    exp = ex.experiment(pipes, qs, read_qrels(docs / "qrels.txt"), "ndcg@3,recall@3",
                        Context(root=docs / "idx"), with_stages=True)
    fig = ex.figure(exp)
    try:
        titles = [ax.get_title() for ax in fig.axes]
        assert titles == ["ndcg@3 per pipeline", "recall@3 per pipeline", "effectiveness against cost",
                          "per-query differences against the first"]
        names = [r.name for r in exp.rows]
        assert names == ["dense", "reranked", "reranked[1]"]
        bars = fig.axes[0]
        labels = [t.get_text() for t in bars.texts]
        assert labels == [f"{exp.comparison.means[n]['ndcg@3']:.3f}" for n in names[::-1]]
        from matplotlib.container import BarContainer
        container = next(c for c in bars.containers if isinstance(c, BarContainer))
        assert len(container.errorbar.lines[2]) == 1  # the 95 % intervals are drawn
        widths = container.errorbar.lines[2][0].get_segments()
        half = [(seg[1][0] - seg[0][0]) / 2 for seg in widths]
        want = [ex.mean_ci([exp.per_query[n][q]["ndcg@3"] for q in exp.per_query[n]])[1] for n in names[::-1]]
        assert half == pytest.approx(want)
        cost = fig.axes[2]
        points = [tuple(c.get_offsets()[0]) for c in cost.collections]
        assert len(points) == len(names)  # one point per pipeline and per prefix
        assert [p[0] for p in points] == pytest.approx([ex.pipeline_cost(exp, r).cpu_s_per_query for r in exp.rows])
    finally:
        plt.close(fig)
    png = ex.plot(exp, tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
