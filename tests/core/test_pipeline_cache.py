"""The pipeline runner and its cache, with small stages made here (no model, no collection): the operators are
Stage's own; one compiled plan checks and prepares each stage once; a stage is cached by what computed it (a
changed fingerprint, upstream too, is recomputed); a degraded output is said and never cached; an entry that
lacks queries or cannot be read is recomputed; ENGINE_CACHE_MAX_GB evicts the least recently used; `engine
cache info` and `engine cache clear`; a stage's reported counts reach `engine experiment --json`."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from engine.core.ranking.pipeline import Context, Query, Stage
from engine.core.ranking.pipeline.cache import StageCache, cache_files, stage_kind
from engine.core.ranking.pipeline.run import run_pipeline
from engine.core.ranking.pipeline.stage import Concat, Cutoff, Fuse, Then, keep_args
from engine.errors import EngineError
from engine.io.ranking import Ranking

QS = [Query("q1", "rivers"), Query("q2", "schools")]


class Listed(Stage):
    """A first stage whose ranking is the ids listed in a file, best first; its fingerprint is the file's text
    (as a reranker's is its model files)."""
    name = "listed"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.runs = 0
        keep_args(self, [path], {})

    def fingerprint(self, ctx: Context) -> str:
        return Path(self.path).read_text()

    def transform(self, queries, run, ctx):
        self.runs += 1
        ids = Path(self.path).read_text().split()
        return {q.qid: Ranking.of([(d, float(len(ids) - i)) for i, d in enumerate(ids)]) for q in queries}


class Reverse(Stage):
    """Reorders its input, last first; reports the pairs it scored, and degrades when told to."""
    name = "reverse"

    def __init__(self, tag: str = "") -> None:
        super().__init__()
        self.runs, self.fall_short = 0, False
        keep_args(self, [tag] if tag else [], {})

    def needs_input(self) -> bool:
        return True

    def transform(self, queries, run, ctx):
        self.runs += 1
        if self.fall_short:
            ctx.degrade(self, "the window was kept in its input order")
            return dict(run)
        ctx.note(self, pairs_scored=sum(len(run[q.qid]) for q in queries), pairs_cached=0)
        return {q.qid: Ranking.of([(d, float(i)) for i, d in enumerate(run[q.qid].ids)]) for q in queries}


@pytest.fixture()
def listed(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text("a b c d")
    return path


def _ctx(cache) -> Context:
    return Context(cache=StageCache(cache))


# ---------------------------------------------------------------- operators and the one walk

def test_the_operators_are_defined_on_stage_itself(listed):
    for op in ("__rshift__", "__mod__", "__or__", "__xor__"):
        assert op in Stage.__dict__, op  # in the class body, not attached by another module
    a, b = Listed(str(listed)), Reverse()
    assert isinstance(a >> b, Then) and isinstance(a % 2, Cutoff) and isinstance(a | a, Fuse)
    assert isinstance(a ^ a, Concat)
    with pytest.raises(EngineError, match="joins two stages"):
        a >> 3
    from engine.core.ranking.pipeline.parse import parse_pipeline
    text = '(retrieve("a") | retrieve("b") >> rerank("cross:x", depth=4)) % 5 ^ retrieve("c", k=3)'
    assert str(parse_pipeline(str(parse_pipeline(text)))) == str(parse_pipeline(text))


def test_each_stage_is_checked_and_prepared_once_per_run(listed, tmp_path, monkeypatch):
    checks: dict[int, int] = {}
    prepares: dict[int, int] = {}
    monkeypatch.setattr(Stage, "check", lambda self, ctx: checks.__setitem__(id(self), checks.get(id(self), 0) + 1))
    monkeypatch.setattr(Stage, "prepare",
                        lambda self, ctx: prepares.__setitem__(id(self), prepares.get(id(self), 0) + 1))
    first, second, other, last = Listed(str(listed)), Reverse(), Listed(str(listed)), Listed(str(listed))
    pipe = Fuse(first >> second, other, depth=3) % 2 ^ last

    def nodes(s):
        return [s] + [n for c in s.children() for n in nodes(c)]
    everyone = {id(s) for s in nodes(pipe)}
    run_pipeline(pipe, QS, _ctx(tmp_path / "cache"))
    assert set(checks) == everyone and set(checks.values()) == {1}
    assert set(prepares) == everyone and set(prepares.values()) == {1}
    assert first.runs == second.runs == 1
    # again on a fresh cache object (the disk's entries): every stage checked once more, the cached ones
    # neither prepared nor run, and the step before a cached one not run either
    checks.clear()
    prepares.clear()
    run_pipeline(Then(first, second), QS, _ctx(tmp_path / "cache"))
    assert set(checks.values()) == {1} and len(checks) == 3
    assert id(first) not in prepares and id(second) not in prepares
    assert first.runs == second.runs == 1


# ---------------------------------------------------------------- the key: what computed it

def test_a_changed_fingerprint_is_recomputed_upstream_too(listed, tmp_path):
    cache = tmp_path / "cache"
    pipe = Listed(str(listed)) >> Reverse()
    run1 = run_pipeline(pipe, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [False, False] and run1["q1"].ids == ("d", "c", "b", "a")
    for f in cache_files(cache):
        os.utime(f.path, (1_000_000, 1_000_000))
    run_pipeline(pipe, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [True]  # the last step's entry: the first step is not even read
    assert sorted(f.used > 1_000_000 for f in cache_files(cache)) == [False, True]  # a read marks it used
    listed.write_text("e a b")  # a replaced model: same stage text, another fingerprint
    run2 = run_pipeline(pipe, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [False, False]  # the reverse step too: its input's key changed
    assert run2["q1"].ids == ("b", "a", "e")


def test_another_precision_is_another_entry(listed, tmp_path):
    """A model's numbers differ by ≈1e-3 between float32 and half precision: a ranking cached under one is
    never served for the other (stages and the rerankers' pair scores alike)."""
    from engine.core.encoders.device import set_dtype
    from engine.core.ranking.rerankers.fingerprint import fingerprint
    from engine.core.ranking.rerankers.spec import RerankerSpec
    cache, pipe = tmp_path / "cache", Listed(str(listed)) >> Reverse()
    (model := tmp_path / "model").mkdir()
    (model / "config.json").write_text("{}")
    spec = RerankerSpec.parse(f"maxsim:{model}")
    run_pipeline(pipe, QS, _ctx(cache))
    before = fingerprint(spec)
    set_dtype("bfloat16")  # the conftest puts it back after the test
    run_pipeline(pipe, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [False, False] and fingerprint(spec) != before
    set_dtype("float32")  # float32 is what auto computes on a CPU: the first entries serve it
    run_pipeline(pipe, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [True] and fingerprint(spec) == before


def test_a_degraded_stage_is_said_not_cached_and_recomputed(listed, tmp_path, capsys):
    cache = tmp_path / "cache"
    rev = Reverse()
    rev.fall_short = True
    pipe = Listed(str(listed)) >> rev % 3
    run_pipeline(pipe, QS, ctx := _ctx(cache))
    err = capsys.readouterr().err
    assert "the window was kept in its input order" in err and "not cached" in err
    assert [(r.cached, r.degraded) for r in ctx.log] == [(False, []), (False, ["the window was kept in its input "
                                                                               "order"])]
    rev.fall_short = False
    run_pipeline(pipe, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [True, False] and rev.runs == 2  # the listing was cached, not this
    assert "not cached" not in capsys.readouterr().err
    run_pipeline(pipe, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [True] and rev.runs == 2


def test_what_reads_a_degraded_output_is_not_cached_either(listed, tmp_path):
    cache = tmp_path / "cache"
    rev = Reverse("first")
    rev.fall_short = True
    pipe = Listed(str(listed)) >> rev >> Reverse("second")
    run_pipeline(pipe, QS, _ctx(cache))
    rev.fall_short = False
    run_pipeline(pipe, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [True, False, False]


def test_an_entry_missing_queries_or_damaged_is_recomputed(listed, tmp_path):
    cache = tmp_path / "cache"
    stage = Listed(str(listed))
    run_pipeline(stage, QS, _ctx(cache))
    [entry] = [f.path for f in cache_files(cache)]
    data = json.loads(entry.read_text())
    del data["run"]["q2"]
    entry.write_text(json.dumps(data))
    run = run_pipeline(stage, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [False] and stage.runs == 2 and set(run) == {"q1", "q2"}
    assert set(json.loads(entry.read_text())["run"]) == {"q1", "q2"}  # rewritten whole
    entry.write_text('{"stage": "listed()", "run": {"q1": [1, 2')
    run_pipeline(stage, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [False] and stage.runs == 3
    run_pipeline(stage, QS, ctx := _ctx(cache))
    assert [r.cached for r in ctx.log] == [True]


# ---------------------------------------------------------------- the size limit

def test_the_least_recently_used_go_past_the_size_limit(tmp_path, monkeypatch):
    monkeypatch.delenv("ENGINE_CACHE_MAX_GB", raising=False)
    folder = tmp_path / "cache"
    big = {"q1": Ranking.of([(f"doc{i}", float(i)) for i in range(200)])}
    writer = StageCache(folder)
    writer.put("a" * 32, big, 'retrieve("a")')
    size = (folder / "aa" / f"{'a' * 32}.json").stat().st_size
    scores = folder / "scores" / "cross" / "old.json"
    scores.parent.mkdir(parents=True)
    scores.write_text("x" * 100)
    writer.put("b" * 32, big, 'retrieve("b")')
    now = time.time()
    for name, age in (("a", 300), ("b", 200)):
        os.utime(folder / (name * 2) / f"{name * 32}.json", (now - age, now - age))
    os.utime(scores, (now - 100, now - 100))
    monkeypatch.setenv("ENGINE_CACHE_MAX_GB", str((2 * size + 50) / 2**30))  # two entries fit, not three
    cache = StageCache(folder)
    assert cache.get("a" * 32) == big  # a read: a becomes the most recently used
    cache.put("c" * 32, big, 'retrieve("c")')
    left = sorted(f.path.stem for f in cache_files(folder))
    assert left == ["a" * 32, "c" * 32]  # b, then the older pair scores, went; a was read after them
    assert not scores.exists()
    for bad, says in (("lots", "is not a number"), ("0", "must be a positive number"), ("-1", "positive"),
                      ("inf", "positive")):
        monkeypatch.setenv("ENGINE_CACHE_MAX_GB", bad)
        with pytest.raises(EngineError, match=f"ENGINE_CACHE_MAX_GB='{bad}' .*{says}"):
            StageCache(folder)
    StageCache(None)  # a cache in memory has no size limit to read


def test_a_bad_size_limit_is_one_line_before_any_work(run_cli, tmp_path, monkeypatch, listed):
    pipe = tmp_path / "p.toml"
    pipe.write_text("pipeline = 'retrieve(\"docs\")'\n")
    (tmp_path / "q.tsv").write_text("q1\trivers\n")
    monkeypatch.setenv("ENGINE_CACHE_MAX_GB", "ten")
    code, _, err = run_cli("pipeline", "run", pipe, "--queries", tmp_path / "q.tsv", "--out", tmp_path / "x.run",
                           "--cache", tmp_path / "cache")
    assert code != 0 and "ENGINE_CACHE_MAX_GB='ten' is not a number" in err and "Traceback" not in err


# ---------------------------------------------------------------- engine cache

def test_stage_kind_is_read_from_the_stored_text():
    assert stage_kind('retrieve("a", k=3)') == "retrieve"
    assert stage_kind('retrieve("a") | retrieve("b")') == "fuse"
    assert stage_kind('fuse(retrieve("a"), retrieve("b"), depth=3)') == "fuse"
    assert stage_kind('retrieve("a") >> rerank("cross:x")') == "then" and stage_kind("((") == "unreadable"


def test_cache_info_and_clear_older_than(run_cli, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "cache"
    cache = StageCache(folder)
    one = {"q1": Ranking.of([("d1", 1.0)])}
    texts = {"1" * 32: 'retrieve("docs", k=5)', "2" * 32: 'retrieve("docs", mode="bm25")',
             "3" * 32: 'retrieve("a") | retrieve("b")', "4" * 32: 'rerank("cross:m", depth=4)'}
    for key, text in texts.items():
        cache.put(key, one, text)
    (folder / "scores").mkdir()
    (folder / "scores" / "pairs.json").write_text("{}" * 50)
    (folder / "notes.txt").write_text("not the cache's")
    old = time.time() - 20 * 86_400
    os.utime(folder / "11" / f"{'1' * 32}.json", (old, old))
    os.utime(folder / "scores" / "pairs.json", (old, old))
    code, out, err = run_cli("cache", "info", "--cache", folder, "--json")
    assert code == 0, err
    got = json.loads(out)
    sizes = {f.path.name: f.size for f in cache_files(folder)}
    assert got["entries"] == 5 and got["bytes"] == sum(sizes.values())
    assert {k: v["entries"] for k, v in got["kinds"].items()} == {"retrieve": 2, "fuse": 1, "rerank": 1,
                                                                  "rerank scores": 1}
    assert got["kinds"]["rerank scores"]["bytes"] == 100
    code, out, err = run_cli("cache", "info", "--cache", folder)
    assert code == 0 and "5 entries" in out and "rerank scores" in out
    code, out, err = run_cli("cache", "clear", "--cache", folder, "--older-than", "10")
    assert code == 0, err
    assert "removed 2 entries not used for more than 10 days" in out
    assert sorted(f.path.stem for f in cache_files(folder)) == ["2" * 32, "3" * 32, "4" * 32]
    for bad in ("0", "-3", "nan"):
        code, _, err = run_cli("cache", "clear", "--cache", folder, "--older-than", bad)
        assert code != 0 and "--older-than" in err and "Traceback" not in err
    assert len(cache_files(folder)) == 3
    code, out, err = run_cli("cache", "clear", "--cache", folder)
    assert code == 0 and "removed 3 entries" in out
    assert not cache_files(folder) and (folder / "notes.txt").exists()  # only what the cache wrote goes
    code, out, _ = run_cli("cache", "info", "--cache", folder, "--json")
    assert json.loads(out)["entries"] == 0


# ---------------------------------------------------------------- what a run records

def test_counts_a_stage_reports_reach_the_experiment_json(listed, tmp_path):
    from engine.eval.experiment import experiment, render, to_json
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    pipes = [("plain", Listed(str(listed)) % 2), ("reversed", Listed(str(listed)) >> Reverse() % 2)]
    exp = experiment(pipes, QS, qrels, "recall@2", _ctx(tmp_path / "cache"))
    stages = {p["name"]: p["stages"] for p in to_json(exp)["pipelines"]}
    costs = {n: [s.pop("cost") for s in st] for n, st in stages.items()}
    assert stages["plain"] == [{"stage": f'listed("{listed}")', "cached": False}]
    assert stages["reversed"] == [{"stage": f'listed("{listed}")', "cached": True},
                                  {"stage": "reverse()", "cached": False, "pairs_scored": 8, "pairs_cached": 0}]
    assert costs["reversed"][0] == costs["plain"][0]  # read from the cache: what computing it cost in this run
    assert all(v >= 0 for c in costs.values() for cost in c for v in cost.values())
    assert "1 of 3 stage outputs read from the cache" in render(exp)
    assert all(r.seconds >= 0 for row in exp.rows for r in row.log)
