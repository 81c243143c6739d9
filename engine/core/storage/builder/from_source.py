"""Building a collection from a source (an image folder or table, a text table, or ready items): resumable
chunked encoding (`chunks`, locally or on Ray), the FAISS index, its recall on the queries users send, the
commit. `add` appends new items without re-encoding old ones."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from engine.core.storage.builder.chunks import encode_chunked, encode_local
from engine.core.storage.builder.commit import commit_collection, new_manifest
from engine.core.storage.builder.lexical import ROLE as BM25, bm25_files, check_lexical, lexical_analyzer, stored_texts
from engine.core.storage.builder.learned_roles import check_learned, learned_files, learned_specs
from engine.core.storage.builder.options import BuildOptions, BuildReport, build_options
from engine.core.encoders.prompts import prompted
from engine.core.storage.builder.item_source import Items, ItemSource, kept_items, read_source, take
from engine.core.storage.index.faiss_index import FlatFile, build_index, is_exact, recall_at_k
from engine.core.storage.index.ondisk import is_ivf
from engine.core.sources import Item
from engine.core.storage.store.replaced import announce_replacement
from engine.core.storage.store.stored import IMAGE_FILES, MANIFEST, PARTIAL, Extras, StoredCollection, collection_path
from engine.errors import EngineError, opt
from engine.io.ids import trec_safe_ids
from engine.progress import info, warn


@dataclass(frozen=True)
class BuildSource:
    """What a build encodes: an image folder/table (`images`), a text table (`texts`), or ready `items` of a
    `kind`; the task's `extra` manifest fields; the prompts put before queries and documents
    (`engine.core.encoders.prompts`)."""
    images: str | Path | None = None
    texts: str | Path | None = None
    items: Sequence[Item] | None = None
    kind: str | None = None
    extra: Mapping[str, Any] | None = None
    query_prompt: str | None = None
    doc_prompt: str | None = None


def split_source(settings: Mapping[str, Any]) -> tuple[BuildSource, dict[str, Any]]:
    """`Collection.build`'s keywords as the `BuildSource` and the rest (`BuildOptions` fields)."""
    names = {f.name for f in fields(BuildSource)}
    return (BuildSource(**{k: v for k, v in settings.items() if k in names}),
            {k: v for k, v in settings.items() if k not in names})


def build_collection(name: str, source: BuildSource, root: str | Path | None = None,
                     options: BuildOptions | None = None, report: BuildReport | None = None,
                     **settings: Any) -> Path:
    """See `Collection.build`; returns the collection's folder. The whole build holds the collection's writer
    lock (`engine.core.storage.store.lock`)."""
    from engine.core.encoders.prompts import check_prompt
    from engine.core.storage.store.lock import writer_lock
    query_prompt, doc_prompt = source.query_prompt, source.doc_prompt
    check_prompt(query_prompt, "query_prompt")
    check_prompt(doc_prompt, "doc_prompt")
    o = build_options(options, **settings)
    if (o.add or o.sync) and (query_prompt is not None or doc_prompt is not None):
        raise EngineError(f"{opt('add' if o.add else 'sync')} encodes with the prompts the collection was built with; "
                          f"leave out {opt('query_prompt')} and {opt('doc_prompt')} (rebuild with {opt('force')} "
                          "to change them)")
    with writer_lock(collection_path(name, root), wait=o.wait):
        if o.ray is None:
            return _build_collection(name, source, root, o, report)
        from engine.core.cluster import ray_session
        with ray_session(o.ray):
            return _build_collection(name, source, root, o, report)


def _build_collection(name: str, source: BuildSource, root: str | Path | None, o: BuildOptions,
                      report: BuildReport | None) -> Path:
    images, texts, items, kind, extra = source.images, source.texts, source.items, source.kind, source.extra
    prompt_args = (source.query_prompt, source.doc_prompt)
    from engine.core.encoders.registry import DEFAULT_IMAGE_SPEC, DEFAULT_TEXT_SPEC, load_encoder, specs_for
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
    else:  # streamed: read again on each pass, never all in a list (engine.core.storage.builder.item_source)
        kind, items, fields_used = read_source(images, texts, o)
    check_lexical(o.bm25, kind, o.bm25_analyzer, o.add or o.sync)
    check_learned(o.sparse, o.multivector, o.multivector_store, kind)
    if o.sync:
        from engine.core.storage.builder.update import check_sync
        check_sync(images, path)
        o = replace(o, add=(path / MANIFEST).exists())
    source_name = str(images or texts or f"{len(items)} items")
    if not isinstance(items, ItemSource):  # a source's ids were checked (and fixed) when it was opened
        safe = trec_safe_ids([it.id for it in items], o.id_policy, source_name)
        items = [it if it.id == s else replace(it, id=s) for it, s in zip(items, safe)]

    model, index = o.model, o.factory()
    old: StoredCollection | None = None
    if o.add:
        items = list(items)  # adding compares with the old ids: the new items as a list
        old = StoredCollection.open(name, root)
        if old.kind != kind:
            raise EngineError(f"collection {name!r} holds {old.kind}s; adding {kind}s needs a collection of {kind}s")
        lexical_analyzer(old, o.bm25_analyzer)  # a different analyzer than the stored one: refused before a model loads
        learned_specs(old, o.sparse, o.multivector)  # likewise another sparse or multi-vector model
        if model and load_encoder(model).spec != old.manifest["encoder"]:
            raise EngineError(f"collection {name!r} was built with {old.manifest['encoder']}; items added to it "
                              f"must use the same model (leave {opt('model')} out)")
        model, index = old.manifest["encoder"], old.manifest["index_factory"]
        if o.dim is not None and o.dim != old.manifest.get("dim"):
            raise EngineError(f"collection {name!r} holds {old.manifest.get('dim')}-d vectors; items added to it "
                              f"keep them (leave {opt('dim')} out)")
        o = replace(o, shards=int(old.manifest.get("shards", 1)), dim=None)
        if o.update or o.sync:
            from engine.core.storage.builder.update import replace_rows
            old, items = replace_rows(old, items, o, report)
        elif old.live_mask() is not None:  # rows a delete marked are left out of the new generation
            from engine.core.storage.builder.update import Remaining, check_deletable
            check_deletable(old)
            old = Remaining(old, old.live_rows())
        have = set(old.ids)
        report.skipped_existing = sum(1 for it in items if it.id in have)
        items = [it for it in items if it.id not in have]
        if report.skipped_existing:
            info(f"{report.skipped_existing} items already in {name!r} are kept as they are")
        if not items:
            info(f"nothing new to add to {name!r}")
            return path
    elif (path / MANIFEST).exists() and not o.force:
        raise EngineError(f"collection {name!r} already exists in {path.parent}/; "
                          f"use {opt('add')} to append new items or {opt('force')} to rebuild it")
    elif o.force:
        announce_replacement(path, kind)

    from engine.core.encoders.device import set_device, set_dtype
    set_device(o.device)
    set_dtype(o.dtype)
    from engine.core.encoders.registry import check_embeds, with_dim
    spec = model or (DEFAULT_IMAGE_SPEC if kind == "image" else DEFAULT_TEXT_SPEC)
    check_embeds(spec, kind)  # a model its files show cannot embed `kind` is refused before it loads
    encoder = build_encoder(with_dim(spec, o.dim), kind, o)
    if kind not in encoder.modalities:
        raise EngineError(f"model {encoder.spec} cannot embed {kind}s; pick one of {', '.join(specs_for(kind))}")
    prompts = _prompts(encoder, old, kind, *prompt_args)
    if kind == "text":
        _warn_truncation(encoder, items)
        encoder = prompted(encoder, prompts.get("doc"))

    if o.ray is not None:
        from engine.core.storage.builder.ray_encode import encode_on_ray
    prefix = old.embedding_rows() if old is not None else None  # old rows, copied block by block
    emb, kept, failed = encode_chunked(path, encoder, kind, items, o, report,
                                       encode_local if o.ray is None else encode_on_ray, prefix=prefix)
    failed_items = take(items, [n for n, _ in failed])
    for n, reason in failed:
        report.failed.append({"id": failed_items[n].id, "path": failed_items[n].source, "reason": reason})

    count = len(kept) + (len(old.ids) if old is not None else 0)
    if count == 0:
        raise EngineError(f"no item of {source_name} could be encoded; nothing to index")

    choice = None
    if index == "auto":
        from engine.core.storage.index.auto import choose, parse_bytes
        label, queries = query_vectors(emb, encoder, kind, o.recall_queries, n=500)
        faiss_index, choice = choose(emb, queries, o.recall, parse_bytes(o.memory_budget), label)
        index, report.recall_at_10 = choice.factory, choice.recall
        show_choice(choice.manifest())
    else:
        info(f"building FAISS index {index!r} over {count} × {encoder.dim}")
        if o.shards == 1 and not (o.ray is not None and is_ivf(index)):  # Flat streamed on Ray too
            faiss_index = FlatFile(emb) if index == "Flat" else build_index(emb, index)
        else:
            from engine.core.storage.index.shards import build_scaled_index
            faiss_index = build_scaled_index(emb, index, o.shards, on_ray=o.ray is not None, workdir=path / PARTIAL)
        if not is_exact(index):
            report.recall_at_10 = _sampled_recall(faiss_index, emb, encoder, kind, o.recall_queries)
            info(f"recall@10 of {index!r} against exact search: {report.recall_at_10:.3f}")

    manifest = new_manifest(name, kind, encoder.spec, int(encoder.dim), index,
                            (old.manifest.get("sources", []) if old is not None else []) + [source_name],
                            text_fields=fields_used if kind == "text" else None,
                            skipped=(old.manifest.get("skipped", []) if old is not None else []) + report.failed,
                            recall_at_10=report.recall_at_10, **({"shards": o.shards} if o.shards > 1 else {}),
                            **({"prompts": prompts} if prompts else {}))
    if choice is not None:
        manifest["search_params"], manifest["index_choice"] = choice.params, choice.manifest()
    elif old is not None and old.manifest.get("search_params"):
        manifest["search_params"] = old.manifest["search_params"]  # a tuned operating point is kept on --add
    if old is not None:
        manifest["created"] = old.manifest["created"]
    rows = _rows(old, items, kept, kind, fields_used)  # streamed to the items file by the commit
    files = {}
    if o.bm25 or (old is not None and BM25 in old.stored):
        rows = list(rows)
        files = _bm25(old, rows, [it.source for _, it in kept_items(items, kept)], o.bm25_analyzer)
    documents = _image_files(old, items, kept) if kind == "image" else None
    if any(spec is not None for spec in learned_specs(old, o.sparse, o.multivector)):
        rows = list(rows)
        on_ray = None
        if o.ray is not None:
            from engine.core.storage.builder.ray_encode import encode_learned_on_ray as on_ray
        files.update(learned_files(old, o, [r["id"] for r in rows], _learned_documents(old, rows, items, kept,
                                                                                       documents), kind, on_ray))
    commit_collection(path, manifest, emb, rows, faiss_index, Extras(
        files=files, documents=documents,
        extra={**(old.extra if old is not None else {}), **(extra or {})}), count=count)
    if report.failed:
        lines = "\n".join(f"  {f['path']}: {f['reason']}" for f in report.failed[:20])
        more = f"\n  … and {len(report.failed) - 20} more (listed in {path / MANIFEST})" if len(report.failed) > 20 else ""
        warn(f"{len(report.failed)} of {len(items)} images skipped:\n{lines}{more}")
    info(f"collection {name!r}: {count} items in {path}")
    if encoder.info.get("runtime") != "onnx":  # built on the light sides: their exports are there already
        from engine.core.encoders.registry import prepare_queries
        prepare_queries(encoder.spec)  # queries then load no torch; exports say so, and happen once
    return path


def build_encoder(spec: str, kind: str, o: "BuildOptions"):
    """What encodes a build's items. On the CPU with no Ray: the model's light sides, the onnxruntime sessions
    its queries use (sentence models, conse, effnet and adapters over them; exported once, then no torch is
    imported; embeddings equal torch's within 1e-4, prompts included). On a GPU, on Ray, in bfloat16 (`--dtype`)
    and for models without an export: the whole (torch) encoder. Texts run as `parallel` slices at once (one per
    core, or `--threads`), each on one onnxruntime thread: on 2 cores that encodes more texts per CPU second,
    and per second, than one slice on two threads, torch's `encode` or a plain onnxruntime loop
    (benchmarks/onnx_build.py); images run one batch at a time on the session's threads (`--threads` caps
    them), as decoding already runs beside."""
    import os

    from engine.core.encoders.base import configure_threads
    from engine.core.encoders.device import on_cpu, usable_cores
    from engine.core.encoders.onnx_text import ORT_THREADS_ENV
    from engine.core.encoders.registry import light_encoder, load_encoder
    if o.ray is None and on_cpu(o.device) and o.dtype in ("auto", "float32"):  # bfloat16: torch's autocast
        before = os.environ.get(ORT_THREADS_ENV)
        threads = "1" if kind == "text" else str(o.threads or 0)
        os.environ[ORT_THREADS_ENV] = threads  # read when the sessions open, below
        try:
            light = light_encoder(spec)
        finally:
            if before is None:
                os.environ.pop(ORT_THREADS_ENV, None)
            else:
                os.environ[ORT_THREADS_ENV] = before
        if light is not None:
            if kind == "text":
                light = replace(light, info={**light.info, "parallel": o.threads or usable_cores()})
            return light
    configure_threads(o.threads)
    return load_encoder(spec)


def _rows(old: StoredCollection | None, items: Items, kept, kind: str, fields_used: list[str] | None
          ) -> Iterator[dict]:
    """The items rows of the new generation, streamed: the old ones first (on `add`), then the items kept."""
    if old is not None:
        yield from old.items
    for _, it in kept_items(items, kept):
        yield {"id": it.id, **_stored(it, kind, fields_used)}


def _stored(item: Item, kind: str, fields_used: list[str] | None) -> dict:
    """An item's row: its metadata, plus the embedded text where no text field holds it (a reranker reads it)."""
    if kind != "text" or fields_used:
        return item.meta
    from engine.core.sources import STORED_TEXT
    return {**item.meta, STORED_TEXT: item.source}


def _prompts(encoder, old: StoredCollection | None, kind: str, query: str | None, doc: str | None) -> dict:
    """The prompts the manifest stores: an added-to collection's own, else those given or preset."""
    from engine.core.encoders.prompts import resolve_prompts
    if old is not None:
        return dict(old.manifest.get("prompts") or {})
    if kind != "text" and "text" in encoder.modalities:
        return resolve_prompts(encoder, query, "")  # an image collection's text side takes queries only
    return resolve_prompts(encoder, query, doc) if "text" in encoder.modalities else {}


def _image_files(old: StoredCollection | None, items: Items, kept: Sequence[int]) -> dict[str, dict]:
    """The indexed files of an image collection (old ones kept on `add`): the only files a server reads."""
    files = dict(old.document(IMAGE_FILES)) if old is not None and IMAGE_FILES in old.stored else {}
    files.update({it.id: it.source for _, it in kept_items(items, kept)})
    from engine.core.storage.builder.update import image_stamps
    return {IMAGE_FILES: files, **image_stamps(old, files)}


def _learned_documents(old: StoredCollection | None, rows: list[dict], items: Items, kept: Sequence[int],
                       documents: dict | None) -> list[str]:
    """What the learned roles encode of each row, in order: a text collection's texts (old rows' from their
    stored fields), an image collection's image files (`documents`: the indexed files by id)."""
    if documents is not None:
        files = documents[IMAGE_FILES]
        return [files[r["id"]] for r in rows]
    new_texts = [it.source for _, it in kept_items(items, kept)]
    before = stored_texts(rows[:len(rows) - len(new_texts)], old.manifest.get("text_fields")) if old else []
    return before + new_texts


def _bm25(old, rows: list[dict], new_texts: list[str], analyzer: str | None) -> dict:
    """The BM25 role (`--bm25`, and kept in step on `--add` with the analyzer it was built with): old rows'
    texts from their stored fields."""
    before = stored_texts(rows[:len(rows) - len(new_texts)], old.manifest.get("text_fields")) if old else []
    return bm25_files([r["id"] for r in rows], before + new_texts, lexical_analyzer(old, analyzer))


def _warn_truncation(encoder, items: Items) -> None:
    limit = int(encoder.info.get("max_seq_length") or 0)
    if not limit:
        return
    # ~1.3 tokens a word, and at least one per 6 characters: one 20 MB "word" is far past the window too
    long = sum(1 for it in items if max(len(it.source.split()) * 1.3, len(it.source) / 6) > limit)
    if long:
        warn(f"about {long} of {len(items)} texts exceed the model's {limit}-token window; "
             f"only their beginning is embedded")

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
    from engine.core.storage.index.auto import choice_table
    from engine.display import format_table
    params = ", ".join(f"{k}={v:g}" for k, v in choice["params"].items()) or "no knobs"
    info(f"auto index on {choice['queries']}:\n{format_table(*choice_table(choice))}\n"
         f"chosen: {choice['factory']} ({params}): recall@10 {choice['recall@10']:.3f}, "
         f"{choice['speedup'] or 0:.1f}× exact QPS")
