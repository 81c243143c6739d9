"""A build's items streamed from their source: read again on each pass, a chunk at a time, never all in a list.

A table of 100M texts as `Item`s costs the build's process hundreds of bytes an item; an `ItemSource` holds
only what each pass needs. The scan that opens it checks what a list's build checked before any model loads:
ids unique (8-byte hashes sorted, not a set of ids: the one per-item cost left, 16 bytes an item while it
runs) and TREC-safe (`--id-policy`). Its passes: the checks, the plan's signature, the encoding chunk by
chunk (`chunk_items`), the rows of the items kept, which stream to the items file at the commit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, Union

import numpy as np

from engine.core.sources import Item, ItemPairs
from engine.errors import EngineError
from engine.io.ids import check_unique, first_duplicate, trec_fixed, trec_safe_ids, trec_unsafe

if TYPE_CHECKING:
    from engine.core.storage.builder.options import BuildOptions


@dataclass
class ItemSource:
    """Items in a stable order, read afresh on each `iter` (ids fixed by `--id-policy replace` on the way)."""
    name: str
    pairs: ItemPairs
    count: int = 0
    fix_ids: bool = False

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Item]:
        for _, it in self.pairs():
            yield _safe(it) if self.fix_ids else it


Items = Union[Sequence[Item], ItemSource]
"""What a build's chunk functions take: a list (ready items) or a source."""


def read_source(images, texts, o: "BuildOptions") -> tuple[str, ItemSource, list[str] | None]:
    """(kind, checked source, text fields used) of `--images` or `--texts`; texts with empty text are left out
    and named in a warning."""
    from engine.core.sources import image_pairs, text_pairs, warn_empty
    if images is not None:
        return "image", open_source(str(images), image_pairs(images, o.id_column, o.path_column), o.id_policy), None
    read, used = text_pairs(texts, id_column=o.id_column, fields=o.fields)
    empty: list[str] = []
    source = open_source(str(texts), read, o.id_policy, scan=read(empty))
    warn_empty(texts, empty)
    return "text", source, used


def open_source(name: str, pairs: ItemPairs, policy: str, scan: Iterator[tuple[int | None, Item]] | None = None
                ) -> ItemSource:
    """The source after one checking pass (`scan`, else `pairs()`): its count, ids unique (the first repeat
    named with its lines) and TREC-safe (strict: refused, the first few named; replace: fixed, still unique)."""
    bad: list[str] = []
    scan = pairs() if scan is None else scan
    hashes = np.fromiter(_id_hashes(((n, it.id) for n, it in scan), bad), dtype=np.int64)
    _check_unique(hashes, lambda: ((n, it.id) for n, it in pairs()), "id", name)
    source = ItemSource(name, pairs, len(hashes))
    if bad:
        trec_safe_ids(bad, policy, name)  # strict: the error, with the count and the first few
        source.fix_ids = True
        fixed = np.fromiter((hash(it.id) for it in source), dtype=np.int64, count=len(hashes))
        _check_unique(fixed, lambda: ((None, it.id) for it in source), "id (after replacing white space)", name)
    return source


def chunk_items(items: Sequence[Item] | ItemSource, bounds: Sequence[tuple[int, int]], todo: Iterable[int]
                ) -> Iterator[tuple[int, list[Item]]]:
    """(chunk, its items) for each chunk in `todo` (ascending), in one pass over a source: one chunk in memory."""
    todo = sorted(todo)
    if not isinstance(items, ItemSource):
        for c in todo:
            yield c, list(items[bounds[c][0]:bounds[c][1]])
        return
    want = iter(todo)
    c = next(want, None)
    chunk: list[Item] = []
    for n, it in enumerate(items):
        if c is None:
            return
        lo, hi = bounds[c]
        if n >= lo:
            chunk.append(it)
        if n == hi - 1:
            yield c, chunk
            chunk, c = [], next(want, None)


def take(items: Sequence[Item] | ItemSource, positions: Iterable[int]) -> dict[int, Item]:
    """The items at `positions` (few: a build's failures), in one pass over a source."""
    wanted = set(positions)
    if not isinstance(items, ItemSource):
        return {n: items[n] for n in wanted}
    return {n: it for n, it in enumerate(items) if n in wanted} if wanted else {}


def kept_items(items: Sequence[Item] | ItemSource, kept: np.ndarray) -> Iterator[tuple[int, Item]]:
    """(position, item) of the items at the ascending positions `kept`, streamed."""
    if not isinstance(items, ItemSource):
        for n in kept:
            yield int(n), items[int(n)]
        return
    at, end = 0, len(kept)
    for n, it in enumerate(items):
        if at == end:
            return
        if n == kept[at]:
            yield n, it
            at += 1


def _safe(it: Item) -> Item:
    return it if not trec_unsafe(it.id) else replace(it, id=trec_fixed(it.id))


def _id_hashes(ids: Iterable[tuple[int | None, str]], bad: list[str]) -> Iterator[int]:
    for _, i in ids:
        if trec_unsafe(i):
            bad.append(i)
        yield hash(i)


def _check_unique(hashes: np.ndarray, ids: Callable[[], Iterator[tuple[int | None, str]]], what: str, origin: str
                  ) -> None:
    """No id twice: equal hashes are found by sorting; only ids whose hash repeats are read again (a second
    pass) to tell a true repeat (the error, as `check_unique` words it) from a hash collision."""
    s = np.sort(hashes)
    twice = np.unique(s[1:][s[1:] == s[:-1]])
    del s
    if not len(twice):
        return
    suspects = set(twice.tolist())
    found = [(n, k, i) for k, (n, i) in enumerate(ids()) if hash(i) in suspects]
    lines = [n for n, _, _ in found]
    if any(n is None for n in lines):  # a folder's files: no lines; name the item positions
        sub = [i for _, _, i in found]
        dup = first_duplicate(sub)
        if dup is None:
            return
        first, again = dup
        raise EngineError(f"{origin}: duplicate {what} {sub[again]!r} (first at item {found[first][1] + 1}); "
                          f"{what}s must be unique")
    check_unique([i for _, _, i in found], what, origin, lines)
