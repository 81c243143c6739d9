"""A collection: one folder that holds everything needed to search it (see `engine.core.store`).

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from engine.core.index.faiss_index import SearchKnobs, check_knobs, search_index
from engine.core.index.loading import load_index
from engine.core.search_settings import SearchSettings
from engine.core.store import generations
from engine.core.store.stored import (CORE_ROLES, DEFAULT_ROOT, IMAGE_FILES, MANIFEST, PARTIAL, StoredCollection,
                                      Extras, attach_roles, collection_path, list_collections, rebuild_hint)
from engine.errors import EngineError, opt
from engine.progress import make_progress

if TYPE_CHECKING:
    from engine.core.build.options import BuildOptions, BuildReport
    from engine.core.rerankers.base import Reranker

__all__ = ["Collection", "Hit", "check_k", "check_query", "CORE_ROLES", "DEFAULT_ROOT", "IMAGE_FILES", "MANIFEST",
           "PARTIAL", "collection_path", "list_collections", "rebuild_hint"]


@dataclass
class Hit:
    id: str
    score: float
    rank: int
    meta: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"rank": self.rank, "id": self.id, "score": self.score, **({"meta": self.meta} if self.meta else {})}


def check_k(k: int) -> None:
    """`k` results per query: at least one (FAISS would quietly return one for 0 or -1)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise EngineError(f"{opt('k')} must be a whole number of at least 1, not {k!r}")


def check_query(text: str | None, k: int) -> None:
    """What a search needs before any model loads: a positive `k` and, for a text query, some text."""
    check_k(k)
    if text is not None and not text.strip():
        raise EngineError("the text query is empty; give some words to search for")



class Collection(StoredCollection):
    """An opened collection: the store's folder (`StoredCollection`: manifest, files, arrays, item rows) with
    its encoder and FAISS index, loaded lazily (`info` needs neither). The one facade users call: build, search,
    from_vectors, attach."""

    def __init__(self, path: Path, manifest: dict):
        super().__init__(path, manifest)
        self._encoder = None
        self._text_encoder = None
        self._image_encoder = None
        self._index = None

    @property
    def encoder(self):
        if self._encoder is None:
            spec = self.manifest.get("encoder")
            if not spec:
                raise EngineError(f"collection {self.name!r} stores vectors made outside an encoder; search it "
                                  "with vectors (`search_vectors`)")
            from engine.core.encoders.registry import load_encoder
            self._encoder = load_encoder(spec)
        return self._encoder

    @property
    def text_query_encoder(self):
        """What embeds text queries: the encoder's light text side (ONNX, no torch) unless the whole encoder
        was loaded before any text query (then it is used: no second model)."""
        if self._text_encoder is None and self._encoder is not None:
            return self._encoder
        if self._text_encoder is None:
            spec = self.manifest.get("encoder")
            if not spec:
                return self.encoder  # raises the vectors-only error
            from engine.core.encoders.registry import load_text_query_encoder
            self._text_encoder = load_text_query_encoder(spec)
        return self._text_encoder

    @property
    def image_query_encoder(self):
        """What embeds image queries: the encoder's light image side (ONNX + PIL) unless the whole encoder is
        already loaded (then it is used: no second model)."""
        if self._image_encoder is None:
            if self._encoder is not None or not self.manifest.get("encoder"):
                return self.encoder
            from engine.core.encoders.registry import light_image_query_encoder
            self._image_encoder = light_image_query_encoder(self.manifest["encoder"]) or self.encoder
        return self._image_encoder

    @property
    def index(self):
        if self._index is None:
            try:
                self._index = load_index(self.file("index"), self.manifest.get("search_params"))
            except RuntimeError as exc:
                if self._rebuilt():
                    raise self._gone() from None
                raise EngineError(f"{self.file('index')}: FAISS cannot read it ({str(exc).strip()[-120:]}); "
                                  f"{rebuild_hint(self.name)}") from None
        return self._index

    @property
    def search_params(self) -> dict[str, float]:
        """The stored query-time knobs (nprobe, efSearch, k_factor_rf) the index searches with by default."""
        return dict(self.manifest.get("search_params") or {})

    # ------------------------------------------------------------------ searching
    def encode_queries(self, texts: Sequence[str] | None = None, images: Sequence[str] | None = None,
                       batch_size: int = 64) -> np.ndarray:
        from engine.core.encoders.registry import specs_for
        enc = self.text_query_encoder if texts is not None else self.image_query_encoder
        if texts is not None:
            if "text" not in enc.modalities:
                raise EngineError(f"collection {self.name!r} ({enc.spec}) takes image queries only; query with "
                                  f"{opt('image')}, or build it with an image–text model "
                                  f"({', '.join(s for s in specs_for('text') if s in specs_for('image'))})")
            from engine.core.encoders.prompts import query_prompted
            return query_prompted(enc, self.manifest).encode_texts(list(texts), batch_size=batch_size)
        if "image" not in enc.modalities:
            raise EngineError(f"collection {self.name!r} ({enc.spec}) takes text queries only; "
                              f"search it with text, or build an image collection for image queries")
        res = enc.encode_images(list(images or []), batch_size=batch_size)
        if res.failed:
            pos, reason = res.failed[0]
            raise EngineError(f"query image {list(images)[pos]}: {reason}")
        return res.embeddings

    def check_search(self, k: int, knobs: "SearchKnobs | None" = None) -> dict:
        """The search arguments checked against this collection before any model loads; the knobs' params."""
        check_k(k)
        params = (knobs or SearchKnobs()).params()
        check_knobs(self.manifest.get("index_factory", "Flat"), params)
        return params

    def search_vectors(self, queries: np.ndarray, k: int = 10, knobs: "SearchKnobs | None" = None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Raw FAISS results: (scores, row indices), -1 where fewer than k. `knobs` override the stored
        nprobe / efSearch / k_factor for this call only."""
        params = self.check_search(k, knobs)
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if queries.shape[1] != self.dim:
            raise EngineError(f"query vectors are {queries.shape[1]}-d, collection {self.name!r} is {self.dim}-d")
        live = self.live_mask()
        if live is None:
            return search_index(self.index, queries, max(1, min(k, len(self))), self.search_params, params)
        from engine.core.index.filtered import search_live
        return search_live(lambda: self.index, self.embeddings, queries, max(1, min(k, self.live_count)), live,
                           self.search_params, params, self.exact_index)

    @property
    def exact_index(self) -> bool:
        """Whether the index is one exact FAISS index (Flat, in one file): searched with a row selector, it
        returns what an exact scan of those rows would."""
        from engine.core.index.faiss_index import is_exact
        return is_exact(self.manifest.get("index_factory", "Flat")) and int(self.manifest.get("shards", 1)) == 1

    def hits(self, scores: np.ndarray, rows: np.ndarray) -> list[list[Hit]]:
        """Hits with their items rows; only the rows hit are read from the items file."""
        wanted = sorted({int(i) for i in np.asarray(rows).ravel() if i >= 0})
        items = dict(zip(wanted, self.items_at(wanted)))
        out = []
        for srow, irow in zip(scores, rows):
            hits, rank = [], 0
            for s, i in zip(srow, irow):
                if i < 0:
                    continue
                rank += 1
                item = items[int(i)]
                hits.append(Hit(item["id"], float(s), rank, {k: v for k, v in item.items() if k != "id"}))
            out.append(hits)
        return out

    def search(self, text: str | None = None, image: str | None = None, settings: SearchSettings | None = None,
               **options: Any) -> list[Hit]:
        """Top-k for one text or one image query, encoded with the collection's own encoder. `options` (or
        `settings`) are `SearchSettings` fields: k, knobs, mode, fusion, where, rerank, rerank_depth,
        rerank_options (`engine.core.hybrid`, `engine.core.filters`, `engine.core.rerankers`)."""
        from engine.core.hybrid import check_search_mode, search_rows
        s = SearchSettings.of(settings, options)
        if (text is None) == (image is None):
            raise EngineError("give either a text query or an image query")
        check_query(text, s.k)
        self.check_search(s.k, s.knobs)
        check_search_mode(self, s.mode, s.fusion, s.where, text is not None)
        depth = self.check_rerank(s.rerank, s.rerank_depth, s.k, image is None, s.rerank_options)
        q = self.encode_queries(images=[image]) if image is not None else None
        hits = self.hits(*search_rows(self, depth, [text] if text is not None else None, q, s.mode, s.fusion,
                                      s.where, s.knobs))[0]
        return self.reranked([text], [hits], s.rerank, s.k, s.rerank_options)[0]

    def check_rerank(self, rerank: "str | Reranker | None", depth: int | None, k: int, text: bool,
                     options: Mapping[str, Any] | None = None) -> int:
        """What the first stage fetches (k, or the reranker's depth), checked before any model loads."""
        from engine.core.rerankers.stage import check_rerank
        return check_rerank(self, rerank, depth, k, text, options)

    def reranked(self, texts: Sequence[str], hits: list[list[Hit]], rerank: "str | Reranker | None",
                 k: int, options: Mapping[str, Any] | None = None) -> list[list[Hit]]:
        """Each query's hits reordered by `rerank` and cut to k (unchanged without one)."""
        if rerank is None:
            return hits
        from engine.core.rerankers.stage import as_reranker, rerank_hits
        reranker = as_reranker(rerank, **(options or {}))
        return [rerank_hits(reranker, t, h, k, self) for t, h in zip(texts, hits)]

    def search_many(self, texts: Sequence[str] | None = None, images: Sequence[str] | None = None,
                    settings: SearchSettings | None = None, **options: Any) -> list[list[Hit]]:
        """Batched search with a progress bar; one ranked list per query, in order (options: see `search`;
        `batch_size` queries at a time)."""
        from engine.core.hybrid import check_search_mode, search_rows
        s = SearchSettings.of(settings, options)
        k, batch_size = s.k, s.batch_size
        queries = list(texts if texts is not None else images or [])
        for text in texts or [k]:
            check_query(text if texts is not None else None, k)
        self.check_search(k, s.knobs)
        check_search_mode(self, s.mode, s.fusion, s.where, texts is not None)
        depth = self.check_rerank(s.rerank, s.rerank_depth, k, texts is not None, s.rerank_options)
        rerank = s.rerank
        if rerank is not None:
            from engine.core.rerankers.stage import as_reranker
            rerank = as_reranker(rerank, **(s.rerank_options or {}))
        out: list[list[Hit]] = []
        with make_progress() as bar:
            task = bar.add_task("searching", total=len(queries))
            for start in range(0, len(queries), batch_size):
                chunk = queries[start:start + batch_size]
                q = None if texts is not None else self.encode_queries(images=chunk, batch_size=batch_size)
                hits = self.hits(*search_rows(self, depth, chunk if texts is not None else None, q, s.mode,
                                              s.fusion, s.where, s.knobs))
                out.extend(self.reranked(chunk, hits, rerank, k))
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

    def run_label(self, mode: str | None = None, rerank: "str | Reranker | None" = None) -> str:
        """The default run id of a search of this collection: what produced the run (collection, mode,
        reranker), so runs of one collection by different modes stay apart in a comparison: `docs-hybrid`,
        `docs-dense-cross-minilm-ce`."""
        import re

        from engine.core.hybrid import resolve_mode
        parts = [self.name, resolve_mode(self, mode, True) if self.kind == "text" else (mode or "dense")]
        if rerank is not None:
            spec = rerank if isinstance(rerank, str) else getattr(rerank, "spec", "rerank")
            kind, _, arg = spec.partition(":")
            parts += [kind, Path(arg.rstrip("/")).name] if arg else [kind]
        return re.sub(r"[^\w.+=-]+", "_", "-".join(p for p in parts if p))

    # ------------------------------------------------------------------ writing
    @classmethod
    def build(cls, name: str, *, root: str | Path | None = None, options: "BuildOptions | None" = None,
              report: "BuildReport | None" = None, **settings: Any) -> "Collection":
        """Build (or with `add`, extend) a collection by encoding a source. `settings` name the source: an image
        folder/table (`images=`), a text table (`texts=`), or ready `items=` of a `kind=` ("image": source is a
        path; "text": the text); `extra=` manifest fields, `query_prompt=`/`doc_prompt=`; and any `BuildOptions`
        field (model, index, batch_size, …); see `engine.core.build.options`."""
        from engine.core.build.from_source import build_collection, split_source
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
        (0.95) within `memory_budget` bytes (see `engine.core.index.auto`)."""
        from engine.core.build.from_vectors import VectorPlan, commit_vectors
        path = commit_vectors(name, ids, vectors, encoder_spec, kind, root, VectorPlan.of(options))
        return cls.open(path.name, path.parent, verify=False)

    @classmethod
    def from_vector_files(cls, name: str, vectors: str | Path, root: str | Path | None = None,
                          options: "BuildOptions | None" = None, report: "BuildReport | None" = None,
                          **settings: Any) -> "Collection":
        """`engine build --vectors`: a collection over `.npy` vectors computed elsewhere (one file or a folder of
        shards), read block by block; see `engine.core.build.from_vectors`. `settings`: `ids=` and `meta=` files,
        `encoder_spec=` (None: searched by vector only), and `BuildOptions` fields (index, memory_budget,
        chunk_size, shards, ray, …)."""
        from engine.core.build.from_vectors import VectorFiles, build_from_vector_files
        named = {k: settings.pop(k) for k in ("ids", "meta", "encoder_spec") if k in settings}
        path = build_from_vector_files(name, VectorFiles(vectors, **named), root, options, report, **settings)
        return cls.open(path.name, path.parent, verify=False)

    def attach(self, arrays: Mapping[str, np.ndarray] | None = None,
               files: Mapping[str, generations.FileWriter] | None = None, extra: Mapping[str, Any] | None = None,
               documents: Mapping[str, Any] | None = None) -> "Collection":
        """Store more named arrays, JSON documents or folders (and merge `extra`) as a new generation that
        keeps every existing file; returns the collection reopened."""
        from engine.core.store.lock import writer_lock  # writes only: a query never takes it
        with writer_lock(self.path):
            attach_roles(self, Extras(arrays, files, documents).writers(), extra)
        return Collection.open(self.path.name, self.path.parent, verify=False)
