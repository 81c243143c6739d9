"""A collection opened for searching: the stored folder with its encoder and FAISS index, loaded lazily, and its
hits read row by row. What the ranking stages work on (`engine.core.ranking`); the public facade
(`engine.core.collection.Collection`) adds the doors above them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.storage.index.faiss_index import VECTORS_IN, SearchKnobs, check_knobs, read_flat_over, search_index
from engine.core.storage.index.loading import load_index
from engine.core.storage.store.stored import StoredCollection, rebuild_hint
from engine.errors import EngineError, opt

__all__ = ["Hit", "SearchableCollection", "check_k", "check_query"]


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



class SearchableCollection(StoredCollection):
    """An opened collection: the store's folder (`StoredCollection`: manifest, files, arrays, item rows) with
    its encoder and FAISS index, loaded lazily (`info` needs neither): what ranking stages search by vectors.
    The facade users call (`engine.core.collection.Collection`) adds the doors: build, search, attach."""

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
                if self.manifest.get(VECTORS_IN) == "embeddings":  # the index file is a header over them
                    self._index = read_flat_over(self.file("embeddings"), self.manifest.get("search_params"))
                else:
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
            found = search_index(self.index, queries, max(1, min(k, len(self))), self.search_params, params)
        else:
            from engine.core.storage.index.filtered import search_live
            found = search_live(lambda: self.index, self.embeddings, queries, max(1, min(k, self.live_count)), live,
                                self.search_params, params, self.exact_index)
        return self.finite(*found)

    def finite(self, scores: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's (scores, rows), refused when a found row's score is not a finite number: the collection holds
        a non-finite vector (query vectors are checked before), which no ranking can order."""
        if not np.isfinite(scores[rows >= 0]).all():
            raise EngineError(f"collection {self.name!r} gave a NaN or infinite score: it holds a non-finite vector; "
                              f"run `engine verify {self.name}` and rebuild it")
        return scores, rows

    @property
    def exact_index(self) -> bool:
        """Whether the index is one exact FAISS index (Flat, in one file): searched with a row selector, it
        returns what an exact scan of those rows would."""
        from engine.core.storage.index.faiss_index import is_exact
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
