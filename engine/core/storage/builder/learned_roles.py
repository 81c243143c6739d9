"""The roles a text collection may keep beside its dense vectors, each made by a model of its own family:
`sparse` (`engine build --texts F --sparse sparse:NAME_OR_DIR`: a SparseEncoder's document weights as an
inverted index, engine.core.storage.index.sparse) and `multivector` (`--multivector multivector:NAME_OR_DIR`:
a MultiVectorEncoder's token vectors, their fixed-dimensional encodings and the inverted file of their centroids, engine.core.storage.index.multivector).
An image collection keeps a `multivector` role too where the model embeds images (a ColPali/ColQwen2 page
retriever): each image's token vectors, in the same index, searched by the same stage.

Like the BM25 role, a commit that changes the rows through a build (`--add`, `--update`, `--sync`) or drops
rows (a delete's compaction, `engine compact`) rebuilds them over every row kept with the model they were built
with, so they never drift from the vectors; a delete that only marks rows keeps them (the stages skip the
marked rows). Each records the rows it covers, and a search refuses one that no longer matches them."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from engine.core.storage.builder.lexical import stored_texts
from engine.core.storage.index.multivector import ROLE as MULTIVECTOR, STORES, MultiVectorIndex
from engine.core.storage.index.sparse import ROLE as SPARSE, SparseIndex
from engine.core.storage.store.generations import FileWriter
from engine.errors import EngineError, opt

LEARNED_ROLES = (SPARSE, MULTIVECTOR)


def check_learned(sparse: str | None, multivector: str | None, store: str, kind: str | None) -> None:
    """`--sparse SPEC` indexes texts, `--multivector SPEC` texts or (a model that embeds images) images: the
    specs checked, before any model loads."""
    from engine.core.encoders.multivector import check_images, model_name
    from engine.core.encoders.sparse import sparse_model_name
    if sparse is not None:
        sparse_model_name(sparse)
    if multivector is not None:
        if not multivector.strip().lower().startswith("multivector:"):
            raise EngineError(f"{opt('multivector')} {multivector!r}: write multivector:NAME_OR_DIR")
        model_name(multivector)
    if store not in STORES:
        raise EngineError(f"{opt('multivector_store')} must be one of {', '.join(STORES)}, not {store!r}")
    if sparse is not None and kind is not None and kind != "text":
        raise EngineError(f"{opt('sparse')} indexes texts; build a text collection with {opt('texts')} FILE")
    if multivector is not None and kind is not None and kind not in ("text", "image"):
        raise EngineError(f"{opt('multivector')} indexes texts or images; build the collection with "
                          f"{opt('texts')} FILE or {opt('images')} DIR")
    if multivector is not None and kind == "image":
        check_images(multivector)


def _kept_spec(old: Any, role: str, loader, option: str, requested: str | None) -> str | None:
    if old is None or role not in old.manifest.get("roles", {}):
        return requested
    stored = loader(old.file(role)).meta.get("spec")
    if requested is not None and requested != stored:
        raise EngineError(f"collection {old.name!r} keeps a {role} index of {stored}; {opt(option)} {requested} "
                          f"would change it: rebuild with {opt('force')}")
    return stored


def learned_specs(old: Any, sparse: str | None, multivector: str | None) -> tuple[str | None, str | None]:
    """The models the roles are (re)built with: an existing role's own (another one is refused), else the ones
    requested."""
    return (_kept_spec(old, SPARSE, SparseIndex.load, "sparse", sparse),
            _kept_spec(old, MULTIVECTOR, MultiVectorIndex.load, "multivector", multivector))


def learned_files(old: Any, o: Any, ids: Sequence[str], texts: Sequence[str], kind: str = "text",
                  on_ray: Callable | None = None) -> dict[str, FileWriter]:
    """The `sparse` and `multivector` roles over these documents (the collection's rows, in order: their texts,
    or for `kind` "image" their image files), for those requested (`o.sparse`, `o.multivector`) or already kept
    by `old`; with `--ray`, texts are encoded by `on_ray` (`engine.core.storage.builder.ray_encode.
    encode_learned_on_ray`, which the build passes: the chunked encoders sit above this module). Page images
    encode here."""
    from engine.core.encoders.device import batch_size_for
    from engine.progress import info
    sparse, multivector = learned_specs(old, o.sparse, o.multivector)
    batch = batch_size_for(o.batch_size, "text", o.device)  # the CLI's "32" or "auto" as a number
    where = " on Ray" if on_ray is not None else ""
    files: dict[str, FileWriter] = {}
    if sparse is not None:
        from engine.core.encoders.sparse import encode_sparse, similarity_name, sparse_model_name
        name = sparse_model_name(sparse)
        similarity_name(name)
        info(f"sparse index: {len(texts)} texts through {sparse}{where}")
        vectors = _encode(encode_sparse, name, texts, o, batch, on_ray)
        files[SPARSE] = SparseIndex.build(vectors, [str(i) for i in ids], sparse).writer()
    if multivector is not None:
        from engine.core.encoders.multivector import encode_image_tokens, encode_tokens, model_name
        if kind == "image":
            info(f"multi-vector index: {len(texts)} images through {multivector}")
            tokens = encode_image_tokens(model_name(multivector), list(texts), batch_size=batch)
        else:
            info(f"multi-vector index: {len(texts)} texts through {multivector}{where}")
            tokens = _encode(encode_tokens, model_name(multivector), texts, o, batch, on_ray)
        store = old_store(old) or o.multivector_store
        files[MULTIVECTOR] = MultiVectorIndex.build(tokens, [str(i) for i in ids], multivector, store,
                                                    centroids=o.multivector_centroids).writer()
    return files


def _encode(encode: Callable, name: str, texts: Sequence[str], o: Any, batch: int, on_ray: Callable | None
            ) -> list:
    """The documents' side of a learned role's model: here, or (`on_ray`) on Ray's actor pool in the dense
    build's chunks; same results, same order."""
    if on_ray is None:
        return encode(name, list(texts), query=False, batch_size=batch)
    return on_ray(encode, name, list(texts), o)


def old_store(old: Any) -> str | None:
    """How an existing multi-vector role stores its tokens (kept when the rows change)."""
    if old is None or MULTIVECTOR not in old.manifest.get("roles", {}):
        return None
    return MultiVectorIndex.load(old.file(MULTIVECTOR)).meta.get("store")


def kept_learned_files(old: Any, kept_rows: Sequence[dict], o: Any) -> dict[str, FileWriter]:
    """`old`'s learned roles over the rows a commit keeps of it (`kept_rows`, its items rows in order: a
    compaction, an update or sync that only drops rows), rebuilt with their own models (`o`: the build options,
    for the batch size); none where it has none."""
    if not any(role in old.manifest.get("roles", {}) for role in LEARNED_ROLES):
        return {}
    from engine.core.storage.store.stored import IMAGE_FILES
    ids = [r["id"] for r in kept_rows]
    if old.kind == "image":
        files = old.document(IMAGE_FILES)
        documents = [files[i] for i in ids]
    else:
        documents = stored_texts(kept_rows, old.manifest.get("text_fields"))
    return learned_files(old, o, ids, documents, old.kind)
