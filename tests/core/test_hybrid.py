"""Hybrid search on a plain text collection (`--bm25`, `--mode`, `--fusion`) against each half, on the planted
rare-token / paraphrase set; the BM25 half equals bm25s over the same texts; the CLI in every mode."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.core.storage.index.bm25 import BM25Index
from engine.core.collection import Collection
from engine.errors import EngineError
from fixtures.planted import planted, write_planted

SMALL = {"n_codes": 24, "n_names": 8, "n_filler": 60}


@pytest.fixture(scope="module")
def planted_col(tmp_path_factory):
    folder = tmp_path_factory.mktemp("planted")
    docs, queries_file, qrels = write_planted(folder, **SMALL)
    col = Collection.build("pl", texts=docs, root=folder / "idx", model="minilm", bm25=True)
    return col, planted(**SMALL)[1], folder


def _top1(col, texts: list[str], **kw) -> list[str]:
    return [hits[0].id for hits in col.search_many(texts=texts, k=10, **kw)]


def test_hybrid_finds_rare_tokens_and_keeps_dense_on_paraphrases(planted_col):
    col, queries, _ = planted_col
    rare = [(t, d) for q, t, d in queries if q.startswith("r")]
    para = [(t, d) for q, t, d in queries if q.startswith("p")]
    rare_t, rare_d = [t for t, _ in rare], [d for _, d in rare]
    para_t, para_d = [t for t, _ in para], [d for _, d in para]
    assert _top1(col, rare_t, mode="dense") != rare_d, "the planted set should hold rare tokens dense misses"
    for fusion in ("weighted", "rrf"):
        assert _top1(col, rare_t, mode="hybrid", fusion=fusion) == rare_d
    dense = _top1(col, para_t, mode="dense")
    assert _top1(col, para_t) == dense  # the default: hybrid, weighted
    assert sum(a == b for a, b in zip(dense, para_d)) >= len(para) - 1


def test_bm25_mode_equals_bm25s_over_the_same_texts(planted_col):
    col, queries, _ = planted_col
    ref = BM25Index.build(col.ids, [it["text"] for it in col.items])
    for _, text, _ in queries[::7]:
        got = [(h.id, round(h.score, 4)) for h in col.search(text=text, k=5, mode="bm25")]
        assert got == [(d, round(s, 4)) for d, s in ref.search(text, 5)]


def test_add_keeps_bm25_in_step(tmp_path):
    docs, _ = planted(n_codes=6, n_names=2, n_filler=10)
    import csv
    for name, part in (("a.csv", docs[:10]), ("b.csv", docs[10:]), ("all.csv", docs)):
        with open(tmp_path / name, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(docs[0]))
            w.writeheader()
            w.writerows(part)
    Collection.build("c", texts=tmp_path / "a.csv", root=tmp_path / "i", model="minilm", bm25=True)
    added = Collection.build("c", texts=tmp_path / "b.csv", root=tmp_path / "i", add=True)
    fresh = Collection.build("f", texts=tmp_path / "all.csv", root=tmp_path / "i", model="minilm", bm25=True)
    for q in ("order shipment", docs[3]["text"].split()[3], "budget meeting notes"):
        assert [(h.id, round(h.score, 4)) for h in added.search(text=q, k=10, mode="bm25")] == \
            [(h.id, round(h.score, 4)) for h in fresh.search(text=q, k=10, mode="bm25")]
    added.verify()


def test_modes_refused_where_they_cannot_run(tmp_path):
    (tmp_path / "d.csv").write_text("id,text\na,one text\nb,another text\n")
    col = Collection.build("plain", texts=tmp_path / "d.csv", root=tmp_path, model="minilm")
    with pytest.raises(EngineError, match="no BM25 index.*--bm25"):
        col.search(text="one", mode="bm25")
    with pytest.raises(EngineError, match="must be one of dense, bm25, hybrid"):
        col.search(text="one", mode="lexical")
    with pytest.raises(EngineError, match="must be one of rrf, weighted"):
        col.search(text="one", fusion="max")
    assert col.search(text="one", k=1)[0].id == "a"  # default: dense where there is no BM25


def test_cli_modes_and_runs(run_cli, planted_col, monkeypatch, capsys):
    col, queries, folder = planted_col
    root = str(folder / "idx")
    for mode in ("dense", "bm25", "hybrid"):
        run = folder / f"{mode}.run"
        code, _, err = run_cli("search", "pl", "--queries", folder / "queries.tsv", "--out", run,
                               "--mode", mode, "-k", "5", "--root", root, "-q")
        assert code == 0, err
        answered = {line.split()[0] for line in run.read_text().splitlines()}
        assert answered == {q for q, _, _ in queries} if mode != "bm25" else answered <= {q for q, _, _ in queries}
    code, out, _ = run_cli("search", "pl", queries[0][1], "--json", "-k", "3", "--root", root,
                           "--where", 'kind == "code" and year >= 2001')
    assert code == 0 and '"kind": "code"' in out
    for bad, msg in ((["--mode", "x"], "--mode must be one of"), (["--fusion", "x"], "--fusion must be one of"),
                     (["--where", "year >"], "--where 'year >': at position 7")):
        code, _, err = run_cli("search", "pl", "q", "--root", root, *bad)
        assert code != 0 and msg in err and len(err.strip().splitlines()) == 1


FLOOD_DOCS = [("f1", "Flooding closed the river road for a week"), ("b1", "The old bridge was painted red"),
              ("n1", "A new bakery opened on the main street"), ("n2", "Council meeting notes from the spring")]


def _flood_csv(path: Path, rows) -> Path:
    path.write_text("id,text\n" + "".join(f"{i},{t}\n" for i, t in rows))
    return path


def test_bm25_finds_an_inflected_form_at_rank_1(run_cli, tmp_path, monkeypatch, capsys):
    """`--bm25` analyses English by default: "floods" finds the flooding document first; `none` does not."""
    src = _flood_csv(tmp_path / "d.csv", FLOOD_DOCS)
    root = tmp_path / "idx"
    code, _, err = run_cli("build", "en", "--texts", src, "--bm25", "--model", "minilm",
                           "--root", root, "-q")
    assert code == 0, err
    code, _, err = run_cli("build", "raw", "--texts", src, "--bm25", "--bm25-analyzer", "none",
                           "--model", "minilm", "--root", root, "-q")
    assert code == 0, err
    en, raw = Collection.open("en", root), Collection.open("raw", root)
    assert en.search(text="floods", k=1, mode="bm25")[0].id == "f1"
    assert en.search(text="bridges", k=1, mode="bm25")[0].id == "b1"
    assert en.search(text="floods", k=1, mode="hybrid")[0].id == "f1"
    assert raw.search(text="floods", k=4, mode="bm25") == []
    code, _, err = run_cli("build", "en", "--texts", src, "--add", "--bm25-analyzer", "none",
                           "--root", root)
    assert code != 0 and "analyses BM25 texts with 'english'" in err and len(err.strip().splitlines()) == 1
    for bad, msg in ((["--bm25", "--bm25-analyzer", "porter"], "--bm25-analyzer must be one of english, none"),
                     (["--bm25-analyzer", "none"], "give --bm25 too")):
        code, _, err = run_cli("build", "x", "--texts", src, "--root", root, *bad)
        assert code != 0 and msg in err and len(err.strip().splitlines()) == 1


def test_a_collection_built_before_analyzers_keeps_its_own(tmp_path, monkeypatch):
    """A BM25 role written by the old writer (stop words, no stemming, no analyzer recorded) is searched and
    rebuilt on --add / delete with what it was built with, equal to a fresh index under that analysis."""
    import engine.core.storage.index.bm25 as bm25
    from engine.core.storage.builder.update import delete_ids
    legacy = bm25.Analyzer("stopwords-en", "en", None)

    def old_writer(self, folder):  # the writer before analyzers had names
        self.retriever.save(str(folder), show_progress=False)
        bm25.write_json(folder / bm25.IDS_FILE, self.ids)
        bm25.write_json(folder / bm25.META_FILE, {"stopwords": "en", "method": self.method, "library": "bm25s",
                                                  "docs": len(self.ids)})
    with monkeypatch.context() as m:
        m.setitem(bm25.ANALYZERS, "legacy", legacy)
        m.setattr(bm25, "DEFAULT_ANALYZER", "legacy")
        m.setattr(bm25.BM25Index, "write_into", old_writer)
        Collection.build("old", texts=_flood_csv(tmp_path / "a.csv", FLOOD_DOCS[:2]), root=tmp_path,
                         model="minilm", bm25=True)
    meta = (Collection.open("old", tmp_path).file("bm25") / "bm25.json").read_text()
    assert "analyzer" not in meta and "stem" not in meta
    old = Collection.open("old", tmp_path)
    assert old.search(text="floods", k=2, mode="bm25") == []  # no stemming: as it was built
    assert old.search(text="flooding", k=1, mode="bm25")[0].id == "f1"
    added = Collection.build("old", texts=_flood_csv(tmp_path / "b.csv", FLOOD_DOCS[2:]), root=tmp_path, add=True)
    ref = BM25Index.build([d for d, _ in FLOOD_DOCS], [t for _, t in FLOOD_DOCS], analyzer=legacy)
    for q in ("floods", "flooding road", "the bridges", "bakery street"):
        assert [(h.id, round(h.score, 4)) for h in added.search(text=q, k=4, mode="bm25")] == \
            [(d, round(s, 4)) for d, s in ref.search(q, 4)]
    delete_ids("old", ["n2"], root=tmp_path)
    kept = Collection.open("old", tmp_path)
    assert kept.search(text="floods", k=4, mode="bm25") == []
    assert bm25.BM25Index.load(kept.file("bm25")).analyzer == legacy
    kept.verify()
