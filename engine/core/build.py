"""Building a collection from a source: resumable chunked encoding, the FAISS index, the commit.

Embeddings are flushed per chunk into `NAME/.partial/`; a killed build run again with the same input
skips the chunks it finished. `add` appends new items without re-encoding old ones.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from engine.core.collection import (IMAGE_FILES, MANIFEST, PARTIAL, Collection, collection_path, commit_collection,
                                    new_manifest)
from engine.core.index import FlatFile, build_index, check_factory, is_exact, recall_at_k
from engine.core.sources import Item, image_items, text_items
from engine.errors import EngineError, opt
from engine.io.atomic import atomic_open, write_json
from engine.io.ids import ID_POLICIES, trec_safe_ids
from engine.progress import info, make_progress, warn


@dataclass(frozen=True)
class BuildOptions:
    """How a collection is built; the CLI's option defaults are these."""
    model: str | None = None           # encoder spec; None: the registry's default for the kind of item
    index: str = "Flat"                # FAISS factory string, or "auto" (measured: engine.core.autoindex)
    store: str = "float32"             # exact search's vectors: float32 (Flat), float16 (SQfp16), sq8 (SQ8)
    memory_budget: str | None = None   # `auto` only: most bytes the index may take (4G, 512M, …)
    recall: float = 0.95               # `auto` only: recall@10 the chosen operating point must reach
    device: str = "auto"               # auto|cpu|cuda|cuda:N|mps (engine.core.encoders.device)
    batch_size: int | str = 32         # items per forward pass; "auto": by device and kind of item
    workers: int = 2                   # image-decoding threads running ahead of the model
    threads: int = 0                   # torch threads (0: torch's default)
    chunk_size: int = 1024             # items per flushed chunk: the resume unit
    add: bool = False                  # append new items to an existing collection
    force: bool = False                # rebuild a collection that exists
    fields: tuple[str, ...] | None = None   # text columns to embed (None: the usual text columns found)
    id_column: str | None = None
    path_column: str | None = None
    recall_queries: str | Path | None = None  # text queries for a non-exact index's recall@10
    wait: float = 0.0                  # seconds to wait for another writer of the collection (0: fail at once)
    id_policy: str = "strict"          # ids TREC files cannot hold (white space, empty): strict refuses, replace fixes
    ray: str | None = None             # encode on Ray: "local" (started for the build), "auto", "ray://…"
    shards: int = 1                    # index shards searched side by side (engine.core.shards)

    def check(self) -> "BuildOptions":
        from engine.core.autoindex import parse_bytes
        from engine.core.encoders.device import check_batch_size, check_device
        for name in ("chunk_size", "shards"):
            if getattr(self, name) < 1:
                raise EngineError(f"{opt(name)} must be at least 1, not {getattr(self, name)}")
        check_batch_size(self.batch_size)
        check_device(self.device)
        parse_bytes(self.memory_budget)
        if not 0 < self.recall <= 1:
            raise EngineError(f"{opt('recall')} must be in (0, 1], not {self.recall}")
        if self.id_policy not in ID_POLICIES:
            raise EngineError(f"{opt('id_policy')} must be one of {', '.join(ID_POLICIES)}, not {self.id_policy!r}")
        factory = self.factory()
        if factory == "auto" and self.shards > 1:
            raise EngineError(f"{opt('index')} auto measures one index; leave out {opt('shards')} or name the index")
        if not self.add and factory != "auto":
            check_factory(factory)  # before a model loads or an item is encoded
        return self

    def factory(self) -> str:
        """The FAISS factory string `index` and `store` name ("auto" stays "auto")."""
        from engine.core.index import store_factory
        factory = store_factory(self.store)
        if self.store == "float32":
            return self.index
        if self.index != "Flat":
            raise EngineError(f"{opt('store')} {self.store} is for exact search ({opt('index')} Flat); "
                              f"{self.index} keeps its own codes")
        return factory


def build_options(options: BuildOptions | None = None, **settings: Any) -> BuildOptions:
    """`options` with `settings` (BuildOptions field names) applied; an unknown name is an error."""
    known = {f.name for f in fields(BuildOptions)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise EngineError(f"unknown build setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if settings.get("fields") is not None:
        settings["fields"] = tuple(settings["fields"])
    return replace(options or BuildOptions(), **settings).check()


@dataclass
class BuildReport:
    encoded: int = 0
    resumed: int = 0
    skipped_existing: int = 0
    failed: list[dict] = field(default_factory=list)
    recall_at_10: float | None = None


def build_collection(name: str, *, images: str | Path | None = None, texts: str | Path | None = None,
                     items: Sequence[Item] | None = None, kind: str | None = None, root: str | Path | None = None,
                     options: BuildOptions | None = None, report: BuildReport | None = None,
                     extra: Mapping[str, Any] | None = None, **settings: Any) -> Collection:
    """See `Collection.build`. The whole build holds the collection's writer lock (`engine.core.lock`)."""
    from engine.core.lock import writer_lock
    o = build_options(options, **settings)
    with writer_lock(collection_path(name, root), wait=o.wait):
        if o.ray is None:
            return _build_collection(name, images, texts, items, kind, root, o, report, extra)
        from engine.core.distributed import ray_session
        with ray_session(o.ray):
            return _build_collection(name, images, texts, items, kind, root, o, report, extra)


def _build_collection(name: str, images: str | Path | None, texts: str | Path | None, items: Sequence[Item] | None,
                      kind: str | None, root: str | Path | None, o: BuildOptions, report: BuildReport | None,
                      extra: Mapping[str, Any] | None) -> Collection:
    from engine.core.encoders import configure_threads, load_encoder
    from engine.core.encoders.registry import DEFAULT_IMAGE_SPEC, DEFAULT_TEXT_SPEC, specs_for
    from engine.io.ids import check_unique
    if sum(x is not None for x in (images, texts, items)) != 1:
        raise EngineError(f"give exactly one source: {opt('images')} or {opt('texts')}")
    report = report if report is not None else BuildReport()
    path = collection_path(name, root)
    fields_used: list[str] | None = None
    if items is not None:
        if kind not in ("image", "text"):
            raise EngineError("items need kind='image' or kind='text'")
        items = list(items)
        check_unique([it.id for it in items], "id", name)
    elif images is not None:
        kind = "image"
        items = image_items(images, id_column=o.id_column, path_column=o.path_column)
    else:
        kind = "text"
        items, fields_used = text_items(texts, id_column=o.id_column, fields=o.fields)
    source_name = str(images or texts or f"{len(items)} items")
    safe = trec_safe_ids([it.id for it in items], o.id_policy, source_name)
    items = [it if it.id == s else replace(it, id=s) for it, s in zip(items, safe)]

    model, index = o.model, o.factory()
    old: Collection | None = None
    if o.add:
        old = Collection.open(name, root)
        if old.kind != kind:
            raise EngineError(f"collection {name!r} holds {old.kind}s; adding {kind}s needs a collection of {kind}s")
        if model and load_encoder(model).spec != old.manifest["encoder"]:
            raise EngineError(f"collection {name!r} was built with {old.manifest['encoder']}; items added to it "
                              f"must use the same model (leave {opt('model')} out)")
        model, index = old.manifest["encoder"], old.manifest["index_factory"]
        o = replace(o, shards=int(old.manifest.get("shards", 1)))
        have = set(old.ids)
        report.skipped_existing = sum(1 for it in items if it.id in have)
        items = [it for it in items if it.id not in have]
        if report.skipped_existing:
            info(f"{report.skipped_existing} items already in {name!r} are kept as they are")
        if not items:
            info(f"nothing new to add to {name!r}")
            return old
    elif (path / MANIFEST).exists() and not o.force:
        raise EngineError(f"collection {name!r} already exists in {path.parent}/; "
                          f"use {opt('add')} to append new items or {opt('force')} to rebuild it")

    configure_threads(o.threads)
    from engine.core.encoders.device import set_device
    set_device(o.device)
    encoder = load_encoder(model or (DEFAULT_IMAGE_SPEC if kind == "image" else DEFAULT_TEXT_SPEC))
    if kind not in encoder.modalities:
        raise EngineError(f"model {encoder.spec} cannot embed {kind}s; pick one of {', '.join(specs_for(kind))}")
    if kind == "text":
        _warn_truncation(encoder, items)

    if o.ray is not None:
        from engine.core.distributed import encode_on_ray
    emb, kept, failed = _encode_chunked(path, encoder, kind, items, o, report,
                                        _encode_local if o.ray is None else encode_on_ray)
    for n, reason in failed:
        report.failed.append({"id": items[n].id, "path": items[n].source, "reason": reason})

    kept_items = [{"id": items[i].id, **items[i].meta} for i in kept]
    if old is not None:
        emb = np.concatenate([np.asarray(old.embeddings), emb]) if len(emb) else np.asarray(old.embeddings)
        kept_items = old.items + kept_items
    if len(kept_items) == 0:
        raise EngineError(f"no item of {source_name} could be encoded; nothing to index")

    choice = None
    if index == "auto":
        from engine.core.autoindex import choose, parse_bytes
        label, queries = query_vectors(emb, encoder, kind, o.recall_queries, n=500)
        faiss_index, choice = choose(emb, queries, o.recall, parse_bytes(o.memory_budget), label)
        index, report.recall_at_10 = choice.factory, choice.recall
        show_choice(choice.manifest())
    else:
        info(f"building FAISS index {index!r} over {len(kept_items)} × {encoder.dim}")
        if o.ray is None and o.shards == 1:
            faiss_index = FlatFile(emb) if index == "Flat" else build_index(emb, index)
        else:
            from engine.core.shards import build_scaled_index
            faiss_index = build_scaled_index(emb, index, o.shards, on_ray=o.ray is not None, workdir=path / PARTIAL)
        if not is_exact(index):
            report.recall_at_10 = _sampled_recall(faiss_index, emb, encoder, kind, o.recall_queries)
            info(f"recall@10 of {index!r} against exact search: {report.recall_at_10:.3f}")

    manifest = new_manifest(name, kind, encoder.spec, int(encoder.dim), index,
                            (old.manifest.get("sources", []) if old is not None else []) + [source_name],
                            text_fields=fields_used if kind == "text" else None,
                            skipped=(old.manifest.get("skipped", []) if old is not None else []) + report.failed,
                            recall_at_10=report.recall_at_10, **({"shards": o.shards} if o.shards > 1 else {}))
    if choice is not None:
        manifest["search_params"], manifest["index_choice"] = choice.params, choice.manifest()
    elif old is not None and old.manifest.get("search_params"):
        manifest["search_params"] = old.manifest["search_params"]  # a tuned operating point is kept on --add
    if old is not None:
        manifest["created"] = old.manifest["created"]
    col = commit_collection(path, manifest, emb, kept_items, faiss_index,
                            extra={**(old.extra if old is not None else {}), **(extra or {})},
                            documents=_image_files(old, items, kept) if kind == "image" else None)
    if report.failed:
        lines = "\n".join(f"  {f['path']}: {f['reason']}" for f in report.failed[:20])
        more = f"\n  … and {len(report.failed) - 20} more (listed in {path / MANIFEST})" if len(report.failed) > 20 else ""
        warn(f"{len(report.failed)} of {len(items)} images skipped:\n{lines}{more}")
    info(f"collection {name!r}: {len(kept_items)} items in {path}")
    return col


def _image_files(old: Collection | None, items: Sequence[Item], kept: Sequence[int]) -> dict[str, dict]:
    """The indexed files of an image collection (old ones kept on `add`): the only files a server reads."""
    files = dict(old.document(IMAGE_FILES)) if old is not None and IMAGE_FILES in old.stored else {}
    files.update({items[i].id: items[i].source for i in kept})
    return {IMAGE_FILES: files}


def _warn_truncation(encoder, items: Sequence[Item]) -> None:
    limit = int(encoder.info.get("max_seq_length") or 0)
    if not limit:
        return
    # ~1.3 tokens a word, and at least one per 6 characters: one 20 MB "word" is far past the window too
    long = sum(1 for it in items if max(len(it.source.split()) * 1.3, len(it.source) / 6) > limit)
    if long:
        warn(f"about {long} of {len(items)} texts exceed the model's {limit}-token window; "
             f"only their beginning is embedded")


def _plan_signature(encoder_spec: str, kind: str, items: Sequence[Item], chunk_size: int) -> str:
    h = hashlib.sha256(json.dumps([encoder_spec, kind, chunk_size]).encode())
    for it in items:
        h.update(it.id.encode() + b"\0" + it.source.encode() + b"\1")
    return h.hexdigest()


def _open_partial(path: Path, encoder_spec: str, kind: str, items: Sequence[Item], chunk_size: int) -> Path:
    """`NAME/.partial/` for this plan: kept when it holds chunks of the same input, else started over."""
    partial = path / PARTIAL
    signature = _plan_signature(encoder_spec, kind, items, chunk_size)
    plan_file = partial / "plan.json"
    if partial.is_dir():
        try:
            same = json.loads(plan_file.read_text())["signature"] == signature
        except (OSError, ValueError, KeyError):
            same = False
        if not same:
            warn(f"{partial} holds an interrupted build of different input; starting over")
            shutil.rmtree(partial)
    if not partial.is_dir():
        partial.mkdir(parents=True)
        write_json(plan_file, {"signature": signature, "count": len(items), "chunk_size": chunk_size,
                               "encoder": encoder_spec})
    return partial


def chunk_bounds(n_items: int, chunk_size: int) -> list[tuple[int, int]]:
    """(lo, hi) item positions of each chunk: the resume unit, the same for local and distributed builds."""
    return [(lo, min(n_items, lo + chunk_size)) for lo in range(0, n_items, chunk_size)]


def chunk_data(emb: np.ndarray, ok: Sequence[int], bad: Sequence[tuple[int, str]]) -> dict[str, np.ndarray]:
    """One chunk as stored: rows of the items read (`ok`, positions in the chunk) and the failures."""
    return {"emb": np.asarray(emb, dtype=np.float32), "ok": np.asarray(ok, dtype=np.int64),
            "bad_pos": np.asarray([p for p, _ in bad], dtype=np.int64),
            "bad_reason": np.asarray([r for _, r in bad], dtype=str)}


def _read_chunk(cfile: Path) -> dict[str, np.ndarray] | None:
    if not cfile.is_file():
        return None
    try:
        with np.load(cfile) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError):
        return None  # unreadable chunk: encode it again


def _encode_local(encoder, kind: str, items: Sequence[Item], todo: Sequence[int], o: BuildOptions
                  ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(chunk number, chunk data) for each chunk in `todo`, encoded in this process."""
    bounds = chunk_bounds(len(items), o.chunk_size)
    for c in todo:
        chunk = items[bounds[c][0]:bounds[c][1]]
        if kind == "text":
            yield c, chunk_data(encoder.encode_texts([it.source for it in chunk], batch_size=o.batch_size),
                                range(len(chunk)), [])
        else:
            res = encoder.encode_images([it.source for it in chunk], batch_size=o.batch_size, workers=o.workers)
            yield c, chunk_data(res.embeddings, res.ok, res.failed)


def _encode_chunked(path: Path, encoder, kind: str, items: Sequence[Item], o: BuildOptions,
                    report: BuildReport, encode_chunks=_encode_local
                    ) -> tuple[np.ndarray, list[int], list[tuple[int, str]]]:
    """Encode in chunks flushed to `.partial/`; chunks already there from an interrupted run are reused.
    `encode_chunks(encoder, kind, items, todo, o)` yields (chunk, data) for the missing ones in any order
    (`engine.core.distributed` runs them on Ray)."""
    partial = _open_partial(path, encoder.spec, kind, items, o.chunk_size)
    bounds = chunk_bounds(len(items), o.chunk_size)
    done: dict[int, dict[str, np.ndarray]] = {}
    with make_progress() as bar:
        task = bar.add_task(f"encoding {kind}s", total=len(items))
        for c, (lo, hi) in enumerate(bounds):
            data = _read_chunk(partial / f"chunk-{c:06d}.npz")
            if data is not None:
                done[c] = data
                report.resumed += hi - lo
                bar.advance(task, hi - lo)
        todo = [c for c in range(len(bounds)) if c not in done]
        for c, data in encode_chunks(encoder, kind, items, todo, o):
            with atomic_open(partial / f"chunk-{c:06d}.npz", "wb") as fh:
                np.savez(fh, **data)
            done[c] = data
            report.encoded += bounds[c][1] - bounds[c][0]
            bar.advance(task, bounds[c][1] - bounds[c][0])
    if report.resumed:
        info(f"resumed: {report.resumed} items were already encoded by an interrupted build")
    embs, kept, failed = [], [], []
    for c, (lo, _) in enumerate(bounds):
        data = done[c]
        embs.append(data["emb"].reshape(-1, encoder.dim))
        kept.extend(int(i) + lo for i in data["ok"])
        failed.extend((int(p) + lo, str(r)) for p, r in zip(data["bad_pos"], data["bad_reason"]))
    emb = np.concatenate(embs) if embs else np.zeros((0, encoder.dim), np.float32)
    return emb, kept, failed


def generic_captions(n: int, seed: int = 0) -> list[str]:
    """Text queries for an image–text collection when the user gave none: "a photo of a <ImageNet class>"."""
    from engine.core.encoders.conse import imagenet_synonyms
    names = [s[0] for s in imagenet_synonyms()]
    rng = np.random.default_rng(seed)
    return [f"a photo of a {names[i]}" for i in rng.choice(len(names), min(n, len(names)), replace=False)]


def query_vectors(emb: np.ndarray, encoder, kind: str, recall_queries: str | Path | None,
                  n: int = 200) -> tuple[str, np.ndarray]:
    """Queries of the modality users will really send, as vectors, and what they are: the given text queries,
    generic captions for an image–text collection, else a sample of the collection's own vectors."""
    rng = np.random.default_rng(0)
    if recall_queries is not None:
        from engine.io.tables import read_queries
        texts = [t for _, t in read_queries(recall_queries)]
        picked = texts if len(texts) <= n else [texts[i] for i in rng.choice(len(texts), n, replace=False)]
        return f"{len(picked)} text queries from {recall_queries}", encoder.encode_texts(picked)
    if "text" in encoder.modalities and kind == "image":
        return f"{min(n, 1000)} generic text captions", encoder.encode_texts(generic_captions(n))
    rows = rng.choice(len(emb), min(n, len(emb)), replace=False)
    return f"{len(rows)} of the collection's own vectors", np.ascontiguousarray(emb[rows], dtype=np.float32)


def _sampled_recall(index, emb: np.ndarray, encoder, kind: str, recall_queries: str | Path | None,
                    n: int = 200) -> float:
    """Recall@10 vs exact on queries of the modality users will really send (text for image-text collections)."""
    return float(recall_at_k(index, emb, query_vectors(emb, encoder, kind, recall_queries, n)[1], k=10))


def show_choice(choice: dict) -> None:
    """Print `--index auto`'s measurements and the operating point it chose."""
    from engine.core.autoindex import choice_table
    from engine.display import format_table
    params = ", ".join(f"{k}={v:g}" for k, v in choice["params"].items()) or "no knobs"
    info(f"auto index on {choice['queries']}:\n{format_table(*choice_table(choice))}\n"
         f"chosen: {choice['factory']} ({params}): recall@10 {choice['recall@10']:.3f}, "
         f"{choice['speedup'] or 0:.1f}× exact QPS")
