"""Metadata filters (`--where`): the parser's errors name the position; the vectorized evaluation (stored
columns, or items rows) equals the row-by-row reference; a filtered search equals brute-force filtering of
exact results and returns k whenever k items match (exact rows, and FAISS selectors)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.collection import Collection
from engine.core.ranking.filters import matches, parse_where
from engine.core.ranking.hybrid import filter_mask, search_rows
from engine.errors import EngineError

FIELDS = ("year", "split", "score")
CELLS = st.one_of(st.none(), st.integers(-5, 5), st.sampled_from(["a", "b", "10", "2.5", "-1", "x y", ""]),
                  st.floats(-3, 3, allow_nan=False).map(lambda v: round(v, 1)))
LITERALS = st.one_of(st.integers(-5, 12).map(str), st.sampled_from(['"a"', "'b'", '"10"', '"2.5"', '""', "2.5",
                                                                    "-1", "1e1"]))


@st.composite
def expressions(draw, depth: int = 0) -> str:
    if depth < 2 and draw(st.booleans()):
        op = draw(st.sampled_from(["and", "or"]))
        left, right = draw(expressions(depth + 1)), draw(expressions(depth + 1))
        text = f"({left}) {op} ({right})"
        return f"not ({text})" if draw(st.booleans()) else text
    field = draw(st.sampled_from(FIELDS + ("missing",)))
    if draw(st.integers(0, 4)) == 0:
        return f"{field} in [{', '.join(draw(st.lists(LITERALS, max_size=3)))}]"
    return f"{field} {draw(st.sampled_from(['==', '!=', '<', '<=', '>', '>=']))} {draw(LITERALS)}"


def _rows(cells: list) -> list[dict]:
    rows = []
    for n in range(0, len(cells) - 2, 3):
        rows.append({f: v for f, v in zip(FIELDS, cells[n:n + 3]) if v is not None or n % 2})
    return rows


@pytest.fixture(scope="module")
def filtered(tmp_path_factory):
    rng = np.random.default_rng(0)
    n = 600
    meta = [{"year": int(2000 + i % 25), "split": "ab"[i % 2], "score": str(round(float(rng.normal()), 2)),
             **({"tag": "rare"} if i % 97 == 0 else {})} for i in range(n)]
    vectors = rng.normal(size=(n, 16)).astype(np.float32)
    col = Collection.from_vectors("f", [f"d{i}" for i in range(n)], vectors, None, "text",
                                  root=tmp_path_factory.mktemp("filters"), meta=meta)
    return col, meta


@settings(max_examples=150, deadline=None)
@given(cells=st.lists(CELLS, min_size=3, max_size=60), expr=expressions())
def test_columns_equal_the_row_by_row_reference(tmp_path_factory, cells, expr):
    """Stored columns (written at commit) and the reference `matches` agree on every row."""
    rows = _rows(cells)
    if not rows:
        return
    root = tmp_path_factory.mktemp("prop")
    col = Collection.from_vectors("p", [f"d{i}" for i in range(len(rows))],
                                  np.eye(len(rows), 4, dtype=np.float32) + 0.1, None, "text", root=root, meta=rows)
    tree = parse_where(expr)
    assert filter_mask(col, expr, known_fields=False).tolist() == [matches(tree, r) for r in col.items]


def test_numbers_compare_as_numbers_and_missing_fields_never_match(filtered):
    col, meta = filtered
    mask = filter_mask(col, 'year >= 2020 and split == "a"')
    assert mask.tolist() == [m["year"] >= 2020 and m["split"] == "a" for m in meta]
    assert filter_mask(col, "score > 1").tolist() == [float(m["score"]) > 1 for m in meta]  # text cells as numbers
    assert filter_mask(col, 'tag != "x"').tolist() == ["tag" in m for m in meta]            # missing: no match
    assert filter_mask(col, 'not tag == "rare"').sum() == len(meta) - sum("tag" in m for m in meta)
    assert filter_mask(col, 'split in ["a", "c"]').sum() == len(meta) // 2


@pytest.mark.parametrize("expr, position", [
    ("year >= 2020 and", 17), ("year = 3", 6), ('split == "a', 10), ("(year > 1", 10), ("year > 1 x", 10),
    ("in == 3", 1), ("year in [1, 2", 14), ("year > 12abc", 8), ("", None)])
def test_bad_expressions_are_one_line_naming_the_position(expr, position):
    with pytest.raises(EngineError) as err:
        parse_where(expr)
    msg = str(err.value)
    assert "\n" not in msg and "where" in msg
    if position is not None:
        assert f"at position {position}:" in msg


def _brute(col, q: np.ndarray, mask: np.ndarray, k: int) -> list[str]:
    emb = np.asarray(col.embeddings)
    rows = np.flatnonzero(mask)
    scores = emb[rows] @ q
    order = np.lexsort((rows, -scores))[:k]
    return [col.ids[r] for r in rows[order]]


@pytest.mark.parametrize("expr", ['tag == "rare"', 'year >= 2020 and split == "a"', "score > 0 or year < 2003"])
def test_filtered_search_equals_brute_force_filtering(filtered, expr, monkeypatch):
    col, _ = filtered
    q = np.asarray(col.embeddings[7], dtype=np.float32)
    mask = filter_mask(col, expr)
    for exact_rows in (10**9, 0):  # exact over the matching rows; FAISS with an IDSelector
        monkeypatch.setattr("engine.core.storage.index.filtered.EXACT_ROWS", exact_rows)
        for k in (1, 5, 50):
            hits = col.hits(*search_rows(
                col, k, vectors=q[None], where=expr))[0]
            assert [h.id for h in hits] == _brute(col, q, mask, k)
            assert len(hits) == min(k, int(mask.sum()))


def test_filtered_search_on_an_ivf_index_returns_k(tmp_path, monkeypatch):
    """An approximate index restricted by a selector: k results whenever k items match, the exact ones at
    nprobe = nlist."""
    from engine.core.ranking.hybrid import search_rows
    rng = np.random.default_rng(1)
    n = 2000
    col = Collection.from_vectors("ivf", [f"d{i}" for i in range(n)], rng.normal(size=(n, 8)).astype(np.float32),
                                  None, "text", root=tmp_path, index="IVF16,Flat",
                                  meta=[{"g": i % 50} for i in range(n)])
    monkeypatch.setattr("engine.core.storage.index.filtered.EXACT_ROWS", 0)
    q = np.asarray(col.embeddings[3], dtype=np.float32)[None]
    from engine.core.storage.index.faiss_index import SearchKnobs
    hits = col.hits(*search_rows(col, 20, vectors=q, where="g == 7", knobs=SearchKnobs(nprobe=16)))[0]
    assert [h.id for h in hits] == _brute(col, q[0], filter_mask(col, "g == 7"), 20)
    hits = col.hits(*search_rows(col, 20, vectors=q, where="g < 25"))[0]
    assert len(hits) == 20 and all(h.meta["g"] < 25 for h in hits)


@pytest.mark.parametrize("text", ["(" * 5000 + "a == 1" + ")" * 5000, "not " * 5000 + "a == 1",
                                  "(not " * 3000 + "a == 1" + ")" * 3000])
def test_deep_nesting_is_one_line_over_the_depth_limit(text, monkeypatch):
    with pytest.raises(EngineError, match="max_filter_depth") as exc:
        parse_where(text)
    assert "\n" not in str(exc.value)
    monkeypatch.setenv("ENGINE_MAX_FILTER_DEPTH", "100000000")  # past what the stack holds: still one line
    with pytest.raises(EngineError, match="max_filter_depth"):
        parse_where(text)


def test_nesting_within_the_limit_parses_and_evaluates_as_the_reference():
    text = "not " * 63 + "a == 1"
    expr = parse_where(text)
    assert matches(expr, {"a": 1}) is False and matches(expr, {"a": 2}) is True


def test_a_selective_filter_maps_the_vectors_once_and_never_loads_the_index(filtered, tmp_path):
    """An opened generation maps its embeddings once (every filtered or hybrid query reuses the mapping and
    its warm pages); a filter that leaves few rows scans them exactly and never reads the FAISS index."""
    col, meta = filtered
    fresh = Collection.open(col.name, col.path.parent)
    assert fresh.embeddings is fresh.embeddings
    q = np.asarray(fresh.embeddings[3], dtype=np.float32)[None]
    hits = fresh.hits(*search_rows(fresh, 5, vectors=q, where='tag == "rare"'))[0]
    assert [h.id for h in hits] == _brute(fresh, q[0], filter_mask(fresh, 'tag == "rare"'), 5)
    assert fresh._index is None
    fresh.hits(*search_rows(fresh, 5, vectors=q))  # an unfiltered query does load it
    assert fresh._index is not None


def test_a_wide_filter_on_an_exact_index_searches_the_index_and_stays_exact(filtered, tmp_path, monkeypatch):
    """A filter keeping more than GATHER_SHARE of a Flat collection's rows searches the index with a selector
    (no gather of the rows) and returns the brute-force top-k; a narrow one gathers its rows; an approximate
    index gathers even a wide filter's rows (exact results)."""
    from engine.core.storage.index import filtered as module
    col, _ = filtered
    q = np.asarray(col.embeddings[11], dtype=np.float32)[None]
    gathered = []
    real = module.exact_rows
    monkeypatch.setattr(module, "exact_rows", lambda *a: gathered.append(len(a[1])) or real(*a))
    for expr, gathers in (('split == "a"', False), ('tag == "rare"', True)):
        gathered.clear()
        hits = col.hits(*search_rows(col, 10, vectors=q, where=expr))[0]
        assert [h.id for h in hits] == _brute(col, q[0], filter_mask(col, expr), 10)
        assert bool(gathered) == gathers, expr
    ivf = Collection.from_vectors("ivf", col.ids, np.asarray(col.embeddings), None, "text", root=tmp_path,
                                  index="IVF4,Flat", meta=[{"split": "ab"[i % 2]} for i in range(len(col))])
    gathered.clear()
    hits = ivf.hits(*search_rows(ivf, 10, vectors=q, where='split == "a"'))[0]
    assert gathered and [h.id for h in hits] == _brute(ivf, q[0], filter_mask(ivf, 'split == "a"'), 10)
