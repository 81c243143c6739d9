"""The core's commands (build, search, info, list, bench, demo, models) and the options every command shares.
Parsing only: defaults come from the dataclasses and constants the work reads, the work lives elsewhere."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.core.storage.builder.options import BATCH_PIXELS, BuildOptions
from engine.core.collection import DEFAULT_ROOT
from engine.core.encoders.registry import model_help
from engine.commands.flags import (Device, RerankBatchTokens, RerankDtype, RerankInstruction, RerankRounds,
                                   RerankTemplate)
from engine.core.ranking.rerankers.registry import reranker_help
from engine.errors import EngineError, opt
from engine.core.ranking.rerankers.prompts import BATCH_TOKENS, ROUNDS
from engine.core.ranking.rerankers.registry import RERANK_DEPTH
from engine.core.storage.index.multivector import CENTROIDS
from engine.io.options import (BATCH, BATCH_SIZE, COUNT, K, SHARE, THREADS, WAIT, WORKERS, Float, Int, cli,
                               options_command, split_list)
from engine.io.jsonio import print_json
from engine.progress import set_quiet
from engine.core.remote import API_KEY_ENV

Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or status lines (for scripts).")]
Root = Annotated[Path, typer.Option("--root", envvar="ENGINE_ROOT", help="Folder that holds collections.")]
ModelSpec = Annotated[Optional[str], typer.Option("--model", "-m", help=model_help(), show_default=False)]
Dtype = Annotated[str, typer.Option("--dtype", help="Precision encoders compute in (autocast): auto (fp16 on "
                                    "CUDA, else float32), float32, float16 (CUDA), bfloat16 (CUDA or the CPU).")]
BatchSize = Annotated[str, typer.Option("--batch-size", help="Items per forward pass, or auto (by device: 32 on "
                                        "the CPU, 256 images / 512 texts on a GPU).")]
NProbe = Annotated[Optional[int], typer.Option("--nprobe", help="IVF lists visited per query (overrides the "
                                               "stored operating point).", show_default=False)]
Ef = Annotated[Optional[int], typer.Option("--ef", help="HNSW efSearch (overrides the stored operating point).",
                                           show_default=False)]
KFactor = Annotated[Optional[float], typer.Option("--k-factor", help="Candidates per result a refine stage "
                                                  "(…,RFlat) re-ranks exactly (overrides the stored value).",
                                                  show_default=False)]
BUILD = BuildOptions()
RayAddress = Annotated[Optional[str], typer.Option("--ray", metavar="[ADDRESS]", help="Run on Ray: a bare --ray "
                       "starts a local Ray for the run; auto or ray://HOST:PORT joins a running cluster "
                       "(needs the `ray` extra).", show_default=False)]
@dataclass(frozen=True)
class BuildCommandOptions:
    """What `engine build` is told, each option declared once (engine.io.options.options_command)."""
    name: Annotated[str, cli(typer.Argument(help="Collection name: a folder under --root."))]
    images: Annotated[Optional[Path], cli(typer.Option("--images", help="Image folder (recursive; id = path without "
                      "extension) or a CSV/JSONL with id and path columns."))] = None
    texts: Annotated[Optional[Path], cli(typer.Option("--texts", help="CSV/JSONL/TSV with an id column and text "
                     "fields."))] = None
    model: Annotated[Optional[str], cli(ModelSpec)] = BUILD.model
    dim: Annotated[Optional[int], cli(typer.Option("--dim", help="Keep the first D dimensions of a Matryoshka "
                   "model's embeddings, renormalized (only for a model whose card says it was trained for it; "
                   "1-65536).")), Int(1, 65_536)] = BUILD.dim
    index: Annotated[str, cli(typer.Option("--index", help="FAISS factory string: Flat (exact, default), HNSW32, "
                     "IVF1024,Flat, IVF1024,PQ32, … (trained on the collection), or auto: the fastest index "
                     "reaching --recall within --memory-budget, measured on queries of the kind users send "
                     "(the table and the operating point are printed and stored)."))] = BUILD.index
    store: Annotated[str, cli(typer.Option("--store", help="Vectors of exact search: float32, float16 (half the "
                     "memory and scan time, recall@10 ≈ 0.998) or sq8 (a quarter, ≈ 0.98)."))] = BUILD.store
    memory_budget: Annotated[Optional[str], cli(typer.Option("--memory-budget", help="With --index auto: most memory "
                             "the index may take (4G, 512M, …)."))] = BUILD.memory_budget
    recall: Annotated[float, cli(typer.Option("--recall", help="With --index auto: recall@10 the operating point "
                      "must reach.")), Float(0, 1, open_lo=True)] = BUILD.recall
    add: Annotated[bool, cli(typer.Option("--add", help="Append new items to an existing collection; old ones "
                   "are not re-encoded."))] = BUILD.add
    force: Annotated[bool, cli(typer.Option("--force", help="Rebuild a collection that already exists."))] = BUILD.force
    update: Annotated[bool, cli(typer.Option("--update", help="With --add: items whose id is already there are "
                      "re-encoded and replace the old ones."))] = BUILD.update
    sync: Annotated[bool, cli(typer.Option("--sync", help="Re-sync an --images folder: add new files, drop vanished "
                    "ones, re-encode changed ones (size and mtime)."))] = BUILD.sync
    bm25: Annotated[bool, cli(typer.Option("--bm25", help="Also store a BM25 index of the texts (search --mode "
                    "bm25|hybrid); --add and --update keep it in step."))] = BUILD.bm25
    sparse: Annotated[Optional[str], cli(typer.Option("--sparse", metavar="sparse:NAME_OR_DIR", help="Also store "
                      "an inverted index of a learned sparse model's (SPLADE, a SparseEncoder) weights of the texts: "
                      "the pipeline stage sparse(NAME) ranks by it; --add and --update keep it in step."))] \
        = BUILD.sparse
    multivector: Annotated[Optional[str], cli(typer.Option("--multivector", metavar="multivector:NAME_OR_DIR",
                           help="Also store a late-interaction model's (ColBERT, a MultiVectorEncoder) token vectors "
                           "of the texts — or, with --images and a page retriever (ColPali, ColQwen2), of the "
                           "images — and their fixed-dimensional encodings: the pipeline stage "
                           "multivector(NAME) ranks by exact MaxSim over their candidates."))] = BUILD.multivector
    multivector_store: Annotated[str, cli(typer.Option("--multivector-store", help="How --multivector keeps token "
                                 "vectors: float16, or int8 with one scale a vector (half the disk)."))] \
        = BUILD.multivector_store
    multivector_centroids: Annotated[int, cli(typer.Option("--multivector-centroids", help="Centroids of the "
                                     "inverted file of --multivector's token vectors (spherical k-means; the "
                                     "multivector(NAME) stage probes each query token's nearest): 0 picks by their "
                                     "number, the power of two at or below 4·√tokens.")), CENTROIDS] \
        = BUILD.multivector_centroids
    bm25_analyzer: Annotated[Optional[str], cli(typer.Option("--bm25-analyzer", help="How --bm25 analyses texts: "
                             "english (stop words dropped, Snowball stemming: 'floods' finds 'flooding') or none "
                             "(lower-cased words as written). Stored in the collection; --add keeps its own. "
                             "[default: english]", show_default=False))] = BUILD.bm25_analyzer
    fields: Annotated[Optional[str], cli(typer.Option("--fields", help="Comma-separated text columns to embed "
                      "(default: text/title/description/… columns found)."))] = None
    id_column: Annotated[Optional[str], cli(typer.Option("--id-column", help="Id column of a table source."))] \
        = BUILD.id_column
    path_column: Annotated[Optional[str], cli(typer.Option("--path-column", help="Path column of an image table."))] \
        = BUILD.path_column
    recall_queries: Annotated[Optional[Path], cli(typer.Option("--recall-queries", help="Text queries to measure a "
                              "non-exact index's recall@10 with (default: generic captions or own vectors)."))] = None
    batch_size: Annotated[str, cli(BatchSize), BATCH_SIZE] = str(BUILD.batch_size)
    batch_pixels: Annotated[Optional[int], cli(typer.Option("--batch-pixels", help="Images: also cut each forward "
                            "pass at this many pixels (width × height as decoded; an image above it goes alone), "
                            "for models whose own processor reads images at their size (sbert: VLM embedders), whose "
                            "memory grows with the pixels (with --ray, in their encoding actors).",
                            show_default=False)), BATCH_PIXELS] \
        = BUILD.batch_pixels
    device: Annotated[str, cli(Device)] = BUILD.device
    dtype: Annotated[str, cli(Dtype)] = BUILD.dtype
    workers: Annotated[int, cli(typer.Option("--workers", help="Image-decoding threads running ahead of the model.")),
                       WORKERS] \
        = BUILD.workers
    threads: Annotated[int, cli(typer.Option("--threads", help="Encoding threads (0: the default: torch's, or on "
                                             "the CPU one onnxruntime slice per core).")), THREADS] = BUILD.threads
    chunk_size: Annotated[int, cli(typer.Option("--chunk-size", help="Items per flushed chunk (the resume unit).")),
                          Int(1, 10_000_000)] \
        = BUILD.chunk_size
    id_policy: Annotated[str, cli(typer.Option("--id-policy", help="Ids a TREC run cannot hold (empty, white space): "
                         "strict refuses them, replace turns white space into '_'."))] = BUILD.id_policy
    wait: Annotated[float, cli(typer.Option("--wait", help="Seconds to wait while another process writes the "
                    "collection (0: fail at once, naming it).")), WAIT] = BUILD.wait
    ray: Annotated[Optional[str], cli(RayAddress)] = BUILD.ray
    shards: Annotated[int, cli(typer.Option("--shards", help="Split the index into N shards searched side by side "
                      "(results equal one index's, except HNSW); filled in parallel with --ray.")),
                      Int(1, 1024)] = BUILD.shards
    vectors: Annotated[Optional[Path], cli(typer.Option("--vectors", help="Embeddings computed elsewhere: one .npy "
                       "(float32/float16) or a folder of .npy shards in name order (clip-retrieval's layout), "
                       "read block by block."))] = None
    ids: Annotated[Optional[Path], cli(typer.Option("--ids", help="With --vectors: one id per line, in row order "
                   "(default: row numbers 0..N-1)."))] = None
    meta: Annotated[Optional[Path], cli(typer.Option("--meta", help="With --vectors: item metadata, one row per vector "
                    "(JSONL or parquet, or a folder of them in name order)."))] = None
    encoder: Annotated[Optional[str], cli(typer.Option("--encoder", help="With --vectors: the model spec that made "
                       "them, so text/image queries work (default: vectors-only search)."))] = None
    query_prompt: Annotated[Optional[str], cli(typer.Option("--query-prompt", help="Prompt put before every text "
                            "query (stored; search and serve apply it). Default: the model's own, or its family's "
                            "preset (e5 'query: ', bge, nomic, Qwen3-Embedding …); '' for none.",
                            show_default=False))] = None
    doc_prompt: Annotated[Optional[str], cli(typer.Option("--doc-prompt", help="Prompt put before every embedded "
                          "document text (e5: 'passage: '); '' for none.", show_default=False))] = None
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False


def _build(o: BuildCommandOptions) -> None:
    """Embed images or texts into a collection with a FAISS index, or index vectors computed elsewhere
    (--vectors). Interrupted builds resume when run again, locally or with --ray (encoding in a Ray actor pool;
    IVF lists merged on disk)."""
    set_quiet(o.quiet)
    from engine.core.collection import Collection
    if o.vectors is not None:
        from engine.core.storage.builder.vector_files import check_vector_flags
        check_vector_flags(images=o.images, texts=o.texts, model=o.model, add=o.add, fields=o.fields,
                           id_column=o.id_column, path_column=o.path_column, recall_queries=o.recall_queries)
        Collection.from_vector_files(o.name, o.vectors, ids=o.ids, meta=o.meta, encoder_spec=o.encoder, root=o.root,
                                     index=o.index, store=o.store, memory_budget=o.memory_budget, recall=o.recall,
                                     force=o.force, chunk_size=o.chunk_size, id_policy=o.id_policy, wait=o.wait,
                                     ray=o.ray, shards=o.shards)
        return
    if o.ids is not None or o.meta is not None or o.encoder is not None:
        raise EngineError(f"{opt('ids')}, {opt('meta')} and {opt('encoder')} go with {opt('vectors')} PATH")
    from dataclasses import fields
    settings = {f.name: getattr(o, f.name) for f in fields(BuildOptions)}  # the build's options, as given
    Collection.build(o.name, images=o.images, texts=o.texts, root=o.root, query_prompt=o.query_prompt,
                     doc_prompt=o.doc_prompt, **{**settings, "fields": split_list(o.fields)})


build_cmd = options_command(BuildCommandOptions, _build)


@dataclass(frozen=True)
class SearchOptions:
    """What `engine search` is told, each option declared once: its field's metadata is the command line's
    declaration (type, flags, help) and its range (an `engine.io.options.Range`, checked once, at the edge,
    before anything loads), its default the command's default."""
    name: Annotated[str, cli(typer.Argument(help="Collection name."))]
    text: Annotated[Optional[str], cli(typer.Argument(help="Text query."))] = None
    image: Annotated[Optional[Path], cli(typer.Option("--image", help="Image file as the query."))] = None
    k: Annotated[int, cli(typer.Option("-k", "--top-k", help="Results per query.")), K] = 10
    as_json: Annotated[bool, cli(typer.Option("--json", help="Print JSON instead of a table."))] = False
    queries: Annotated[Optional[Path], cli(typer.Option("--queries", help="File of queries (TSV qid<TAB>text, CSV "
                       "or JSONL with id and text columns); needs --out."))] = None
    out: Annotated[Optional[Path], cli(typer.Option("--out", help="TREC run to write for --queries."))] = None
    run_id: Annotated[Optional[str], cli(typer.Option("--run-id", help="Run id column (default: what made the "
                      "run, collection-mode[-reranker])."))] = None
    batch_size: Annotated[str, cli(BatchSize), BATCH_SIZE] = "64"
    device: Annotated[str, cli(Device)] = "auto"
    nprobe: Annotated[Optional[int], cli(NProbe), Int(1, 1_000_000)] = None
    ef: Annotated[Optional[int], cli(Ef), Int(1, 1_000_000)] = None
    k_factor: Annotated[Optional[float], cli(KFactor), Float(1, 10_000)] = None
    server: Annotated[Optional[str], cli(typer.Option("--server", help="URL of a running `engine serve` to ask "
                      "instead of loading the collection here (same output)."))] = None
    rerank: Annotated[Optional[str], cli(typer.Option("--rerank", help=reranker_help() + " Reorders the first "
                      "stage's top --rerank-depth hits of a text query (docs/rerank.md).", show_default=False))] = None
    rerank_depth: Annotated[Optional[int], cli(typer.Option("--rerank-depth", help="Hits the first stage fetches "
                            "for the reranker (at least -k; default 100).", show_default=False)), RERANK_DEPTH] = None
    rerank_template: Annotated[Optional[str], cli(RerankTemplate)] = None
    rerank_instruction: Annotated[Optional[str], cli(RerankInstruction)] = None
    rerank_rounds: Annotated[Optional[int], cli(RerankRounds), ROUNDS] = None
    rerank_batch_tokens: Annotated[Optional[int], cli(RerankBatchTokens), BATCH_TOKENS] = None
    rerank_dtype: Annotated[Optional[str], cli(RerankDtype)] = None
    api_key: Annotated[Optional[str], cli(typer.Option("--api-key", envvar=API_KEY_ENV, show_envvar=True,
                       help="Key for a --server that needs one."))] = None
    ray: Annotated[Optional[str], cli(typer.Option("--ray", metavar="[ADDRESS]", help="Search a sharded "
                   "collection's shards in Ray actors (bare --ray: a local Ray; auto or ray://HOST:PORT: a "
                   "cluster).", show_default=False))] = None
    mode: Annotated[Optional[str], cli(typer.Option("--mode", help="dense, bm25 or hybrid (default: hybrid where "
                    "the collection has a BM25 index, dense otherwise).", show_default=False))] = None
    fusion: Annotated[str, cli(typer.Option("--fusion", help="How hybrid fuses dense and BM25: weighted (cosine + "
                      "BM25 / the query's BM25 upper bound) or rrf (reciprocal ranks)."))] = "weighted"
    where: Annotated[Optional[str], cli(typer.Option("--where", help="Metadata filter, e.g. 'split == \"a\" and "
                     "year >= 2020' (==, !=, <, <=, >, >=, in [..], and, or, not, parentheses).",
                     show_default=False))] = None
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False


def _search(options: SearchOptions) -> None:
    """Search a collection with its own encoder: one text, one --image, or a --queries file into a TREC run."""
    from engine.commands.search import search
    search(options)


search_cmd = options_command(SearchOptions, _search)


def info_cmd(name: Annotated[str, typer.Argument(help="Collection name.")],
             as_json: Annotated[bool, typer.Option("--json", help="Print JSON (with every file).")] = False,
             files: Annotated[bool, typer.Option("--files", help="List every file and its size.")] = False,
             root: Root = DEFAULT_ROOT) -> None:
    """What a collection's manifest says (files' presence and sizes checked; `engine verify` reads every byte)."""
    from engine.core.collection import Collection
    data = Collection.open(name, root).info(files=files or as_json)
    if as_json:
        print_json(data)
    else:
        from rich.console import Console
        from engine.display import mapping_table
        Console().print(mapping_table(data, title=f"collection {name}"))


def verify_cmd(name: Annotated[str, typer.Argument(help="Collection name.")], root: Root = DEFAULT_ROOT,
               quiet: Quiet = False) -> None:
    """Read every byte of a collection against the checksums in its manifest (opening only checks sizes)."""
    set_quiet(quiet)
    from engine.core.collection import Collection
    from engine.progress import info
    col = Collection.open(name, root)
    col.verify()
    info(f"collection {name!r}: {len(col.manifest.get('files', {}))} files, every byte matches its checksum")


def delete_cmd(name: Annotated[str, typer.Argument(help="Collection name.")],
               ids: Annotated[Path, typer.Option("--ids", help="Ids to remove: one per line, or a CSV/JSONL with an "
                              "id column.")],
               wait: Annotated[float, typer.Option("--wait", help="Seconds to wait while another process writes "
                               "the collection (0: fail at once, naming it)."), WAIT] = BUILD.wait,
               compact_at: Annotated[float, typer.Option("--compact-at", help="Fraction of deleted rows (0–1) past "
                                     "which the delete rewrites the collection without them; below it, rows are "
                                     "marked deleted (every search skips them) and `engine compact` rewrites "
                                     "later."), SHARE] = 0.25,
               root: Root = DEFAULT_ROOT, quiet: Quiet = False) -> None:
    """Remove items from a collection as a new generation: their rows are marked deleted (every search skips
    them; a cost in proportion to what is deleted), or, past --compact-at, the rest rewritten without them."""
    set_quiet(quiet)
    from engine.core.storage.builder.update import delete_ids
    from engine.io.ids import read_id_list
    if wait < 0:
        raise EngineError(f"{opt('wait')} must be at least 0, not {wait}")
    delete_ids(name, list(read_id_list(ids, whole_id=True)), root=root, wait=wait, compact_at=compact_at)


def compact_cmd(name: Annotated[str, typer.Argument(help="Collection name.")],
                wait: Annotated[float, typer.Option("--wait", help="Seconds to wait while another process writes "
                                "the collection (0: fail at once, naming it)."), WAIT] = BUILD.wait,
                root: Root = DEFAULT_ROOT, quiet: Quiet = False) -> None:
    """Rewrite a collection without the rows deletes marked (index, vectors, items, BM25 kept aligned)."""
    set_quiet(quiet)
    from engine.core.storage.builder.update import compact
    compact(name, root=root, wait=wait)


def list_cmd(root: Root = DEFAULT_ROOT,
             names_only: Annotated[bool, typer.Option("--names", help="Names only, one per line.")] = False) -> None:
    """Collections under --root: name, kind, items, encoder and size on disk (--names: names only)."""
    from engine.core.collection import list_collections
    names = list_collections(root)
    if names_only:
        for name in names:
            typer.echo(name)
        return
    if not names:
        from engine.progress import info
        info(f"no collections in {root}/ (build one with `engine build NAME --texts FILE`)")
        return
    from engine.core.storage.store.stored import summaries
    from engine.display import format_table
    typer.echo(format_table(["name", "kind", "items", "size", "encoder"], summaries(root, names), left=2))


@dataclass(frozen=True)
class BenchOptions:
    """What `engine bench` is told, each option declared once (engine.io.options.options_command)."""
    name: Annotated[str, cli(typer.Argument(help="Collection name."))]
    queries: Annotated[Optional[Path], cli(typer.Option("--queries", help="Text queries to time (default: generic "
                       "captions for image–text collections, sampled items otherwise)."))] = None
    n: Annotated[int, cli(typer.Option("--n", help="Queries to time.")), COUNT] = 200
    seconds: Annotated[float, cli(typer.Option("--seconds", help="Time each measurement takes at most (about): "
                       "it stops after --n calls or this many seconds of them, whichever comes first.")),
                       Float(0, 86_400, open_lo=True)] = 3.0
    batch: Annotated[int, cli(typer.Option("--batch", help="Batch size of the batched runs.")), BATCH] = 64
    k: Annotated[int, cli(typer.Option("-k", help="Results per query.")), K] = 10
    out: Annotated[Optional[Path], cli(typer.Option("--out", help="JSON result (default: <collection>/bench.json)."))] \
        = None
    threads: Annotated[int, cli(typer.Option("--threads", help="torch/FAISS threads (0: default).")), THREADS] = 0
    rerank: Annotated[Optional[str], cli(typer.Option("--rerank", help="Also time this reranker (e.g. "
                      "maxsim:DIR) reordering each text query's dense top --rerank-depth, one query at a time.",
                      show_default=False))] = None
    rerank_depth: Annotated[int, cli(typer.Option("--rerank-depth", help="Hits the timed reranker reads per query.")),
                            RERANK_DEPTH] = 20
    device: Annotated[str, cli(Device)] = "auto"
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False


def _bench(o: BenchOptions) -> None:
    """Query-encoding and search latency (p50/p95/p99, QPS), single and batched; index memory; the model
    families the collection carries (an image–text encoder's images, sparse and multi-vector indexes) and
    --rerank's reranker."""
    set_quiet(o.quiet)
    from engine.core.ranking.rerankers.spec import RerankerSpec
    rerank = RerankerSpec.parse(o.rerank) if o.rerank is not None else None  # parsed once, before anything loads
    from engine.core.encoders.device import set_device
    set_device(o.device)
    from rich.console import Console
    from engine.core.bench import bench_collection
    from engine.core.collection import Collection
    from engine.core.encoders.base import configure_threads
    from engine.display import bench_table
    from engine.io.atomic import write_json
    from engine.io.tables import read_queries
    configure_threads(o.threads)
    col = Collection.open(o.name, o.root)
    result = bench_collection(col, [t for _, t in read_queries(o.queries)] if o.queries else None, n=o.n,
                              batch=o.batch, k=o.k, seconds=o.seconds, rerank=rerank, rerank_depth=o.rerank_depth)
    Console().print(bench_table(result))
    target = o.out or col.path / "bench.json"
    write_json(target, result)
    typer.echo(f"wrote {target}", err=True)


bench_cmd = options_command(BenchOptions, _bench)


def demo_cmd(root: Root = DEFAULT_ROOT, device: Device = "auto", quiet: Quiet = False) -> None:
    """Build a collection from photos bundled with scikit-image and search it by text, offline."""
    set_quiet(quiet)
    from engine.core.encoders.device import set_device
    set_device(device)
    from rich.console import Console
    from engine.core.demo import DEMO_QUERIES, build_demo
    from engine.display import hits_table
    col = build_demo(root=root, device=device)
    console = Console()
    for q in DEMO_QUERIES:
        console.print(hits_table(col.search(text=q, k=3), title=f"demo: {q!r}"))


def models_cmd(markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table.")] = False,
               prepare: Annotated[Optional[str], typer.Option("--prepare", metavar="SPEC", help="Export SPEC's "
                                  "torch-free query models (ONNX) now, as a build does, instead of listing "
                                  "the specs.")] = None) -> None:
    """The encoder specs `--model` takes (the registry in engine/core/encoders/registry.py)."""
    if prepare is not None:
        from engine.core.encoders.registry import entry_for, prepare_queries
        entry_for(prepare)  # an unknown spec is refused before any model loads
        typer.echo(f"{prepare}: queries run on " + ", ".join(prepare_queries(prepare)))
        return
    from engine.core.encoders.registry import model_table
    from engine.display import doc_table
    typer.echo(doc_table(*model_table(), markdown=markdown, left=3))
