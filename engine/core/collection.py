"""A collection: one folder that holds everything needed to search it (see `engine.core.storage.store`).

    indexes/NAME/manifest.json        format, encoder spec, dim, metric, count, factory, version, checksums
    indexes/NAME/embeddings-G.npy     (count, dim) float32, L2-normalized, row i = item i
    indexes/NAME/items-G.jsonl        {"id": ..., **metadata} per row, aligned with the embeddings
    indexes/NAME/item_offsets-G.npy   int64 start byte of each items row + the file's end: a hit's row is read
                                      alone (collections written before it scan the file for newlines once)
    indexes/NAME/index-G.faiss        the FAISS index over the same rows
    indexes/NAME/<role>-G.*           named arrays, JSON documents or folders a task keeps beside them

Tasks store every vector and matrix they need this way (`from_vectors(..., arrays=...)`, `attach`), so each
stored thing is atomic, checksummed and versioned alike; `extra` holds a task's small settings.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from engine.core.ranking.search_settings import SearchSettings
from engine.core.storage.store import generations
from engine.core.storage.searchable import Hit, SearchableCollection, check_k, check_query
from engine.core.storage.store.stored import (CORE_ROLES, DEFAULT_ROOT, IMAGE_FILES, MANIFEST, PARTIAL, Extras, attach_roles, collection_path, list_collections, rebuild_hint)
from engine.errors import EngineError
from engine.progress import make_progress

if TYPE_CHECKING:
    from engine.core.storage.builder.options import BuildOptions, BuildReport
    from engine.core.ranking.rerankers.spec import RerankerSpec

__all__ = ["Collection", "Hit", "check_k", "check_query", "CORE_ROLES", "DEFAULT_ROOT", "IMAGE_FILES", "MANIFEST",
           "PARTIAL", "collection_path", "list_collections", "rebuild_hint"]


class Collection(SearchableCollection):
    """The facade users call: an opened collection (`SearchableCollection`: files, encoder, index) with its
    doors: build, search (a thin door onto the ranking pipeline), from_vectors, attach."""

    def search(self, text: str | None = None, image: str | None = None, settings: SearchSettings | None = None,
               **options: Any) -> list[Hit]:
        """Top-k for one text or one image query, encoded with the collection's own encoder. `options` (or
        `settings`) are `SearchSettings` fields: k, knobs, mode, fusion, where, rerank, rerank_depth,
        rerank_options; the search runs as the pipeline `SearchSettings.stage` builds
        (`engine.core.ranking.search_settings`)."""
        from engine.core.ranking.pipeline.query import Query
        from engine.core.ranking.search_settings import run_search
        s = SearchSettings.of(settings, options)
        if (text is None) == (image is None):
            raise EngineError("give either a text query or an image query")
        check_query(text, s.k)
        stage = s.stage(self, text is not None)
        return run_search(self, stage, [Query("q", text or "", image=image)])[0]

    def search_many(self, texts: Sequence[str] | None = None, images: Sequence[str] | None = None,
                    settings: SearchSettings | None = None, **options: Any) -> list[list[Hit]]:
        """Batched search with a progress bar; one ranked list per query, in order (options: see `search`;
        `batch_size` queries at a time through the same pipeline)."""
        from engine.core.ranking.pipeline.query import Query
        from engine.core.ranking.search_settings import run_search
        s = SearchSettings.of(settings, options)
        k, batch_size = s.k, s.batch_size
        queries = list(texts if texts is not None else images or [])
        for text in texts or [k]:
            check_query(text if texts is not None else None, k)
        stage = s.stage(self, texts is not None)
        out: list[list[Hit]] = []
        with make_progress() as bar:
            task = bar.add_task("searching", total=len(queries))
            for start in range(0, len(queries), batch_size):
                chunk = [Query(str(n), q) if texts is not None else Query(str(n), image=q)
                         for n, q in enumerate(queries[start:start + batch_size], start)]
                out.extend(run_search(self, stage, chunk))
                bar.advance(task, len(chunk))
        return out

    def search_to_run(self, queries: Sequence[tuple[str, str]], out: str | Path, run_id: str | None = None,
                      settings: SearchSettings | None = None, **options: Any) -> int:
        """Search a file's worth of (qid, text) queries and write a TREC run; returns lines written. Options as
        `search_many`'s, but k is 100 unless given."""
        from engine.io.runs import write_run
        s = SearchSettings.of(settings, options, k=100)
        results = self.search_many(texts=[t for _, t in queries], settings=s)
        rankings = {qid: [(h.id, h.score) for h in hits] for (qid, _), hits in zip(queries, results)}
        return write_run(out, rankings, run_id or self.run_label(s.mode, s.rerank))

    def run_label(self, mode: str | None = None, rerank: "str | RerankerSpec | None" = None) -> str:
        """The default run id of a search of this collection: what produced the run (collection, mode,
        reranker), so runs of one collection by different modes stay apart in a comparison: `docs-hybrid`,
        `docs-dense-cross-minilm-ce`."""
        import re

        from engine.core.ranking.hybrid import resolve_mode
        parts = [self.name, resolve_mode(self, mode, True) if self.kind == "text" else (mode or "dense")]
        if rerank is not None:
            kind, _, arg = str(rerank).strip().partition(":")
            parts += [kind, Path(arg.rstrip("/")).name] if arg else [kind]
        return re.sub(r"[^\w.+=-]+", "_", "-".join(p for p in parts if p))

    # ------------------------------------------------------------------ writing
    @classmethod
    def build(cls, name: str, *, root: str | Path | None = None, options: "BuildOptions | None" = None,
              report: "BuildReport | None" = None, **settings: Any) -> "Collection":
        """Build (or with `add`, extend) a collection by encoding a source. `settings` name the source: an image
        folder/table (`images=`), a text table (`texts=`), or ready `items=` of a `kind=` ("image": source is a
        path; "text": the text); `extra=` manifest fields, `query_prompt=`/`doc_prompt=`; and any `BuildOptions`
        field (model, index, batch_size, …); see `engine.core.storage.builder.options`."""
        from engine.core.storage.builder.from_source import build_collection, split_source
        source, rest = split_source(settings)
        path = build_collection(name, source, root, options, report, **rest)
        return cls.open(path.name, path.parent, verify=False)

    @classmethod
    def from_vectors(cls, name: str, ids: Sequence[str], vectors: np.ndarray, encoder_spec: str | None,
                     kind: str, root: str | Path | None = None, **options: Any) -> "Collection":
        """A collection over vectors computed elsewhere (L2-normalized here), queried with `encoder_spec`
        (None: vectors only). `options`: `index` (default Flat), per-row `meta`, `force`; `arrays`, JSON
        `documents` and `files` stored beside them, `extra` in the manifest. `index="auto"` measures candidates
        on `queries` (the vectors users will search with; default: a sample of these vectors) for `recall`
        (0.95) within `memory_budget` bytes (see `engine.core.storage.index.auto`)."""
        from engine.core.storage.builder.from_vectors import VectorPlan, commit_vectors
        path = commit_vectors(name, ids, vectors, encoder_spec, kind, root, VectorPlan.of(options))
        return cls.open(path.name, path.parent, verify=False)

    @classmethod
    def from_vector_files(cls, name: str, vectors: str | Path, root: str | Path | None = None,
                          options: "BuildOptions | None" = None, report: "BuildReport | None" = None,
                          **settings: Any) -> "Collection":
        """`engine build --vectors`: a collection over `.npy` vectors computed elsewhere (one file or a folder of
        shards), read block by block; see `engine.core.storage.builder.from_vectors`. `settings`: `ids=` and `meta=` files,
        `encoder_spec=` (None: searched by vector only), and `BuildOptions` fields (index, memory_budget,
        chunk_size, shards, ray, …)."""
        from engine.core.storage.builder.from_vectors import VectorFiles, build_from_vector_files
        named = {k: settings.pop(k) for k in ("ids", "meta", "encoder_spec") if k in settings}
        path = build_from_vector_files(name, VectorFiles(vectors, **named), root, options, report, **settings)
        return cls.open(path.name, path.parent, verify=False)

    def attach(self, arrays: Mapping[str, np.ndarray] | None = None,
               files: Mapping[str, generations.FileWriter] | None = None, extra: Mapping[str, Any] | None = None,
               documents: Mapping[str, Any] | None = None) -> "Collection":
        """Store more named arrays, JSON documents or folders (and merge `extra`) as a new generation that
        keeps every existing file; returns the collection reopened."""
        from engine.core.storage.store.lock import writer_lock  # writes only: a query never takes it
        with writer_lock(self.path):
            attach_roles(self, Extras(arrays, files, documents).writers(), extra)
        return Collection.open(self.path.name, self.path.parent, verify=False)
