"""The `sparse` role of a text collection (`engine build --texts F --sparse sparse:NAME_OR_DIR`): the items'
embedded texts through a SparseEncoder's document side, as an inverted index (engine.core.storage.index.sparse).
Like the BM25 role, a commit that changes the rows through a build (`--add`, `--update`) rebuilds it over every
row with the model it was built with, so it never drifts from the vectors; the index records the rows it covers,
and a search refuses one that no longer matches them."""
from __future__ import annotations

from typing import Any, Sequence

from engine.core.storage.index.sparse import ROLE, SparseIndex
from engine.core.storage.store.generations import FileWriter
from engine.errors import EngineError, opt


def check_sparse(spec: str | None, kind: str | None) -> None:
    """`--sparse SPEC` indexes texts with a SparseEncoder: the spec checked, before any model loads."""
    if spec is None:
        return
    from engine.core.encoders.sparse import sparse_model_name
    sparse_model_name(spec)
    if kind is not None and kind != "text":
        raise EngineError(f"{opt('sparse')} indexes texts; build a text collection with {opt('texts')} FILE")


def sparse_spec(old: Any, requested: str | None) -> str | None:
    """The model the role is (re)built with: an existing role's own (another one is refused), else the one
    requested."""
    if old is None or ROLE not in old.manifest.get("roles", {}):
        return requested
    stored = SparseIndex.load(old.file(ROLE)).meta.get("spec")
    if requested is not None and requested != stored:
        raise EngineError(f"collection {old.name!r} keeps a sparse index of {stored}; {opt('sparse')} {requested} "
                          f"would change it: rebuild with {opt('force')}")
    return stored


def sparse_files(spec: str, ids: Sequence[str], texts: Sequence[str], batch_size: int = 32) -> dict[str, FileWriter]:
    """The `sparse` role over these documents (the collection's rows, in order)."""
    from engine.core.encoders.sparse import encode_sparse, similarity_name, sparse_model_name
    from engine.progress import info
    name = sparse_model_name(spec)
    similarity_name(name)
    info(f"sparse index: {len(texts)} texts through {spec}")
    vectors = encode_sparse(name, list(texts), query=False, batch_size=batch_size)
    return {ROLE: SparseIndex.build(vectors, [str(i) for i in ids], spec).writer()}
