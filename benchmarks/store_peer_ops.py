"""`engine delete` and `engine compact` as whole commands beside LanceDB's delete and forced compaction, on
the same 200,000 × 384 vectors with ids `d0`… and metadata `g`, `h` (as `peers.py --only costs`).

    python benchmarks/store_peer_ops.py prepare DIR [--n 200000]
        DIR/delete.txt (every 10th id); the engine's collection `d` fresh (DIR/e/fresh) and with those ids
        marked deleted (DIR/e/deleted); LanceDB's table `d` fresh (DIR/l/fresh) and after its delete
        (DIR/l/deleted)
    python benchmarks/store_peer_ops.py copy SRC DST
        a copy whose data files are hard links (the engine's generation files and Lance's data files are never
        changed once written), manifests and small version files copied: what each timed run starts from
    python benchmarks/store_peer_ops.py lancedb delete|compact DIR [IDS]
        LanceDB's delete of the ids in IDS (one a line), or its forced compaction (pylance's `compact_files`
        with `materialize_deletions_threshold=0`, then the old versions' files removed)

Time them as whole processes, paired and alternated (the copy in both commands), e.g. with /usr/bin/time:
    sh -c 'python benchmarks/store_peer_ops.py copy DIR/e/deleted/d T/d && engine compact d --root T -q'
    sh -c 'python benchmarks/store_peer_ops.py copy DIR/l/deleted L && python benchmarks/store_peer_ops.py lancedb compact L'
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def copy(src: Path, dst: Path) -> None:
    def one(a: str, b: str) -> None:
        if a.endswith((".npy", ".jsonl", ".faiss", ".lance")) or f"{os.sep}columns-" in a or f"{os.sep}data{os.sep}" in a:
            os.link(a, b)
        else:
            shutil.copyfile(a, b)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, copy_function=one)


def prepare(folder: Path, n: int) -> None:
    import lancedb
    import pyarrow as pa

    sys.path.insert(0, str(HERE))
    from bench_core import synthetic

    from engine.core.collection import Collection
    from engine.core.storage.builder.update import delete_ids
    x = synthetic(n, 1, 384)[0]
    ids = [f"d{i}" for i in range(n)]
    meta = [{"g": i % 100, "h": i % 2} for i in range(n)]
    for sub in ("e", "l"):
        shutil.rmtree(folder / sub, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "delete.txt").write_text("\n".join(ids[::10]) + "\n")
    for name in ("fresh", "deleted"):
        Collection.from_vectors("d", ids, x, None, "text", root=folder / "e" / name, meta=meta)
    delete_ids("d", ids[::10], root=folder / "e" / "deleted", compact_at=1.0)
    cols = {"id": pa.array(ids), "vector": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 384),
            "g": pa.array([m["g"] for m in meta], pa.int64()), "h": pa.array([m["h"] for m in meta], pa.int64())}
    lancedb.connect(str(folder / "l" / "fresh")).create_table("d", pa.table(cols))
    shutil.copytree(folder / "l" / "fresh", folder / "l" / "deleted")
    lancedb_op("delete", folder / "l" / "deleted", folder / "delete.txt")


def lancedb_op(op: str, folder: Path, ids: Path | None) -> None:
    from datetime import timedelta

    import lancedb
    table = lancedb.connect(str(folder)).open_table("d")
    if op == "delete":
        gone = [line.strip() for line in open(ids or folder.parent / "delete.txt") if line.strip()]
        table.delete("id IN (" + ",".join(f"'{i}'" for i in gone) + ")")
    else:
        dataset = table.to_lance()
        dataset.optimize.compact_files(materialize_deletions_threshold=0.0)
        dataset.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("folder", type=Path)
    p.add_argument("--n", type=int, default=200_000)
    c = sub.add_parser("copy")
    c.add_argument("src", type=Path)
    c.add_argument("dst", type=Path)
    lance = sub.add_parser("lancedb")
    lance.add_argument("op", choices=("delete", "compact"))
    lance.add_argument("folder", type=Path)
    lance.add_argument("ids", type=Path, nargs="?")
    a = ap.parse_args()
    if a.what == "prepare":
        if a.n < 10:
            ap.error("--n must be ≥ 10")
        prepare(a.folder, a.n)
    elif a.what == "copy":
        copy(a.src, a.dst)
    else:
        lancedb_op(a.op, a.folder, a.ids)


if __name__ == "__main__":
    main()
