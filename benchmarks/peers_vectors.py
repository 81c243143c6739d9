"""The engine and LanceDB over the same stored vectors, for `benchmarks/peers.py --only vectors`: each side's
measurements run in a fresh process of their own (this file run as a script), so neither inherits the other's
warm pages or threads.

    python benchmarks/peers_vectors.py engine|lancedb queries DIR Q   p50 wall and CPU ms per query of Q queries
                                                                      × PASSES: 1 % and 50 % metadata filters,
                                                                      dense, BM25, hybrid; the first filtered
                                                                      query apart; every result's top-10 ids
    python benchmarks/peers_vectors.py engine|lancedb delete DIR Q    Q dense queries, then deleting every
                                                                      10th id (wall and CPU), then the same
                                                                      queries right after
    python benchmarks/peers_vectors.py engine|lancedb|numpy costs DIR 0
                                                                      the store's own costs from DIR/vectors.npy:
                                                                      build, delete every 10th id, compact (wall,
                                                                      CPU, bytes on disk after each), the whole
                                                                      process's CPU and peak memory; numpy: the
                                                                      floor (np.save of the vectors and ids, then
                                                                      of the kept rows gathered from the map)

DIR holds `queries.npy`, `query_texts.json` and each side's store: `engine/` (collections `v`: vectors, metadata
and BM25; `d`: vectors and metadata) and `lancedb/` (tables `v`, with a full-text index, and `d`). LanceDB's
side imports nothing of the engine.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

PASSES = 3
K = 10
ONE_PERCENT, HALF = "g == 7", "h == 1"  # the engine's --where; LanceDB's SQL below says the same


def timed(fn, items, passes: int = PASSES) -> dict:
    """p50 wall ms of `fn(item)` over `passes` passes of `items`, CPU ms per call from the whole loop's CPU time
    (all threads; the process clock ticks in milliseconds: per-call readings would be quantised), and the first
    pass's results. One call before, unmeasured: what a first call loads (an index) is `first`'s figure."""
    fn(items[0])
    walls, out = [], []
    c = time.process_time()
    for p in range(passes):
        for item in items:
            t = time.perf_counter()
            res = fn(item)
            walls.append(time.perf_counter() - t)
            if p == 0:
                out.append(res)
    return {"p50_ms": statistics.median(walls) * 1e3, "cpu_ms": (time.process_time() - c) * 1e3 / len(walls),
            "ids": out}


def first(fn, item) -> float:
    t = time.perf_counter()
    fn(item)
    return (time.perf_counter() - t) * 1e3


# ---------------------------------------------------------------------------------------------- engine
def engine_searches(folder: Path, name: str):
    from engine.core.collection import Collection
    from engine.core.ranking.hybrid import search_rows
    col = Collection.open(name, folder / "engine")

    def ids(scores_rows) -> list[str]:
        return [h.id for h in col.hits(*scores_rows)[0]]

    return {"filter_1pct": lambda q: ids(search_rows(col, K, vectors=q[0][None], where=ONE_PERCENT)),
            "filter_50pct": lambda q: ids(search_rows(col, K, vectors=q[0][None], where=HALF)),
            "dense": lambda q: ids(search_rows(col, K, vectors=q[0][None], mode="dense")),
            "bm25": lambda q: ids(search_rows(col, K, texts=[q[1]], mode="bm25")),
            "hybrid": lambda q: ids(search_rows(col, K, texts=[q[1]], vectors=q[0][None], mode="hybrid",
                                                fusion_method="rrf"))}


def engine_delete(folder: Path, gone: list[str]) -> None:
    from engine.core.storage.builder.update import delete_ids
    delete_ids("d", gone, root=folder / "engine")


# ---------------------------------------------------------------------------------------------- LanceDB
def lancedb_searches(folder: Path, name: str):
    import lancedb
    table = lancedb.connect(str(folder / "lancedb")).open_table(name)

    def ids(query) -> list[str]:
        return query.select(["id"]).limit(K).to_arrow()["id"].to_pylist()

    def vector(q):
        return table.search(q[0], vector_column_name="vector").distance_type("dot")

    return {"filter_1pct": lambda q: ids(vector(q).where("g = 7", prefilter=True)),
            "filter_50pct": lambda q: ids(vector(q).where("h = 1", prefilter=True)),
            "dense": lambda q: ids(vector(q)),
            "bm25": lambda q: ids(table.search(q[1], query_type="fts")),
            "hybrid": lambda q: ids(table.search(query_type="hybrid", vector_column_name="vector")
                                    .vector(q[0]).text(q[1]).distance_type("dot")),
            "_table": table}


def lancedb_delete(folder: Path, gone: list[str], table) -> None:
    table.delete("id IN (" + ",".join(f"'{i}'" for i in gone) + ")")


# ---------------------------------------------------------------------------------------------- workers
def queries(folder: Path, q: int) -> list[tuple[np.ndarray, str]]:
    vecs = np.load(folder / "queries.npy")[:q]
    texts = json.loads((folder / "query_texts.json").read_text())[:q]
    return list(zip(vecs, texts))


def run_queries(side: str, folder: Path, q: int) -> dict:
    qs = queries(folder, q)
    t = time.perf_counter()
    searches = (engine_searches if side == "engine" else lancedb_searches)(folder, "v")
    out = {"open_ms": (time.perf_counter() - t) * 1e3,
           "first_filtered_ms": first(searches["filter_1pct"], qs[0])}
    for label, fn in searches.items():
        if not label.startswith("_"):
            out[label] = timed(fn, qs)
    return out


def run_delete(side: str, folder: Path, q: int) -> dict:
    qs = queries(folder, q)
    searches = (engine_searches if side == "engine" else lancedb_searches)(folder, "d")
    n = int(json.loads((folder / "sizes.json").read_text())["n"])
    gone = [f"d{i}" for i in range(0, n, 10)]
    before = timed(searches["dense"], qs)
    t, c = time.perf_counter(), time.process_time()
    if side == "engine":
        engine_delete(folder, gone)
        searches = engine_searches(folder, "d")  # the next search opens the new generation
    else:
        lancedb_delete(folder, gone, searches["_table"])
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    after_first = first(searches["dense"], qs[0])
    after = timed(searches["dense"], qs)
    return {"delete_s": wall, "delete_cpu_s": cpu, "before": before, "after_first_ms": after_first, "after": after}


# ---------------------------------------------------------------------------------------------- the store's costs
def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def engine_costs(store: Path, x: np.ndarray, ids: list[str], meta: list[dict]):
    """The engine's build, delete and compact of collection `d` (ids, vectors, the metadata `g` and `h`)."""
    from engine.core.collection import Collection
    from engine.core.storage.builder.update import compact, delete_ids
    return (lambda: Collection.from_vectors("d", ids, x, None, "text", root=store, meta=meta),
            lambda gone: delete_ids("d", gone, root=store),
            lambda: compact("d", root=store))


def lancedb_costs(store: Path, x: np.ndarray, ids: list[str], meta: list[dict]):
    """LanceDB's: `create_table`, `delete` (a deletion file), then the forced compaction: `compact_files` with
    `materialize_deletions_threshold=0` (its default, 10 %, leaves a fragment with exactly 10 % deleted as it is:
    `optimize()` would write nothing here) and the old versions' files removed, as `engine compact` leaves
    only the new generation's."""
    from datetime import timedelta

    import lancedb
    import pyarrow as pa
    db = lancedb.connect(str(store))
    box = {}

    def build():
        cols = {"id": pa.array(ids), "vector": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1]),
                "g": pa.array([m["g"] for m in meta], pa.int64()), "h": pa.array([m["h"] for m in meta], pa.int64())}
        box["table"] = db.create_table("d", pa.table(cols))

    def compact():
        dataset = box["table"].to_lance()
        dataset.optimize.compact_files(materialize_deletions_threshold=0.0)
        dataset.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
        box["table"].checkout_latest()

    return build, lambda gone: lancedb_delete(store, gone, box["table"]), compact


def numpy_costs(store: Path, x: np.ndarray, ids: list[str], meta: list[dict]):
    """The floor: the vectors and ids written once (`np.save`, one line per id), a delete that only writes the
    deleted rows, and a compaction that writes the kept rows of the mapped `.npy` once (`np.save(x[keep])`)."""
    store.mkdir(parents=True, exist_ok=True)

    def build():
        np.save(store / "vectors.npy", x)
        (store / "ids.txt").write_text("\n".join(ids) + "\n")

    def delete(gone):
        at = {i: r for r, i in enumerate(ids)}
        np.save(store / "deleted.npy", np.array(sorted(at[i] for i in gone), np.int64))

    def compact():
        mapped = np.load(store / "vectors.npy", mmap_mode="r")
        keep = np.setdiff1d(np.arange(len(mapped)), np.load(store / "deleted.npy"))
        np.save(store / "kept.npy", mapped[keep])
        (store / "kept_ids.txt").write_text("\n".join(ids[i] for i in keep) + "\n")
        for name in ("vectors.npy", "ids.txt", "deleted.npy"):
            (store / name).unlink()

    return build, delete, compact


def run_costs(side: str, folder: Path, _: int) -> dict:
    """Build a store of DIR/vectors.npy (ids `d0`…, metadata `g` = i % 100, `h` = i % 2) in DIR/costs-SIDE,
    delete every 10th id, compact; each step's wall and CPU seconds (the process's, all threads) and the
    store's bytes on disk after it."""
    import resource
    import shutil
    store = folder / f"costs-{side}"
    shutil.rmtree(store, ignore_errors=True)
    x = np.load(folder / "vectors.npy")
    ids = [f"d{i}" for i in range(len(x))]
    meta = [{"g": i % 100, "h": i % 2} for i in range(len(x))]
    gone = ids[::10]
    steps = {"engine": engine_costs, "lancedb": lancedb_costs, "numpy": numpy_costs}[side](store, x, ids, meta)
    out: dict = {"n": len(x), "input_bytes": x.nbytes + sum(len(i) + 1 for i in ids)}
    for name, step in zip(("build", "delete", "compact"), (steps[0], lambda: steps[1](gone), steps[2])):
        t, c = time.perf_counter(), time.process_time()
        step()
        out[f"{name}_s"], out[f"{name}_cpu_s"] = time.perf_counter() - t, time.process_time() - c
        out[f"{name}_bytes"] = folder_bytes(store)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["process_cpu_s"], out["peak_mib"] = usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
    shutil.rmtree(store, ignore_errors=True)
    return out


if __name__ == "__main__":
    side, what, folder, count = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    result = {"queries": run_queries, "delete": run_delete, "costs": run_costs}[what](side, folder, count)
    print(json.dumps(result, default=float))
