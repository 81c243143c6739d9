"""Latency and memory of a collection: query encoding and FAISS search timed separately.

Separate numbers matter because they scale differently: encoding is per query and model-bound,
search grows with the collection and the index type.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np



def latency_stats(seconds: Sequence[float], per_call_items: int = 1) -> dict[str, float]:
    """p50/p95/p99 in ms per call, and queries per second over the whole run."""
    s = np.asarray(seconds, dtype=np.float64)
    total = float(s.sum())
    return {"p50_ms": float(np.percentile(s, 50) * 1e3), "p95_ms": float(np.percentile(s, 95) * 1e3),
            "p99_ms": float(np.percentile(s, 99) * 1e3), "mean_ms": float(s.mean() * 1e3),
            "qps": float(len(s) * per_call_items / total) if total > 0 else float("inf"), "calls": int(len(s))}


def time_calls(fn: Callable[[int], object], n: int, warmup: int = 3, seconds: float | None = None,
               progress: Callable[[int], None] | None = None) -> list[float]:
    """Seconds per call of `fn(i)` for i < n, after `warmup` untimed calls; with `seconds`, the calls stop
    once that much time has gone into them (at least one is timed), so a slow model cannot hold a bench for
    minutes. `progress(1)` after each call."""
    for i in range(min(warmup, n)):
        fn(i)
    out: list[float] = []
    spent = 0.0
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
        spent += out[-1]
        if progress is not None:
            progress(1)
        if seconds is not None and spent >= seconds:
            break
    return out


def takes_text(col) -> bool:
    """Whether a collection's encoder embeds text, from the registry (no model loaded for it)."""
    from engine.core.encoders.registry import modalities_of
    from engine.errors import EngineError
    try:
        return "text" in modalities_of(col.manifest["encoder"])
    except EngineError:
        return "text" in col.encoder.modalities  # a spec the registry does not list: ask the encoder


def default_bench_queries(col, n: int) -> tuple[str, list[str]]:
    """Queries in the modality users send: text for text-capable encoders, else the collection's own images."""
    rng = np.random.default_rng(0)
    if takes_text(col):
        if col.kind == "text":
            items = col.items
            picks = rng.choice(len(items), min(n, len(items)), replace=False)
            from engine.core.sources import stored_text
            fields = col.manifest.get("text_fields")
            texts = [stored_text(items[i], fields) or items[i]["id"] for i in picks]
            return "text", texts
        from engine.core.storage.builder.from_source import generic_captions
        return "text", generic_captions(n)
    return "image", image_files(col, n)


def image_files(col, n: int) -> list[str]:
    """Up to n of the collection's own image files that are still where it was built from, drawn at random."""
    from pathlib import Path
    rng = np.random.default_rng(0)
    paths = [it.get("path") for it in col.items]
    sources = col.manifest.get("sources") or []
    base = Path(sources[0]) if sources and Path(sources[0]).is_dir() else None
    full = [str(base / p) if base and p and not Path(p).is_absolute() else p for p in paths]
    full = [p for p in full if p and Path(p).is_file()]
    picks = rng.choice(len(full), min(n, len(full)), replace=False) if full else []
    return [full[i] for i in picks]


def bench_collection(col, queries: Sequence[str] | None = None, n: int = 200, batch: int = 64,
                     k: int = 10, seconds: float | None = 3.0, rerank=None, rerank_depth: int = 20) -> dict:
    """Time single and batched query encoding and search (each measurement at most `n` calls and about
    `seconds` of them, with a progress bar); report index and embedding memory. Queries go through the same
    light encoders (ONNX where the model has them) as `engine search`. The model families the collection
    carries are timed too (`families`: an image–text encoder's image side, its sparse and multi-vector
    indexes), and `rerank` (a parsed RerankerSpec) over the dense top `rerank_depth`
    (engine.core.bench_families)."""
    from engine.progress import make_progress
    if queries:
        modality, qs = "text", list(queries)
    else:
        modality, qs = default_bench_queries(col, n)
    qs = (qs * (n // max(1, len(qs)) + 1))[:n] if qs else []
    encode = (lambda xs: col.encode_queries(texts=xs, batch_size=batch)) if modality == "text" \
        else (lambda xs: col.encode_queries(images=xs, batch_size=batch))
    result: dict = {"collection": col.name, "count": col.live_count, "dim": col.dim,
                    "encoder": col.manifest["encoder"], "index_factory": col.manifest["index_factory"],
                    "query_modality": modality, "queries": len(qs), "batch": batch, "k": k,
                    "seconds_per_measurement": seconds}
    with make_progress() as bar:
        def measure(label: str, fn: Callable[[int], object], calls: int, warmup: int = 3) -> list[float]:
            task = bar.add_task(label, total=calls)
            times = time_calls(fn, calls, warmup, seconds, lambda m: bar.advance(task, m))
            bar.update(task, total=len(times), completed=len(times))
            return times

        if qs:
            batches = [qs[i:i + batch] for i in range(0, len(qs), batch)]
            vectors: list[np.ndarray] = []  # what the single calls return: the search timings' queries
            result["encode_single"] = latency_stats(measure(f"encoding {modality} queries one by one",
                                                            lambda i: vectors.append(encode([qs[i]])), len(qs)))
            result["encode_batch"] = latency_stats(measure(f"encoding batches of {batch}",  # warm already
                                                           lambda i: encode(batches[i]), len(batches), 0),
                                                   per_call_items=batch)
            qvec = np.concatenate(vectors[-len(qs):])
        else:  # no query source: search with stored vectors
            rng = np.random.default_rng(0)
            qvec = np.asarray(col.embeddings[np.sort(rng.choice(len(col), min(n, len(col)), replace=False))])
        qvec = np.ascontiguousarray(qvec, dtype=np.float32)
        qvec = qvec[np.arange(max(n, len(qvec))) % len(qvec)]  # n queries, the encoded ones in turn
        index = col.index
        from engine.core.storage.index.faiss_index import search_index  # as Collection.search: BLAS and threads per batch
        result["search_single"] = latency_stats(measure("searching one query at a time",
                                                        lambda i: search_index(index, qvec[i:i + 1], k), len(qvec)))
        nb = max(1, len(qvec) // batch)
        qb = [qvec[i * batch:(i + 1) * batch] for i in range(nb)]
        result["search_batch"] = latency_stats(measure(f"searching batches of {len(qb[0])}",
                                                       lambda i: search_index(index, qb[i], k), nb, 1),
                                               per_call_items=len(qb[0]))
        def timed(label: str, fn: Callable[[int], object], calls: int, warmup: int = 3,
                  per_call_items: int = 1) -> dict:
            return latency_stats(measure(label, fn, calls, warmup), per_call_items)

        families = bench_families(col, qs if modality == "text" else [], batch, k, timed, rerank, rerank_depth)
        if families:
            result["families"] = families
    result["index_bytes"] = int(col.manifest.get("index_bytes") or col.file("index").stat().st_size)  # a Flat
    # collection's index file is a header over its embeddings: the manifest has the index's resident bytes
    result["embeddings_bytes"] = int(len(col) * col.dim * 4)
    return result


def bench_families(col, texts: Sequence[str], batch: int, k: int, timed: Callable[..., dict], rerank=None,
                   rerank_depth: int = 20) -> dict:
    """{family: its timings} for what the collection carries beside its dense index (and `rerank`): text
    `texts` query the sparse, multi-vector and rerank stages; none (an image-only encoder) skips them."""
    from engine.core import bench_families as fam
    out: dict = {}
    modalities = col.encoder.modalities
    if col.kind == "image" and {"text", "image"} <= set(modalities) and texts:
        images = image_files(col, max(batch, 8))
        if images:
            out["image_text"] = fam.image_family(col, images, batch, timed)
    roles = col.manifest.get("roles") or {}
    for role in ("sparse", "multivector"):
        if role in roles and texts:
            pages = image_files(col, batch * 4) if col.kind == "image" and role == "multivector" else None
            out[role] = fam.index_family(col, role, texts, batch, k, timed, pages)
    if rerank is not None:
        if not texts:
            from engine.errors import EngineError
            raise EngineError(f"--rerank {rerank.text}: the collection's queries are images; a reranker reads text")
        out["rerank"] = fam.rerank_family(col, rerank, rerank_depth, texts, timed)
    return out
