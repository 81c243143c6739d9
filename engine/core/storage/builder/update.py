"""Deletes and updates as new generations: `engine delete NAME --ids FILE`, `engine compact NAME`, `engine build
--add --update` (items whose id is there already are re-encoded and replace the old rows) and `engine build
--images DIR --sync` (new files added, vanished ones dropped, changed ones re-encoded: by size and mtime, as
rclip does).

A delete marks rows, as Lucene and LanceDB do: the next generation keeps every file and adds the role
`tombstones` (the sorted deleted rows), so its cost follows the number deleted, not the collection's size:
it finds its rows through the generation's id index (`engine.core.storage.store.id_index`: hashes of the ids,
binary search, only the candidates' rows read; collections written before the index scan the ids). Every search skips those rows (dense, filtered, BM25, hybrid, the service); BM25's corpus statistics still
count them until a compaction. When the deleted rows pass `COMPACT_AT` of the collection (or on `engine
compact`), the remaining rows are written as the next generation in one commit: the embeddings streamed in
order from their file and the items rows copied as bytes (no row parsed), the metadata columns sliced, the
index made without retraining (Flat: a header over the new embeddings, which an older collection's whole
Flat file becomes; a plain IVF: `remove_ids`, then its ids renumbered to the new rows; others:
refilled or rebuilt with the same factory), and the BM25 index rebuilt from the remaining texts. So every
role stays aligned and equals a fresh build of the remaining items (an IVF keeps its trained centroids).
`--add`, `--update` and `--sync` write such a compacted generation too. Each is one commit under the writer
lock: a kill at any point leaves the previous generation whole, and running it again finishes the job.
"""
from __future__ import annotations

import json
import mmap
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from engine.core.storage.builder.learned_roles import LEARNED_ROLES, kept_learned_files
from engine.core.storage.builder.lexical import ROLE as BM25, bm25_files, lexical_analyzer, stored_texts
from engine.core.storage.store import generations
from engine.core.storage.store.columns import ROLE as COLUMNS, take_columns
from engine.core.storage.store.id_index import ROLE as ID_INDEX, kept_ids_writer, rows_of
from engine.core.storage.store.npy_rows import BLOCK, NpyRows
from engine.core.storage.store.stored import IMAGE_FILES, PARTIAL, TOMBSTONES, StoredCollection, collection_path, now
from engine.errors import EngineError, opt
from engine.progress import info, warn

if TYPE_CHECKING:
    from engine.core.storage.builder.options import BuildOptions, BuildReport
    from engine.core.sources import Item

STAMPS = "image_stamps"
"""JSON document of an image collection: item id → [size in bytes, mtime in ns] of the file encoded (`--sync`)."""
ROW_ROLES = (COLUMNS, BM25, IMAGE_FILES, STAMPS, *LEARNED_ROLES)
"""The roles beside the core files a delete knows how to keep aligned."""
COMPACT_AT = 0.25
"""Fraction of deleted rows past which a delete compacts the collection (`engine delete --compact-at`)."""


class Rows:
    """Some rows of a stored array, read block by block when sliced (a delete makes no full-size copy)."""

    def __init__(self, array: np.ndarray, rows: np.ndarray):
        self.array, self.rows = array, rows
        self.shape = (len(rows), *array.shape[1:])
        self.dtype = array.dtype

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key) -> np.ndarray:
        return np.asarray(self.array[self.rows[key]])


class Remaining:
    """An opened collection without some rows: what `--add --update` and `--sync` append to."""

    def __init__(self, old: StoredCollection, keep: np.ndarray):
        self.old, self.keep = old, keep
        self.path, self.manifest, self.kind, self.stored, self.extra = \
            old.path, old.manifest, old.kind, old.stored, old.extra
        self.items = old.items_at(keep) if len(keep) else []
        self.ids = [r["id"] for r in self.items]

    def __len__(self) -> int:
        return len(self.keep)

    def embedding_rows(self) -> "KeptRows":
        """The kept rows' embeddings, read block by block (what a build copies before its new rows)."""
        return KeptRows(NpyRows.open([self.old.file("embeddings")]), self.keep)

    def file(self, role: str) -> Path:
        """A role's file of the opened collection (what a rebuilt role reads its settings from)."""
        return self.old.file(role)

    def document(self, name: str) -> Any:
        doc = self.old.document(name)
        if name in (IMAGE_FILES, STAMPS):
            have = set(self.ids)
            return {k: v for k, v in doc.items() if k in have}
        return doc


class KeptRows:
    """Some rows of an `NpyRows`, in order: `len` and `blocks` as the streaming commit reads them."""

    def __init__(self, rows: NpyRows, keep: np.ndarray):
        self.rows, self.keep = rows, np.asarray(keep, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keep)

    def blocks(self, block: int = BLOCK) -> Iterator[tuple[int, np.ndarray]]:
        for lo in range(0, len(self.keep), block):
            yield lo, self.rows.take(self.keep[lo:lo + block])


# ------------------------------------------------------------------------------------------------ delete
def check_deletable(old: StoredCollection) -> None:
    other = [r for r in old.stored if r not in ROW_ROLES]
    if BM25 in old.stored and not old.manifest.get("text_fields"):
        raise EngineError(f"collection {old.name!r} stores a BM25 index over texts its items do not name (it was "
                          "made with Collection.from_vectors): a delete could not rebuild it; rebuild the collection "
                          "without the items")
    if other:
        raise EngineError(f"collection {old.name!r} stores task data ({', '.join(other)}) that a delete cannot "
                          f"keep aligned; rebuild it from its source without the items")


def delete_ids(name: str, ids: Sequence[str], root: str | Path | None = None, wait: float = 0.0,
               compact_at: float = COMPACT_AT) -> int:
    """Remove the items with these ids as a new generation that marks their rows (tombstones), or that
    leaves them out once more than `compact_at` of the rows are deleted; returns how many were removed
    (unknown ids are named in a warning: a delete run again after it finished removes nothing)."""
    from engine.core.storage.store.lock import writer_lock
    if not 0.0 <= compact_at <= 1.0:
        raise EngineError(f"{opt('compact_at')} must be between 0 and 1, not {compact_at}")
    path = collection_path(name, root)
    with writer_lock(path, wait=wait):
        old = StoredCollection.open(name, root)
        check_deletable(old)
        gone = set(map(str, ids))
        earlier = old.deleted_rows
        rows, found = rows_of(old, gone)
        live = ~np.isin(rows, earlier, assume_unique=True)  # an id deleted before is not there any more
        rows = rows[live]
        missing = len(gone) - len(rows)
        if missing:
            known = {i for i, alive in zip(found, live) if alive}
            some = [i for i in ids if i not in known][:5]
            warn(f"{missing} of {len(gone)} ids are not in {name!r} (already deleted?): {', '.join(some)}"
                 + (" …" if missing > 5 else ""))
        if not len(rows):
            info(f"nothing to delete from {name!r}")
            return 0
        dead = np.union1d(earlier, rows)
        remain = len(old) - len(dead)
        if not remain:
            raise EngineError(f"deleting every item of {name!r} leaves an empty collection; remove its folder "
                              f"{path} instead")
        if len(dead) > compact_at * len(old):
            commit_rows(old, np.setdiff1d(np.arange(len(old), dtype=np.int64), dead, assume_unique=True))
            how = "compacted"
        else:
            mark_deleted(old, dead)
            how = f"marked deleted; `engine compact {name}` rewrites it without them"
        info(f"deleted {len(rows)} items from {name!r}: {remain} remain ({how})")
        return len(rows)


def mark_deleted(old: StoredCollection, rows: np.ndarray) -> dict:
    """The next generation: every file of `old` kept, `rows` (sorted, every deleted row) as its tombstones."""
    manifest = {**old.manifest, "deleted": int(len(rows)), "updated": now()}
    keep = {r: f for r, f in old.manifest.get("roles", {}).items() if r != TOMBSTONES}
    return generations.commit(old.path, manifest, {TOMBSTONES: generations.npy(np.asarray(rows, np.int64))},
                              keep=keep)


def compact(name: str, root: str | Path | None = None, wait: float = 0.0) -> int:
    """Rewrite a collection without its deleted rows (`engine compact`); returns how many rows were dropped."""
    from engine.core.storage.store.lock import writer_lock
    path = collection_path(name, root)
    with writer_lock(path, wait=wait):
        old = StoredCollection.open(name, root)
        dropped = len(old) - old.live_count
        if not dropped:
            info(f"{name!r} has no deleted rows: nothing to compact")
            return 0
        check_deletable(old)
        commit_rows(old, old.live_rows())
        info(f"compacted {name!r}: {dropped} deleted rows dropped, {old.live_count} remain")
        return dropped


def commit_rows(old: StoredCollection, keep: np.ndarray, extra_writers: dict | None = None) -> dict:
    """The generation of `old` restricted to the rows `keep` (sorted), every role aligned; one commit."""
    keep = np.asarray(keep, dtype=np.int64)
    manifest = {**{k: v for k, v in old.manifest.items() if k != "deleted"}, "count": int(len(keep)),
                "updated": now()}
    vectors = Rows(old.embeddings, keep)
    index_writer = _index_writer(old, vectors, manifest)
    offsets: list = []
    embeddings = generations.kept_rows_npy(old.file("embeddings"), keep) or generations.npy_blocks(vectors)
    writers = {"embeddings": embeddings,
               "items": _items_bytes(old, keep, offsets), "item_offsets": generations.offsets_npy(offsets),
               "index": index_writer}
    roles = old.manifest.get("roles", {})
    if COLUMNS in roles:
        writers[COLUMNS] = take_columns(old.file(COLUMNS), keep)
    kept_rows = None
    if BM25 in roles or any(role in roles for role in LEARNED_ROLES):
        kept_rows = old.items_at(keep)
    if BM25 in roles:
        writers.update(bm25_files([r["id"] for r in kept_rows],
                                  stored_texts(kept_rows, old.manifest.get("text_fields")),
                                  lexical_analyzer(old, None)))
    if kept_rows is not None:
        from engine.core.storage.builder.options import BuildOptions
        writers.update(kept_learned_files(old, kept_rows, BuildOptions()))
    for doc in (IMAGE_FILES, STAMPS):
        if doc in roles:
            have = set(r["id"] for r in kept_rows) if kept_rows is not None else \
                set(json.loads(line)["id"] for line in _lines(old, keep))
            writers[doc] = generations.json_document({k: v for k, v in old.document(doc).items() if k in have})
    writers[ID_INDEX] = kept_ids_writer(old, keep)
    writers.update(extra_writers or {})
    keep_roles = {r: f for r, f in roles.items() if r not in writers and r != TOMBSTONES}
    return generations.commit(old.path, manifest, writers, keep=keep_roles)


def _lines(old: StoredCollection, rows: np.ndarray):
    offsets = _offsets(old)
    with open(old.file("items"), "rb") as fh:
        for r in rows:
            fh.seek(int(offsets[r]))
            yield fh.read(int(offsets[r + 1] - offsets[r]))


def _offsets(old: StoredCollection) -> np.ndarray:
    if "item_offsets" in old.manifest.get("roles", {}):
        return np.load(old.file("item_offsets"))
    return generations.line_offsets(old.file("items"))


def _items_bytes(old: StoredCollection, keep: np.ndarray, offsets: list, rows_per_block: int = 65536
                 ) -> generations.FileWriter:
    """The kept items rows copied as bytes, their offsets collected: the source mapped and, block by block of
    rows, the kept rows' bytes gathered with one mask and written (and hashed) in one write; no row parsed."""
    def write(path: Path) -> str:
        src = _offsets(old)
        lengths = np.diff(src)
        offsets.extend((np.concatenate([[0], np.cumsum(lengths[keep])])).tolist())
        kept = np.zeros(len(lengths), dtype=bool)
        kept[keep] = True
        with open(old.file("items"), "rb") as fh, generations.HashedFile(path) as out:
            if not os.fstat(fh.fileno()).st_size:
                return out.hexdigest()
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                mapped = np.frombuffer(data, dtype=np.uint8)
                for lo in range(0, len(lengths), rows_per_block):
                    hi = min(len(lengths), lo + rows_per_block)
                    block = kept[lo:hi]
                    if block.any():
                        raw = mapped[int(src[lo]):int(src[hi])]
                        out.write(raw.data if block.all() else raw[np.repeat(block, lengths[lo:hi])].data)
                        del raw
                del mapped  # no view left on the map: it can close
        return out.hexdigest()
    return generations.FileWriter(".jsonl", write)


def _index_writer(old: StoredCollection, vectors: Rows, manifest: dict) -> generations.FileWriter:
    """The index over the kept rows (`vectors`, the embeddings written beside it), without retraining where
    FAISS allows it; a Flat index as a header over those embeddings (an older collection's Flat file is
    upgraded so)."""
    from engine.core.storage.index.faiss_index import FlatFile, build_index, is_exact, save_collection_index
    factory = old.manifest.get("index_factory", "Flat")
    keep = vectors.rows
    index_file = old.file("index")
    shards = int(old.manifest.get("shards", 1))
    if index_file.is_dir() or shards > 1:
        from engine.core.storage.index.shards import build_scaled_index
        faiss_index = build_scaled_index(vectors, factory, shards, on_ray=False, workdir=old.path / PARTIAL)
        manifest["index_bytes"] = int(faiss_index.memory_bytes())
        manifest.pop("index_vectors", None)  # the shards hold their rows
        return faiss_index.writer()
    if is_exact(factory):
        faiss_index = FlatFile(vectors)
    else:
        faiss_index = _remove_from_ivf(index_file, keep, len(old)) or build_index(vectors, factory)

    def write(p: Path) -> None:
        save_collection_index(faiss_index, p, manifest, header_only=True)
    return generations.FileWriter(".faiss", write)


def _remove_from_ivf(index_file: Path, keep: np.ndarray, n: int):
    """A plain IVF index (lists in memory) with the dropped rows removed and the rest renumbered to their new
    rows; None for any other kind of index (then it is rebuilt)."""
    from engine.core.storage.index.faiss_index import faiss_module
    faiss = faiss_module()
    ivf = faiss.read_index(str(index_file))  # already its own class (a downcast copy would not own it)
    if not isinstance(ivf, faiss.IndexIVF):
        return None
    ivf.remove_ids(np.setdiff1d(np.arange(n, dtype=np.int64), keep))
    new_row = np.full(n, -1, dtype=np.int64)
    new_row[keep] = np.arange(len(keep))
    lists = ivf.invlists
    for lst in range(ivf.nlist):
        size = lists.list_size(lst)
        if size:
            ids = faiss.rev_swig_ptr(lists.get_ids(lst), size)
            ids[:] = new_row[ids]
    if ivf.ntotal != len(keep):
        return None
    return ivf


# ------------------------------------------------------------------------------------------------ update, sync
def file_stamp(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [int(st.st_size), int(st.st_mtime_ns)]


def image_stamps(old, files: dict[str, str]) -> dict[str, dict]:
    """The `image_stamps` document for an image collection's files (old stamps kept, new files stat'ed)."""
    before = old.document(STAMPS) if old is not None and STAMPS in old.stored else {}
    return {STAMPS: {i: before.get(i) or file_stamp(p) for i, p in files.items()}}


def replace_rows(old: StoredCollection, items: "list[Item]", o: "BuildOptions", report: "BuildReport"
                 ) -> tuple[Any, "list[Item]"]:
    """What `--update` / `--sync` keep of `old` and the items to encode: with update every given item
    replaces its old row; with sync the folder is the truth (unchanged files are kept as they are)."""
    given = {it.id for it in items}
    live = old.live_mask()
    old_ids = old.ids if live is None else [i if alive else None for i, alive in zip(old.ids, live)]
    if o.sync:
        stamps = old.document(STAMPS) if STAMPS in old.stored else {}
        files = old.document(IMAGE_FILES) if IMAGE_FILES in old.stored else {}
        built = _epoch_ns(old.manifest.get("updated"))
        have = set(old_ids) - {None}

        def changed(it: "Item") -> bool:
            now_stamp = file_stamp(it.source)
            if stamps.get(it.id) is not None:
                return now_stamp != stamps[it.id] or files.get(it.id) != it.source
            return now_stamp is None or now_stamp[1] > built or files.get(it.id, it.source) != it.source

        redo = {it.id for it in items if it.id in have and changed(it)}
        drop = {i for i in have if i not in given} | redo
        items = [it for it in items if it.id not in have or it.id in redo]
        info(f"sync {old.name!r}: {len(items) - len(redo)} new, {len(redo)} changed, "
             f"{len(drop) - len(redo)} vanished, {len(have) - len(drop)} unchanged")
    else:
        drop = {i for i in old_ids if i in given}
        info(f"{len(drop)} items of {old.name!r} are replaced, {len(given) - len(drop)} added")
    if not drop and live is None:
        return old, items
    check_deletable(old)
    keep = np.flatnonzero([i is not None and i not in drop for i in old_ids])  # deleted rows go too
    if not len(keep):
        raise EngineError(f"{opt('sync') if o.sync else opt('update')} would leave {old.name!r} without its old "
                          f"items; rebuild it with {opt('force')}")
    if not items:  # nothing to encode: the drop is the whole change
        commit_rows(old, keep)
        return old, items
    return Remaining(old, keep), items


def _epoch_ns(stamp: str | None) -> int:
    import datetime as dt
    if not stamp:
        return 0
    return int(dt.datetime.fromisoformat(stamp).timestamp() * 1e9)


def check_sync(images: str | Path | None, path: Path) -> None:
    """`--sync` re-reads an image folder: refused for any other source."""
    if images is None or not Path(images).is_dir():
        raise EngineError(f"{opt('sync')} re-syncs a folder of images with its collection; give {opt('images')} DIR")
