"""The `engine` command: one thin typer command per job. Parsing only; the work lives in `engine`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.errors import EngineError
from engine.progress import set_quiet

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                  help="Dense multimodal retrieval for shared tasks: build FAISS collections, search, "
                       "write submission files, evaluate runs with the official metrics.")

Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or status lines (for scripts).")]
Root = Annotated[Path, typer.Option("--root", help="Folder that holds collections.")]
DEFAULT_ROOT = Path("indexes")


# ---------------------------------------------------------------- core: build / search / info / bench
def _print_json(obj: object) -> None:
    import json
    typer.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def _split(value: Optional[str]) -> Optional[list[str]]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


@app.command("build")
def build_cmd(
    name: Annotated[str, typer.Argument(help="Collection name: a folder under --root.")],
    images: Annotated[Optional[Path], typer.Option("--images", help="Image folder (recursive; id = path without "
                      "extension) or a CSV/JSONL with id and path columns.")] = None,
    texts: Annotated[Optional[Path], typer.Option("--texts", help="CSV/JSONL/TSV with an id column and text fields.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Encoder spec: conse (default for images, "
                     "offline), clip:ARCH:WEIGHTS (e.g. clip:ViT-B-32:openai or a checkpoint file), effnet "
                     "(image→image), sbert:NAME (default for texts: all-MiniLM-L6-v2).")] = None,
    index: Annotated[str, typer.Option("--index", help="FAISS factory string: Flat (exact, default), HNSW32, "
                     "IVF1024,Flat, IVF1024,PQ32, … (trained on the collection).")] = "Flat",
    add: Annotated[bool, typer.Option("--add", help="Append new items to an existing collection; old ones "
                   "are not re-encoded.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Rebuild a collection that already exists.")] = False,
    fields: Annotated[Optional[str], typer.Option("--fields", help="Comma-separated text columns to embed "
                      "(default: text/title/description/… columns found).")] = None,
    id_column: Annotated[Optional[str], typer.Option("--id-column", help="Id column of a table source.")] = None,
    path_column: Annotated[Optional[str], typer.Option("--path-column", help="Path column of an image table.")] = None,
    recall_queries: Annotated[Optional[Path], typer.Option("--recall-queries", help="Text queries to measure a "
                              "non-exact index's recall@10 with (default: generic captions or own vectors).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Items per forward pass.")] = 32,
    workers: Annotated[int, typer.Option("--workers", help="Image-decoding threads running ahead of the model.")] = 2,
    threads: Annotated[int, typer.Option("--threads", help="torch threads (0: torch's default).")] = 0,
    chunk_size: Annotated[int, typer.Option("--chunk-size", help="Items per flushed chunk (the resume unit).")] = 1024,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Embed images or texts into a collection with a FAISS index. Interrupted builds resume when run again."""
    set_quiet(quiet)
    from engine.collection import Collection
    Collection.build(name, images=images, texts=texts, root=root, model=model, index=index, batch_size=batch_size,
                     workers=workers, threads=threads, chunk_size=chunk_size, add=add, force=force,
                     fields=_split(fields), id_column=id_column, path_column=path_column,
                     recall_queries=recall_queries)


@app.command("search")
def search_cmd(
    name: Annotated[str, typer.Argument(help="Collection name.")],
    text: Annotated[Optional[str], typer.Argument(help="Text query.")] = None,
    image: Annotated[Optional[Path], typer.Option("--image", help="Image file as the query.")] = None,
    k: Annotated[int, typer.Option("-k", "--top-k", help="Results per query.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    queries: Annotated[Optional[Path], typer.Option("--queries", help="File of queries (TSV qid<TAB>text, CSV or "
                       "JSONL with id and text columns); needs --out.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="TREC run to write for --queries.")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run-id", help="Run id column (default: collection name).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Queries encoded per batch.")] = 64,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Search a collection with its own encoder: one text, one --image, or a --queries file into a TREC run."""
    set_quiet(quiet)
    from engine.collection import Collection
    from engine.display import hits_table
    from engine.progress import info
    if queries is not None:
        if out is None or text is not None or image is not None:
            raise EngineError("--queries takes --out RUN and no text or --image query")
        from engine.io.tables import read_queries
        qs = read_queries(queries)
        n = Collection.open(name, root).search_to_run(qs, out, k=k, run_id=run_id, batch_size=batch_size)
        info(f"wrote {n} lines for {len(qs)} queries to {out}")
        return
    if out is not None:
        raise EngineError("--out goes with --queries FILE")
    if (text is None) == (image is None):
        raise EngineError("give a text query or --image PATH (or --queries FILE --out RUN)")
    hits = Collection.open(name, root).search(text=text, image=str(image) if image else None, k=k)
    if as_json:
        _print_json({"query": text if text is not None else str(image), "hits": [h.as_dict() for h in hits]})
    else:
        from rich.console import Console
        Console().print(hits_table(hits, title=f"{name}: {text if text is not None else image}"))


@app.command("info")
def info_cmd(name: Annotated[str, typer.Argument(help="Collection name.")],
             as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
             root: Root = DEFAULT_ROOT) -> None:
    """What a collection's manifest says (checksums verified)."""
    from engine.collection import Collection
    data = Collection.open(name, root).info()
    if as_json:
        _print_json(data)
    else:
        from rich.console import Console
        from engine.display import mapping_table
        Console().print(mapping_table(data, title=f"collection {name}"))


@app.command("list")
def list_cmd(root: Root = DEFAULT_ROOT) -> None:
    """Collections under --root."""
    from engine.collection import list_collections
    for name in list_collections(root):
        typer.echo(name)


@app.command("bench")
def bench_cmd(
    name: Annotated[str, typer.Argument(help="Collection name.")],
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Text queries to time (default: generic "
                       "captions for image–text collections, sampled items otherwise).")] = None,
    n: Annotated[int, typer.Option("--n", help="Queries to time.")] = 200,
    batch: Annotated[int, typer.Option("--batch", help="Batch size of the batched runs.")] = 64,
    k: Annotated[int, typer.Option("-k", help="Results per query.")] = 10,
    out: Annotated[Optional[Path], typer.Option("--out", help="JSON result (default: <collection>/bench.json).")] = None,
    threads: Annotated[int, typer.Option("--threads", help="torch/FAISS threads (0: default).")] = 0,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Query-encoding and search latency (p50/p95/p99, QPS), single and batched; index memory."""
    set_quiet(quiet)
    from rich.console import Console
    from engine.bench import bench_collection
    from engine.collection import Collection
    from engine.display import bench_table
    from engine.encoders import configure_threads
    from engine.io.atomic import write_json
    from engine.io.tables import read_queries
    configure_threads(threads)
    col = Collection.open(name, root)
    result = bench_collection(col, [t for _, t in read_queries(queries)] if queries else None, n=n, batch=batch, k=k)
    Console().print(bench_table(result))
    target = out or col.path / "bench.json"
    write_json(target, result)
    typer.echo(f"wrote {target}", err=True)


@app.command("demo")
def demo_cmd(root: Root = DEFAULT_ROOT, quiet: Quiet = False) -> None:
    """Build a collection from photos bundled with scikit-image and search it by text, offline."""
    set_quiet(quiet)
    from rich.console import Console
    from engine.demo import DEMO_QUERIES, build_demo
    from engine.display import hits_table
    col = build_demo(root=root)
    console = Console()
    for q in DEMO_QUERIES:
        console.print(hits_table(col.search(text=q, k=3), title=f"demo: {q!r}"))



# ---------------------------------------------------------------- evaluation, validation, conversion

validate_app = typer.Typer(no_args_is_help=True, help="Check a run or a submission before uploading it: "
                                                      "every problem with its line number.")
convert_app = typer.Typer(no_args_is_help=True, help="Benchmark files to TREC qrels/runs/groups, "
                                                     "or a run to an EVENTA submission.")
app.add_typer(validate_app, name="validate")
app.add_typer(convert_app, name="convert")

QueriesOpt = Annotated[Optional[Path], typer.Option("--queries", help="Query ids to expect (query file or id list).")]
DocsOpt = Annotated[Optional[Path], typer.Option("--docs", help="Allowed doc/image ids (one per line, or a table "
                                                                "with an id column).")]


@app.command("eval")
def eval_cmd(
    run: Annotated[Path, typer.Argument(help="TREC run `qid Q0 docid rank score runid` (or an EVENTA submission "
                                             ".csv/.zip).")],
    qrels: Annotated[Path, typer.Argument(help="TREC qrels `qid 0 docid rel`.")],
    metrics: Annotated[Optional[str], typer.Option("--metrics", "-m", help="Comma-separated: ndcg@k, ndcg_exp@k, "
                       "map, map@k, mrr, mrr@k, recall@k, p@k, eventa. [default: ndcg@10,map,mrr,recall@10,p@10]",
                       show_default=False)] = None,
    per_query: Annotated[bool, typer.Option("--per-query", help="Also each query's values.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout instead of a table.")] = False,
    groups: Annotated[Optional[Path], typer.Option("--groups", help="`qid<TAB>group` file: adds a mean per group.")]
    = None,
) -> None:
    """Score a run with trec_eval's semantics (qrels queries missing from the run score 0)."""
    import json

    from engine.evaluate import DEFAULT_METRICS, evaluate_files, format_table, to_json
    ev = evaluate_files(run, qrels, metrics or DEFAULT_METRICS, groups)
    typer.echo(json.dumps(to_json(ev, per_query)) if as_json else format_table(ev, per_query))


@validate_app.command("run")
def validate_run_cmd(file: Annotated[Path, typer.Argument(help="TREC run file.")],
                     queries: QueriesOpt = None, docs: DocsOpt = None) -> None:
    """Check a TREC run; exit 1 if anything is wrong."""
    from engine.validate import validate_run
    report = validate_run(file, queries, docs)
    typer.echo(report.text())
    raise typer.Exit(report.exit_code)


@validate_app.command("eventa")
def validate_eventa_cmd(file: Annotated[Path, typer.Argument(help="EVENTA submission.csv or submission.zip.")],
                        queries: QueriesOpt = None, docs: DocsOpt = None) -> None:
    """Check an EVENTA Track 2 submission; exit 1 if anything is wrong."""
    from engine.validate import validate_eventa
    report = validate_eventa(file, queries, docs)
    typer.echo(report.text())
    raise typer.Exit(report.exit_code)


@convert_app.command("dsebench-qrels")
def convert_dsebench_qrels_cmd(judgments: Annotated[Path, typer.Argument(help="human_annotated_judgments.json")],
                               out: Annotated[Path, typer.Argument(help="TREC qrels to write.")]) -> None:
    """DSEBench judgments → TREC qrels (gain = query_rel × target_sim)."""
    from engine.convert import dsebench_qrels
    from engine.progress import info
    info(f"wrote {dsebench_qrels(judgments, out)} qrels lines to {out}")


@convert_app.command("dsebench-run")
def convert_dsebench_run_cmd(run_json: Annotated[Path, typer.Argument(help="{case_id: {dataset_id: score}} JSON.")],
                             out: Annotated[Path, typer.Argument(help="TREC run to write.")],
                             run_id: Annotated[Optional[str], typer.Option("--run-id", help="[default: file stem]",
                                                                           show_default=False)] = None) -> None:
    """DSEBench baseline run JSON → TREC run (same ranking as trec_eval reads the JSON)."""
    from engine.convert import dsebench_run
    from engine.progress import info
    info(f"wrote {dsebench_run(run_json, out, run_id)} run lines to {out}")


@convert_app.command("ntcir-a-qrels")
def convert_ntcir_a_qrels_cmd(ground_truth: Annotated[Path, typer.Argument(help="ground-truth.csv")],
                              out: Annotated[Path, typer.Argument(help="TREC qrels to write.")]) -> None:
    """NTCIR-19 ModelRetrieval A ground truth → TREC qrels (relevance_score grade)."""
    from engine.convert import ntcir_a_qrels
    from engine.progress import info
    info(f"wrote {ntcir_a_qrels(ground_truth, out)} qrels lines to {out}")


@convert_app.command("ntcir-a-groups")
def convert_ntcir_a_groups_cmd(tasks: Annotated[Path, typer.Argument(help="tasks.csv")],
                               out: Annotated[Path, typer.Argument(help="`qid<TAB>group` file to write.")]) -> None:
    """NTCIR-19 ModelRetrieval A task criticality → groups for `engine eval --groups`."""
    from engine.convert import ntcir_a_groups
    from engine.progress import info
    info(f"wrote {ntcir_a_groups(tasks, out)} task groups to {out}")


@convert_app.command("eventa-submission")
def convert_eventa_submission_cmd(run: Annotated[Path, typer.Argument(help="TREC run.")],
                                  out_dir: Annotated[Path, typer.Argument(help="Folder for submission.csv/.zip.")],
                                  queries: QueriesOpt = None) -> None:
    """TREC run → EVENTA submission.csv + submission.zip (top 10, `#` for empty slots)."""
    from engine.convert import run_to_eventa
    from engine.progress import info
    csv_path, zip_path = run_to_eventa(run, out_dir, queries)
    info(f"wrote {csv_path} and {zip_path}")


# ---------------------------------------------------------------- lora: NTCIR-19 ModelRetrieval B (style image → LoRA)

lora_app = typer.Typer(no_args_is_help=True, help="Style image → LoRA (NTCIR-19 ModelRetrieval B): build "
                                                  "prototypes, submit a run, cross-validate by content image.")
app.add_typer(lora_app, name="lora")

LoraTrain = Annotated[Path, typer.Option("--train", help="train.csv: image_id, model_id (the LoRA), content_image_id.")]
LoraImages = Annotated[Path, typer.Option("--images", help="Folder holding the images named by train.csv.")]
LoraModels = Annotated[Optional[Path], typer.Option("--models", help="models.csv (id, model_name, trigger_words): "
                                                    "checks LoRA ids, feeds the text prior.")]
LoraName = Annotated[str, typer.Option("--name", help="Adapter name: a folder under --root.")]
LoraImageModel = Annotated[str, typer.Option("--image-model", help="Pooled embedding: effnet (offline) or "
                                             "clip:ARCH:WEIGHTS. Style statistics always come from EfficientNet-Lite0.")]
LoraTextModel = Annotated[str, typer.Option("--text-model", help="Image–text model for the LoRA-name prior: conse "
                                            "(offline), the same clip:ARCH:WEIGHTS, or none.")]
LoraBatch = Annotated[int, typer.Option("--batch-size", help="Images per forward pass.")]
LoraWorkers = Annotated[int, typer.Option("--workers", help="Image-decoding threads.")]


@lora_app.command("build")
def lora_build_cmd(
    train: LoraTrain,
    images: LoraImages,
    models: LoraModels = None,
    name: LoraName = "lora",
    rep: Annotated[str, typer.Option("--rep", help="Representation: pooled, meanvar, gram, or parts joined by "
                                     "'+' (e.g. pooled+meanvar).")] = "meanvar+gram",
    scorer: Annotated[str, typer.Option("--scorer", help="proto (prototype cosine), knn (vote of nearest training "
                                        "images), probe (logistic regression) or text (zero-shot names).")] = "probe",
    content_removal: Annotated[bool, typer.Option("--content-removal/--no-content-removal", help="Subtract the mean "
                               "of the images that share a content image (test ids `test-<content>-<n>`).")] = True,
    text_weight: Annotated[float, typer.Option("--text-weight", help="Weight of the zero-shot text prior blended "
                                               "with the image scores (0: off).")] = 0.0,
    k: Annotated[int, typer.Option("-k", help="Neighbours for the knn scorer.")] = 10,
    image_model: LoraImageModel = "effnet",
    text_model: LoraTextModel = "conse",
    batch_size: LoraBatch = 32,
    workers: LoraWorkers = 2,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Embed the training images; store one prototype per LoRA, the per-image embeddings and the probe."""
    set_quiet(quiet)
    from engine.adapters.lora import LoraConfig, build_adapter
    build_adapter(train, images, models, name, root, LoraConfig(rep=rep, scorer=scorer, content_removal=content_removal,
                                                                text_weight=text_weight, k=k),
                  image_model, text_model, batch_size, workers)


@lora_app.command("submit")
def lora_submit_cmd(
    queries: Annotated[Path, typer.Option("--queries", help="Folder of query images (id = file name without "
                                          "suffix) or a list of ids/paths, one per line.")],
    out: Annotated[Path, typer.Option("--out", help="TREC run to write: image_id Q0 lora_id rank score runid.")],
    images: Annotated[Optional[Path], typer.Option("--images", help="Where the ids of a list are found "
                      "(default: the list's folder and its images/).")] = None,
    name: LoraName = "lora",
    run_id: Annotated[str, typer.Option("--run-id", help="Run id column.")] = "engine-lora",
    text_weight: Annotated[Optional[float], typer.Option("--text-weight", help="Override the adapter's text-prior "
                           "weight.", show_default=False)] = None,
    batch_size: LoraBatch = 32,
    workers: LoraWorkers = 2,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Rank all LoRAs for every query image with a built adapter."""
    set_quiet(quiet)
    from engine.adapters.lora import submit_run
    submit_run(queries, out, name, root, images, run_id, text_weight, batch_size, workers)


@lora_app.command("eval")
def lora_eval_cmd(
    train: LoraTrain,
    images: LoraImages,
    models: LoraModels = None,
    folds: Annotated[int, typer.Option("--folds", help="GroupKFold folds by content image.")] = 5,
    reps: Annotated[str, typer.Option("--reps", help="Comma-separated representations to compare.")]
    = "pooled,meanvar,gram,meanvar+gram,pooled+meanvar,pooled+meanvar+gram",
    scorers: Annotated[str, typer.Option("--scorers", help="Comma-separated: proto, knn, probe.")] = "proto,knn,probe",
    text_weights: Annotated[str, typer.Option("--text-weights", help="Comma-separated text-prior weights (0: off).")]
    = "0,0.5",
    content_removal: Annotated[str, typer.Option("--content-removal", help="off, on or both.")] = "both",
    image_model: LoraImageModel = "effnet",
    text_model: LoraTextModel = "conse",
    out: Annotated[Optional[Path], typer.Option("--out", help="Also write the table as JSON here.")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table.")] = False,
    batch_size: LoraBatch = 32,
    workers: LoraWorkers = 2,
    quiet: Quiet = False,
) -> None:
    """Cross-validate by content image (never random): MRR, R@1, R@5 for every configuration."""
    set_quiet(quiet)
    from engine.adapters.lora import cv_table_command
    typer.echo(cv_table_command(train, images, models, folds, _split(reps) or [], _split(scorers) or [],
                                content_removal, _split(text_weights) or ["0"],
                                image_model, text_model, out, markdown, batch_size, workers))


# ---------------------------------------------------------------- dse: DSEBench, dataset search with examples

dse_app = typer.Typer(no_args_is_help=True, help="Dataset search with examples (DSEBench): a keyword query plus "
                                                 "example datasets → ranked datasets. build, submit, eval.")
app.add_typer(dse_app, name="dse")

DseName = Annotated[str, typer.Option("--name", help="Index name: a folder under --root.")]
DseQueries = Annotated[Path, typer.Option("--queries", help="DSEBench queries.tsv: query_id<TAB>text, no header.")]
DseCases = Annotated[Path, typer.Option("--cases", help="DSEBench cases.tsv: case_id<TAB>query_id<TAB>example_dataset_id, "
                                        "no header; repeat a case_id for several examples.")]
DseFolds = Annotated[Optional[Path], typer.Option("--folds", help="DSEBench Data/Splits/5-Fold_split: fold_k/"
                                                  "{train,valid,test}.json; weights are tuned per fold on train.")]
DseDepth = Annotated[int, typer.Option("--depth", help="Datasets per case in the ranking.")]


@dse_app.command("build")
def dse_build_cmd(
    datasets: Annotated[Path, typer.Option("--datasets", help="DSEBench datasets.json: a JSON list of "
                                           "{id, title, description, tags, author, summary}.")],
    name: DseName = "dsebench",
    model: Annotated[Optional[str], typer.Option("--model", help="Sentence model spec (default: "
                     "sbert:all-MiniLM-L6-v2, offline).", show_default=False)] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Texts per encoder batch.")] = 64,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Embed each field and the whole record of every dataset, and build a BM25 index over all fields."""
    set_quiet(quiet)
    from engine.adapters.dse import build_dse
    build_dse(datasets, name, root, model, batch_size)


@dse_app.command("submit")
def dse_submit_cmd(
    queries: DseQueries,
    cases: DseCases,
    out: Annotated[Path, typer.Option("--out", help="TREC run to write: case_id Q0 dataset_id rank score runid.")],
    split: Annotated[str, typer.Option("--split", help="Cases to rank: test (DSEBench's numbered test cases), "
                                       "train, all, or a split file (JSON judgments or one case id a line).")] = "test",
    method: Annotated[str, typer.Option("--method", help="rrf (untuned fusion of query and examples), tuned "
                                        "(weighted fusion; needs --folds or --weights), query, examples.")] = "rrf",
    folds: DseFolds = None,
    weights: Annotated[Optional[Path], typer.Option("--weights", help="Fusion weights JSON {feature: weight} "
                       "(or a file written by --save-weights) for --method tuned.")] = None,
    save_weights: Annotated[Optional[Path], typer.Option("--save-weights", help="With --folds: write the tuned "
                            "weights of every fold here (JSON).")] = None,
    name: DseName = "dsebench",
    depth: DseDepth = 100,
    run_id: Annotated[Optional[str], typer.Option("--run-id", help="Run id column (default dse-METHOD).",
                      show_default=False)] = None,
    datasets: Annotated[Optional[Path], typer.Option("--datasets", help="DSEBench datasets.json: build the index "
                        "first unless --name already indexes this file (one command from data to run).")] = None,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Rank the catalogue for every case; a case's example datasets are never returned for it."""
    set_quiet(quiet)
    from engine.adapters.dse import submit_dse
    submit_dse(queries, cases, out, name, root, split, method, folds, weights, save_weights, depth, run_id, datasets)


@dse_app.command("eval")
def dse_eval_cmd(
    judgments: Annotated[Path, typer.Option("--judgments", help="DSEBench human_annotated_judgments.json; gain = "
                                            "query_rel × target_sim.")],
    folds: DseFolds = None,
    run: Annotated[Optional[Path], typer.Option("--run", help="Score this run file; without it, score the variants "
                   "(query only, examples only, fused RRF, fused tuned with --folds) of the built index.")] = None,
    queries: Annotated[Optional[Path], typer.Option("--queries", help="queries.tsv (needed without --run).")] = None,
    cases: Annotated[Optional[Path], typer.Option("--cases", help="cases.tsv (needed without --run).")] = None,
    name: DseName = "dsebench",
    depth: DseDepth = 100,
    out: Annotated[Optional[Path], typer.Option("--out", help="Also write the table as JSON here.")] = None,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """nDCG@5/10, MAP@5/10, R@5/10 with the DSEBench gain, computed by `engine eval`'s metrics."""
    set_quiet(quiet)
    from engine.adapters.dse import eval_command
    typer.echo(eval_command(judgments, folds, run, name, root, queries, cases, depth, out))


# ---------------------------------------------------------------- eventa: EVENTA 2025 Track 2 (caption → news image)

eventa_app = typer.Typer(no_args_is_help=True, help="EVENTA 2025 Track 2: caption → news image through an article "
                                                    "stage (dense + BM25 articles, their images scored, global "
                                                    "text→image fill). build, submit, eval.")
app.add_typer(eventa_app, name="eventa")

EventaName = Annotated[str, typer.Option("--name", help="Index name: a folder under --root holding images/, "
                                         "articles/, bm25/ and eventa.json.")]
EventaPooling = Annotated[str, typer.Option("--pooling", help="Long captions: mean (each sentence encoded, vectors "
                          "averaged), max (a candidate scores its best sentence) or full (the caption as one text: "
                          "the model TRUNCATES it at its window, MiniLM 256 word pieces, CLIP 77 tokens).")]
EventaArticleFusion = Annotated[str, typer.Option("--article-fusion", help="Dense + BM25 articles: rrf (reciprocal "
                                "rank fusion, untuned) or weighted (min-max normalized scores × weights).")]
EventaDenseWeight = Annotated[float, typer.Option("--dense-weight", help="Weight of the dense article ranking.")]
EventaBm25Weight = Annotated[float, typer.Option("--bm25-weight", help="Weight of the BM25 article ranking.")]
EventaTopArticles = Annotated[int, typer.Option("--top-articles", help="Articles whose images are scored.")]
EventaImageFusion = Annotated[str, typer.Option("--image-fusion", help="Image similarity + article score: "
                              "weighted (min-max) or rrf.")]
EventaArticleWeight = Annotated[float, typer.Option("--article-weight", help="Share of the article score in the "
                                "image fusion, 0..1 (0: image similarity only inside the top articles).")]
EventaDepth = Annotated[int, typer.Option("--depth", help="Articles kept per system (dense, BM25) before fusion.")]
EventaBatch = Annotated[int, typer.Option("--batch-size", help="Captions ranked per batch.")]


def _eventa_params(pooling: str, article_fusion: str, dense_weight: float, bm25_weight: float, top_articles: int,
                   image_fusion: str, article_weight: float, depth: int):
    from engine.adapters.eventa import RankParams
    return RankParams(pooling=pooling, article_fusion=article_fusion, dense_weight=dense_weight,
                      bm25_weight=bm25_weight, top_articles=top_articles, image_fusion=image_fusion,
                      article_weight=article_weight, depth=depth)


@eventa_app.command("build")
def eventa_build_cmd(
    database: Annotated[Path, typer.Option("--database", help="Articles: OpenEvents V1 database.json "
                        "({article_id: {title, content, images, date, url}}), or a JSON list/JSONL with an id field.")],
    images: Annotated[Path, typer.Option("--images", help="Image folder; file names (without extension) are image ids.")],
    name: EventaName = "eventa",
    model: Annotated[Optional[str], typer.Option("--model", help="Image–text model: conse (offline, default) or "
                     "clip:ARCH:WEIGHTS when you have CLIP weights.", show_default=False)] = None,
    text_model: Annotated[Optional[str], typer.Option("--text-model", help="Sentence model of the article passages "
                          "(default sbert:all-MiniLM-L6-v2, offline).", show_default=False)] = None,
    title_field: Annotated[str, typer.Option("--title-field", help="Article field holding the title.")] = "title",
    content_field: Annotated[str, typer.Option("--content-field", help="Article field holding the text.")] = "content",
    images_field: Annotated[str, typer.Option("--images-field", help="Article field listing its image ids.")] = "images",
    id_field: Annotated[Optional[str], typer.Option("--id-field", help="Article id field of a JSON list/JSONL "
                        "(default: article_id or id).", show_default=False)] = None,
    passage_words: Annotated[int, typer.Option("--passage-words", help="Long articles are cut into passages of whole "
                             "sentences up to this many words (title repeated in each); an article scores its best "
                             "passage.")] = 150,
    index: Annotated[str, typer.Option("--index", help="FAISS factory string for both collections.")] = "Flat",
    batch_size: Annotated[int, typer.Option("--batch-size", help="Images per forward pass.")] = 32,
    workers: Annotated[int, typer.Option("--workers", help="Image-decoding threads.")] = 2,
    force: Annotated[bool, typer.Option("--force", help="Rebuild an index that already exists.")] = False,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Build the image collection, the article-passage collection and a BM25 index over the articles."""
    set_quiet(quiet)
    from engine.adapters.eventa import Fields, build_eventa
    build_eventa(database, images, name, root, model, text_model,
                 Fields(title=title_field, content=content_field, images=images_field, id=id_field),
                 passage_words, index, batch_size, workers, force)


@eventa_app.command("submit")
def eventa_submit_cmd(
    queries: Annotated[Path, typer.Option("--queries", help="CSV query_id,query_text (the challenge's query file).")],
    out: Annotated[Path, typer.Option("--out", help="submission.zip to write; submission.csv is written beside it.")],
    name: EventaName = "eventa",
    pooling: EventaPooling = "mean",
    article_fusion: EventaArticleFusion = "rrf",
    dense_weight: EventaDenseWeight = 1.0,
    bm25_weight: EventaBm25Weight = 1.0,
    top_articles: EventaTopArticles = 10,
    image_fusion: EventaImageFusion = "weighted",
    article_weight: EventaArticleWeight = 0.8,
    depth: EventaDepth = 100,
    batch_size: EventaBatch = 64,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Rank 10 images per caption (articles first, then their images) and write the validated submission."""
    set_quiet(quiet)
    from engine.adapters.eventa import submit_eventa
    submit_eventa(queries, out, name, root, _eventa_params(pooling, article_fusion, dense_weight, bm25_weight,
                                                          top_articles, image_fusion, article_weight, depth), batch_size)


@eventa_app.command("eval")
def eventa_eval_cmd(
    queries: Annotated[Path, typer.Option("--queries", help="Labeled CSV: query_id (or image_index), caption "
                       "(query_text), retrieved_article_id, retrieved_image_id.")],
    name: EventaName = "eventa",
    pooling: Annotated[str, typer.Option("--pooling", help="Comma-separated poolings to compare: mean, max, full "
                       "(full truncates captions at the model's window).")] = "mean,max",
    article_fusion: EventaArticleFusion = "rrf",
    dense_weight: EventaDenseWeight = 1.0,
    bm25_weight: EventaBm25Weight = 1.0,
    top_articles: EventaTopArticles = 10,
    image_fusion: EventaImageFusion = "weighted",
    article_weight: EventaArticleWeight = 0.8,
    depth: EventaDepth = 100,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="Comma-separated article weights to also score the "
                     "fused stage at (rows `fused w=…`), e.g. 0,0.5,0.8,1: pick the best for submit "
                     "--article-weight.", show_default=False)] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Score only the first N labeled captions.",
                     show_default=False)] = None,
    id_column: Annotated[Optional[str], typer.Option("--id-column", help="Query id column (default: query_id, "
                         "image_index, …).", show_default=False)] = None,
    text_column: Annotated[Optional[str], typer.Option("--text-column", help="Caption column (default: query_text, "
                           "caption, …).", show_default=False)] = None,
    image_column: Annotated[Optional[str], typer.Option("--image-column", help="Correct image id column (default: "
                            "retrieved_image_id).", show_default=False)] = None,
    article_column: Annotated[Optional[str], typer.Option("--article-column", help="Correct article id column "
                              "(default: retrieved_article_id; optional).", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table.")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="Also write the table as JSON here.")] = None,
    batch_size: EventaBatch = 64,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Overall and its parts (mAP, MRR, R@1/5/10) for each stage alone and fused, plus the gold article's recall."""
    set_quiet(quiet)
    from engine.adapters.eventa import eval_command
    typer.echo(eval_command(queries, name, root, _eventa_params("mean", article_fusion, dense_weight, bm25_weight,
                                                                top_articles, image_fusion, article_weight, depth),
                            _split(pooling) or [], out, as_json, markdown, batch_size, limit, _split(sweep) or [],
                            {"id_column": id_column, "text_column": text_column, "image_column": image_column,
                             "article_column": article_column}))


@eventa_app.command("fixture")
def eventa_fixture_cmd(
    out: Annotated[Path, typer.Argument(help="Folder to write database.json, images/, queries.csv, labeled.csv.")],
    articles: Annotated[int, typer.Option("--articles", help="Articles to generate.")] = 24,
    images_per_article: Annotated[int, typer.Option("--images-per-article", help="Images per article (1–8).")] = 2,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same files).")] = 0,
) -> None:
    """Generate a small offline EVENTA database in the OpenEvents V1 layout (images cut from scikit-image photos)."""
    from engine.adapters.eventa_fixture import make_eventa_fixture
    from engine.progress import info
    paths = make_eventa_fixture(out, articles, images_per_article, seed=seed)
    info(f"wrote {paths.database}, {paths.images}/ ({paths.n_images} images + 1 broken file), {paths.queries}, "
         f"{paths.labeled}")


# ---------------------------------------------------------------- transfer: ModelRetrieval A and TREC Million LLMs (issue 5)

TransferK = Annotated[Optional[int], typer.Option("--k", help="Nearest training queries to average (default: tuned "
                                                  "by leave-one-out over 1,3,5,10,20,50).", show_default=False)]
TransferTemp = Annotated[Optional[float], typer.Option("--temperature", help="Softmax temperature over the "
                         "neighbours' cosines; small = nearest dominates (default: tuned over 0.01,0.03,0.1,1).",
                         show_default=False)]
TransferPrior = Annotated[Optional[float], typer.Option("--prior-weight", help="Weight 0..1 of the candidates' "
                          "global mean score blended in (default: tuned over 0,0.25,0.5,0.75).", show_default=False)]
TransferFolds = Annotated[int, typer.Option("--folds", help="With --cv: outer folds (0 = leave-one-out); params are "
                                            "tuned by leave-one-out inside each training fold.")]
TransferModel = Annotated[Optional[str], typer.Option("--model", help="Sentence model spec (default: "
                          "sbert:all-MiniLM-L6-v2, offline).", show_default=False)]
TransferRunId = Annotated[str, typer.Option("--run-id", help="Run tag written in the last column.")]
TransferReport = Annotated[Optional[Path], typer.Option("--report", help="With --cv: also write the results as JSON.")]


@app.command("modelret-a")
def modelret_a_cmd(
    train: Annotated[Path, typer.Option("--train", help="Folder laid out like ntcir19-modelretrieval-a: tasks.csv, "
                                        "models.csv, ground-truth.csv, task-data/train-tasks/<id>/{train,val}.jsonl.")],
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Folder of <task_id>/{train,val}.jsonl to rank "
                                                    "models for.")] = None,
    tasks_csv: Annotated[Optional[Path], typer.Option("--tasks-csv", help="Task table with task_instruction, "
                         "task_criticalness, text_col, label_col (default: TRAIN/tasks.csv).", show_default=False)]
    = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="TREC run to write (task_id Q0 model_id …).")] = None,
    cv: Annotated[bool, typer.Option("--cv", help="Cross-validate on the training tasks: nDCG@1/3/5 (gain 2^rel−1), "
                                     "overall and per criticality, for the average-rank baseline, each view and "
                                     "their best blend.")] = False,
    views: Annotated[Optional[str], typer.Option("--views", help="Blend exactly these views (comma-separated: text, "
                     "instruction, labels, stats) (default: the best blend by leave-one-out).", show_default=False)]
    = None,
    sample: Annotated[int, typer.Option("--sample", help="Train/val texts embedded per task (mean = text view).")] = 32,
    k: TransferK = None,
    temperature: TransferTemp = None,
    prior_weight: TransferPrior = None,
    folds: TransferFolds = 10,
    model: TransferModel = None,
    run_id: TransferRunId = "engine-transfer",
    report: TransferReport = None,
    quiet: Quiet = False,
) -> None:
    """NTCIR-19 ModelRetrieval A: rank candidate models for a task by the normalized F1 they reached on similar
    training tasks."""
    set_quiet(quiet)
    from engine.adapters import modelret_a
    if cv:
        result = modelret_a.cross_validate_tasks(train, tasks_csv, folds, model, sample, k, temperature, prior_weight)
        typer.echo(result.table())
        if report:
            from engine.io.atomic import write_json
            write_json(report, result.to_json())
        return
    if queries is None or out is None:
        raise EngineError("give --queries DIR and --out RUN to rank models, or --cv to cross-validate")
    from engine.progress import info
    info(modelret_a.rank_tasks(train, queries, out, tasks_csv, views, model, sample, k, temperature, prior_weight,
                               run_id))


@app.command("mllm")
def mllm_cmd(
    dev_queries: Annotated[Path, typer.Option("--dev-queries", help="Judged questions: TSV `qid<TAB>text` "
                                              "(llm_dev_data.tsv), CSV or JSONL.")],
    qrels: Annotated[Path, typer.Option("--qrels", help="Dev qrels `qid 0 llm_id grade` (0 not, 1 most, 2 "
                                        "second-most relevant).")],
    queries: Annotated[Optional[Path], typer.Option("--queries", help="Questions to rank LLMs for (TSV "
                                                    "`qid<TAB>text`).")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="TREC run to write (every LLM for every question).")]
    = None,
    cv: Annotated[bool, typer.Option("--cv", help="Cross-validate on the dev questions: nDCG@10 and MRR of the "
                                     "prior and of transfer.")] = False,
    llm_ids: Annotated[Optional[Path], typer.Option("--llm-ids", help="All candidate LLM ids, one per line "
                       "(llm_ids.txt) (default: the LLMs in the qrels).", show_default=False)] = None,
    targets: Annotated[str, typer.Option("--targets", help="Grade → target map; also the nDCG gains.")]
    = "0:0,1:1.0,2:0.7",
    k: TransferK = None,
    temperature: TransferTemp = None,
    prior_weight: TransferPrior = None,
    folds: TransferFolds = 10,
    model: TransferModel = None,
    run_id: TransferRunId = "engine-transfer",
    report: TransferReport = None,
    quiet: Quiet = False,
) -> None:
    """TREC 2025 Million LLMs: rank every LLM for a question from the judged dev questions nearest to it."""
    set_quiet(quiet)
    from engine.adapters import mllm
    if cv:
        result = mllm.cross_validate_dev(dev_queries, qrels, llm_ids, targets, folds, model, k, temperature,
                                         prior_weight)
        typer.echo(mllm.format_cv(result))
        if report:
            from engine.io.atomic import write_json
            write_json(report, result)
        return
    if queries is None or out is None:
        raise EngineError("give --queries TSV and --out RUN to rank LLMs, or --cv to cross-validate")
    from engine.progress import info
    info(mllm.rank_questions(dev_queries, qrels, queries, out, llm_ids, targets, model, k, temperature, prior_weight,
                             run_id))


def main() -> None:
    """Console-script entry: user errors become one red line and exit code 2, never a traceback."""
    try:
        app()
    except EngineError as exc:
        from engine.progress import console
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
