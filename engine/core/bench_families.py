"""What `engine bench` times of the model families beside the dense index (docs/models.md), each through the
code a search runs: an image–text encoder's image side (query images one at a time, and batches of the
collection's own images: the build's rate), a collection's learned sparse and multi-vector indexes (the
documents (an image collection's page images) encoded in batches by the index's model: the build's rate; the `sparse(…)` and `multivector(…)`
stages one query at a time: the query's encoding, the index's search and the hits) and a reranker over the
dense top `depth` (`--rerank maxsim:DIR`: the `rerank(…)` stage, documents encoded on the fly)."""
from __future__ import annotations

from typing import Callable, Sequence

Timed = Callable[..., dict]
"""`timed(label, fn, calls, warmup=3, per_call_items=1) -> latency stats` of at most `calls` calls of `fn(i)`
(engine.core.bench.bench_collection's measurement, with its progress bar and time limit)."""


def document_texts(col, n: int) -> list[str]:
    """Up to n of the collection's stored texts (what its sparse and multi-vector indexes encoded)."""
    from engine.core.sources import stored_text
    fields = col.manifest.get("text_fields")
    texts = [stored_text(row, fields) for row in col.items[:n]]
    return [t for t in texts if t.strip()]


def image_family(col, images: Sequence[str], batch: int, timed: Timed) -> dict:
    """An image–text encoder's image side: one query image at a time, and batches of images (the build)."""
    enc = col.encoder
    batches = [list(images[i:i + batch]) for i in range(0, len(images), batch)]
    return {"spec": col.manifest["encoder"],
            "encode_image_single": timed("encoding query images one by one",
                                         lambda i: enc.encode_images([images[i]], batch_size=1), len(images)),
            "encode_images_batch": timed(f"encoding images in batches of {len(batches[0])}",
                                         lambda i: enc.encode_images(batches[i], batch_size=batch), len(batches), 1,
                                         per_call_items=len(batches[0]))}


def index_family(col, role: str, queries: Sequence[str], batch: int, k: int, timed: Timed,
                 images: Sequence[str] | None = None) -> dict:
    """A learned sparse (`role` "sparse") or multi-vector ("multivector") index: its model encoding the
    collection's documents in batches (an image collection's: `images`, some of its own files), and its stage
    answering one query at a time."""
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.run import run_pipeline
    if role == "sparse":
        from engine.core.encoders.sparse import encode_sparse as encode, sparse_model_name as model_name
        from engine.core.ranking.pipeline.sparse import Sparse as StageClass
    else:
        from engine.core.encoders.multivector import encode_tokens as encode, model_name
        from engine.core.ranking.pipeline.multivector import MultiVector as StageClass
    spec = str(StageClass.load(col.file(role)).meta.get("spec", ""))
    name = model_name(spec)
    out: dict = {"spec": spec, "index_bytes": folder_bytes(col.file(role))}
    docs = document_texts(col, batch * 4) if images is None else list(images)
    out["documents"] = "documents" if images is None else "pages"
    if images is not None:
        from engine.core.encoders.multivector import encode_image_tokens

        def encode(name: str, files: Sequence[str], query: bool, batch_size: int) -> list:
            return encode_image_tokens(name, files, batch_size)
    if docs:
        chunks = [docs[i:i + batch] for i in range(0, len(docs), batch)]
        out["encode_documents_batch"] = timed(f"{role}: encoding {out['documents']} in batches of {len(chunks[0])}",
                                              lambda i: encode(name, chunks[i], query=False, batch_size=batch),
                                              len(chunks), 1, per_call_items=len(chunks[0]))
    stage, ctx = StageClass(col.path.name, k=k), Context(root=col.path.parent)
    out["search_single"] = timed(f"{role}: one query at a time",
                                 lambda i: run_pipeline(stage, [Query(f"q{i}", queries[i])], ctx), len(queries))
    return out


def rerank_family(col, spec, depth: int, queries: Sequence[str], timed: Timed) -> dict:
    """A reranker (a parsed `RerankerSpec`) reordering each query's dense top `depth`: the stage alone, one
    query at a time (the candidates are fetched once, untimed)."""
    from engine.core.ranking.pipeline import Context, Query
    from engine.core.ranking.pipeline.rerank import Rerank
    from engine.core.ranking.pipeline.retrieve import Retrieve
    ctx = Context(root=col.path.parent)
    asked = [Query(f"q{i}", t) for i, t in enumerate(queries)]
    first = Retrieve(col.path.name, mode="dense", k=depth).transform(asked, None, ctx)
    stage = Rerank(spec, depth=depth)
    stage.check(ctx)
    return {"spec": spec.text, "depth": depth,
            "rerank_single": timed(f"reranking the top {depth} one query at a time",
                                   lambda i: stage.transform([asked[i]], {asked[i].qid: first[asked[i].qid]}, ctx),
                                   len(asked))}


def folder_bytes(path) -> int:
    """Bytes of a stored part (a folder of files, or one file)."""
    from pathlib import Path
    path = Path(path)
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
