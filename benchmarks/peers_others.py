"""txtai and LanceDB over the same documents and model, for `benchmarks/peers.py --peers-python`. Run by a
Python of their own venv (they may pin other torch/transformers versions than the engine's); nothing of the
engine is imported. The model is the local MiniLM folder in $MINILM_PATH (no hub).

    python benchmarks/peers_others.py txtai|lancedb|all build DIR DOCS.csv     (prints texts/s of the build)
    python benchmarks/peers_others.py txtai|lancedb query DIR "text"           (one cold query: top-10 ids)
"""
from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path


def rows(docs: str) -> list[tuple[str, str]]:
    with open(docs, newline="", encoding="utf-8") as fh:
        return [(r["id"], r["text"]) for r in csv.DictReader(fh)]


def txtai_build(folder: Path, docs: list[tuple[str, str]]) -> None:
    from txtai import Embeddings
    emb = Embeddings(path=os.environ["MINILM_PATH"], content=False, backend="numpy")
    emb.index([(i, t, None) for i, t in docs])
    emb.save(str(folder / "txtai"))


def txtai_query(folder: Path, text: str) -> list:
    from txtai import Embeddings
    emb = Embeddings()
    emb.load(str(folder / "txtai"))
    return [i for i, _ in emb.search(text, 10)]


def lancedb_build(folder: Path, docs: list[tuple[str, str]]) -> None:
    import lancedb
    from lancedb.embeddings import get_registry
    from lancedb.pydantic import LanceModel, Vector
    fn = get_registry().get("sentence-transformers").create(name=os.environ["MINILM_PATH"], device="cpu")

    class Doc(LanceModel):
        id: str
        text: str = fn.SourceField()
        vector: Vector(fn.ndims()) = fn.VectorField()

    db = lancedb.connect(str(folder / "lancedb"))
    table = db.create_table("docs", schema=Doc, mode="overwrite")
    table.add([{"id": i, "text": t} for i, t in docs])


def lancedb_query(folder: Path, text: str) -> list:
    import lancedb
    table = lancedb.connect(str(folder / "lancedb")).open_table("docs")
    return [r["id"] for r in table.search(text).limit(10).to_list()]


def main() -> None:
    try:  # this machine's CUDA-only torchvision wheel needs the engine's patch before transformers (no engine code)
        import engine.core.encoders.torchvision_patch  # noqa: F401
    except ImportError:
        pass
    peer, action, folder = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    builders = {"txtai": txtai_build, "lancedb": lancedb_build}
    if action == "build":
        docs = rows(sys.argv[4])
        for name in builders if peer == "all" else [peer]:
            t = time.perf_counter()
            try:
                builders[name](folder, docs)
                print(json.dumps({"peer": name, "texts_per_s": len(docs) / (time.perf_counter() - t)}), flush=True)
            except Exception as exc:  # noqa: BLE001  a peer that does not install or run is reported, not fatal
                print(json.dumps({"peer": name, "error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
    else:
        print(json.dumps({"txtai": txtai_query, "lancedb": lancedb_query}[peer](folder, sys.argv[4])))


if __name__ == "__main__":
    main()
