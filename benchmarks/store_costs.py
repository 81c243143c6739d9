"""What a `--vectors` collection costs on disk beside its inputs, and the files a delete and a compaction
are timed on.

    python benchmarks/store_costs.py prepare DIR [--n 200000] [--dim 384]
        writes DIR/vectors.npy and DIR/ids.txt (unit vectors, ids `doc-000000`…), DIR/delete.txt (every 10th
        id), builds DIR/store/c with `engine build c --vectors … --ids …` and DIR/store/old, the same collection
        laid out as before (its Flat index file holding every row beside the embeddings role); prints a table of
        bytes on disk (inputs, collection, old layout) and writes it as JSON (--out)

    python benchmarks/store_costs.py copy DIR NAME [--from c|old]
        links DIR/store/c (or old) as DIR/store/NAME (what each timed delete or compaction starts from)

Time a delete or a compaction as a whole process, paired (the copy is in both commands, so it cancels out):
    sh -c 'python benchmarks/store_costs.py copy DIR x && engine delete x --ids DIR/delete.txt --root DIR/store'
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def old_layout(store: Path) -> None:
    """The collection `c` copied to `old` and its index role rewritten as the whole Flat file."""
    from engine.core.collection import Collection
    from engine.core.storage.index.faiss_index import FlatFile
    from engine.core.storage.store import generations
    from engine.core.storage.store.structure import VECTORS_IN
    shutil.rmtree(store / "old", ignore_errors=True)
    shutil.copytree(store / "c", store / "old")
    manifest_file = store / "old" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["name"] = "old"
    manifest_file.write_text(json.dumps(manifest))
    col = Collection.open("old", store)
    manifest = {k: v for k, v in col.manifest.items() if k not in ("roles", "files", VECTORS_IN)}
    generations.commit(col.path, manifest, {"index": generations.FileWriter(".faiss", FlatFile(col.embeddings).write)},
                       keep={r: f for r, f in col.manifest["roles"].items() if r != "index"})


def prepare(folder: Path, n: int, dim: int, out: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    np.save(folder / "vectors.npy", x)
    ids = [f"doc-{i:06d}" for i in range(n)]
    (folder / "ids.txt").write_text("\n".join(ids) + "\n")
    (folder / "delete.txt").write_text("\n".join(ids[::10]) + "\n")
    store = folder / "store"
    shutil.rmtree(store, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "engine", "build", "c", "--vectors", str(folder / "vectors.npy"), "--ids",
                    str(folder / "ids.txt"), "--root", str(store), "--quiet"], check=True)
    old_layout(store)
    inputs = (folder / "vectors.npy").stat().st_size + (folder / "ids.txt").stat().st_size
    result = {"n": n, "dim": dim, "inputs_bytes": inputs, "collection_bytes": folder_bytes(store / "c"),
              "old_layout_bytes": folder_bytes(store / "old")}
    result["collection_vs_inputs"] = result["collection_bytes"] / inputs
    result["old_layout_vs_inputs"] = result["old_layout_bytes"] / inputs
    rows = [["inputs (vectors.npy + ids.txt)", f"{inputs / 2**20:.1f}", "1.00"],
            ["collection (index over the embeddings)", f"{result['collection_bytes'] / 2**20:.1f}",
             f"{result['collection_vs_inputs']:.2f}"],
            ["collection, previous layout (Flat file)", f"{result['old_layout_bytes'] / 2**20:.1f}",
             f"{result['old_layout_vs_inputs']:.2f}"]]
    print(f"{n:,} × {dim}\n{'what':42} {'MiB':>8} {'× inputs':>9}")
    for row in rows:
        print(f"{row[0]:42} {row[1]:>8} {row[2]:>9}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return result


def copy(folder: Path, name: str, source: str = "c") -> None:
    """DIR/store/SOURCE as DIR/store/NAME by hard links (a delete or a compaction writes new files and renames
    its manifest into place: the source's files are never changed), its manifest a file of its own."""
    import os
    target = folder / "store" / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(folder / "store" / source, target, copy_function=os.link)
    manifest_file = target / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["name"] = name
    manifest_file.unlink()
    manifest_file.write_text(json.dumps(manifest))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("folder", type=Path)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--out", type=Path, default=HERE / "results" / "store_costs.json")
    c = sub.add_parser("copy")
    c.add_argument("folder", type=Path)
    c.add_argument("name")
    c.add_argument("--from", dest="source", default="c", help="the collection copied (c, or old: the previous layout)")
    a = ap.parse_args()
    if a.what == "prepare":
        prepare(a.folder, a.n, a.dim, a.out)
    else:
        copy(a.folder, a.name, a.source)


if __name__ == "__main__":
    main()
