"""`engine eventa build|submit|eval|fixture`, `engine validate eventa`, `engine convert eventa-submission|eventa-qrels`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from engine.commands.collection import Device, Quiet, RayAddress, Root
from engine.io.options import BATCH, BATCH_SIZE, SEED, WORKERS, Int, cli, options_command, taken
from engine.core.collection import DEFAULT_ROOT
from engine.core.storage.builder.options import BATCH_PIXELS
from engine.commands.eval import DocsOpt, QueriesOpt
from engine.progress import set_quiet
from engine.tasks.eventa import fixture
from engine.tasks.eventa.build import DEFAULT_NAME, PASSAGE_WORDS, BuildOptions
from engine.tasks.eventa.data import Fields
from engine.tasks.eventa.evaluate import EVAL_POOLINGS
from engine.tasks.eventa.rank import BATCH_SIZE as CAPTION_BATCH, RankParams
from engine.tasks.eventa.stages import RANGES as KNOB

BUILD = BuildOptions()
RANK = RankParams()

eventa_app = typer.Typer(no_args_is_help=True, help="EVENTA 2025 Track 2: caption → news image through an article "
                                                    "stage (dense + BM25 articles, their images scored, global "
                                                    "text→image fill). build, submit, eval.")
EventaName = Annotated[str, typer.Option("--name", help="Index name: a folder under --root holding the images/ "
                                         "and articles/ collections.")]
EventaPooling = Annotated[str, typer.Option("--pooling", help="Long captions in the article stage (dense passages): "
                          "mean (each sentence encoded, vectors averaged), max (a candidate scores its best "
                          "sentence), full (the caption as one text: the model TRUNCATES it at its window, MiniLM "
                          "256 word pieces, CLIP 77 tokens) or auto (full where the caption fits the window, max "
                          "where it would be cut).")]
EventaImagePooling = Annotated[str, typer.Option("--image-pooling", help="Long captions in the image stage (global "
                               "text→image search and the images of the top articles): auto, full, mean or max, "
                               "as --pooling.")]
EventaArticleFusion = Annotated[str, typer.Option("--article-fusion", help="Dense + BM25 articles: rrf (reciprocal "
                                "rank fusion, untuned) or weighted (min-max normalized scores × weights).")]
EventaDenseWeight = Annotated[float, typer.Option("--dense-weight", help="Weight of the dense article ranking.")]
EventaBm25Weight = Annotated[float, typer.Option("--bm25-weight", help="Weight of the BM25 article ranking.")]
EventaRerank = Annotated[Optional[str], typer.Option("--rerank", help="Reranker spec reordering each caption's "
                        "fused articles (e.g. cross:/models/ms-marco-MiniLM-L6); adds the articles_reranked stage.",
                        show_default=False)]
EventaRerankDepth = Annotated[int, typer.Option("--rerank-depth", help="Fused articles the reranker reads per "
                              "caption.")]
EventaTopArticles = Annotated[int, typer.Option("--top-articles", help="Articles whose images are scored (0: skip the article stage: images alone).")]
EventaImageFusion = Annotated[str, typer.Option("--image-fusion", help="Image similarity + article score: "
                              "weighted (min-max) or rrf.")]
EventaArticleWeight = Annotated[float, typer.Option("--article-weight", help="Share of the article score in the "
                                "image fusion, 0..1 (0: image similarity only inside the top articles).")]
EventaDepth = Annotated[int, typer.Option("--depth", help="Articles kept per system (dense, BM25) before fusion.")]
EventaBatch = Annotated[int, typer.Option("--batch-size", help="Captions ranked per batch.")]


@dataclass(frozen=True)
class EventaBuildOptions:
    """What `engine eventa build` is told, each option declared once (engine.io.options.options_command)."""
    database: Annotated[Path, cli(typer.Option("--database", help="Articles: OpenEvents V1 database.json "
                        "({article_id: {title, content, images, date, url}}), or a JSON list/JSONL with an id "
                        "field."))]
    images: Annotated[Path, cli(typer.Option("--images", help="Image folder; file names (without extension) are "
                      "image ids."))]
    name: Annotated[str, cli(EventaName)] = DEFAULT_NAME
    model: Annotated[Optional[str], cli(typer.Option("--model", help="Image–text model of the image stage (the "
                     "global text→image search and the images of the top articles): conse (offline, default), "
                     "clip:ARCH:WEIGHTS when you have CLIP weights, or sbert:NAME_OR_DIR, a sentence-transformers "
                     "model that embeds images (a CLIP-layout model, or a VLM embedder such as gme-Qwen2-VL or "
                     "Qwen3-VL-Embedding).", show_default=False))] = BUILD.model
    text_model: Annotated[Optional[str], cli(typer.Option("--text-model", help="Sentence model of the article "
                          "passages (default sbert:all-MiniLM-L6-v2, offline).", show_default=False))] \
        = BUILD.text_model
    title_field: Annotated[str, cli(typer.Option("--title-field", help="Article field holding the title."))] \
        = BUILD.fields.title
    content_field: Annotated[str, cli(typer.Option("--content-field", help="Article field holding the text."))] \
        = BUILD.fields.content
    images_field: Annotated[str, cli(typer.Option("--images-field", help="Article field listing its image ids."))] \
        = BUILD.fields.images
    id_field: Annotated[Optional[str], cli(typer.Option("--id-field", help="Article id field of a JSON list/JSONL "
                        "(default: article_id or id).", show_default=False))] = BUILD.fields.id
    passage_words: Annotated[int, cli(typer.Option("--passage-words", help="Long articles are cut into passages of "
                             "whole sentences up to this many words (title repeated in each); an article scores its "
                             "best passage.")), PASSAGE_WORDS] = BUILD.passage_words
    index: Annotated[str, cli(typer.Option("--index", help="FAISS factory string for both collections."))] \
        = BUILD.index
    batch_size: Annotated[int, cli(typer.Option("--batch-size", help="Images per forward pass.")),
                          BATCH_SIZE] = BUILD.batch_size
    batch_pixels: Annotated[Optional[int], cli(typer.Option("--batch-pixels", help="Also cut each forward pass of "
                            "images at this many pixels (an image above it goes alone): for an sbert: VLM embedder, "
                            "whose memory grows with the pixels it reads.", show_default=False)), BATCH_PIXELS] \
        = BUILD.batch_pixels
    workers: Annotated[int, cli(typer.Option("--workers", help="Image-decoding threads.")), WORKERS] = BUILD.workers
    force: Annotated[bool, cli(typer.Option("--force", help="Rebuild an index that already exists (its image "
                     "embeddings are reused when the images and model are the same)."))] = BUILD.force
    device: Annotated[str, cli(Device)] = BUILD.device
    ray: Annotated[Optional[str], cli(RayAddress)] = BUILD.ray
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False


def _build(o: EventaBuildOptions) -> None:
    """Build the image collection, the article-passage collection and a BM25 index over the articles."""
    set_quiet(o.quiet)
    from engine.tasks.eventa.build import build_eventa
    build_eventa(o.database, o.images, o.name, o.root, BuildOptions(
        model=o.model, text_model=o.text_model,
        fields=Fields(title=o.title_field, content=o.content_field, images=o.images_field, id=o.id_field),
        passage_words=o.passage_words, index=o.index, batch_size=o.batch_size, batch_pixels=o.batch_pixels,
        workers=o.workers, force=o.force,
        device=o.device, ray=o.ray))


eventa_build_cmd = eventa_app.command("build")(options_command(EventaBuildOptions, _build))
EventaIdColumn = Annotated[Optional[str], typer.Option("--id-column", help="Query id column (default: query_id, "
                           "image_index, …).", show_default=False)]
EventaTextColumn = Annotated[Optional[str], typer.Option("--text-column", help="Caption column (default: "
                             "query_text, caption, …).", show_default=False)]


@dataclass(frozen=True)
class EventaKnobs:
    """The pipeline's knobs that submit and eval both take (`RankParams` but the pooling)."""
    article_fusion: Annotated[str, cli(EventaArticleFusion)] = RANK.article_fusion
    dense_weight: Annotated[float, cli(EventaDenseWeight), KNOB["dense_weight"]] = RANK.dense_weight
    bm25_weight: Annotated[float, cli(EventaBm25Weight), KNOB["bm25_weight"]] = RANK.bm25_weight
    top_articles: Annotated[int, cli(EventaTopArticles), KNOB["top_articles"]] = RANK.top_articles
    image_fusion: Annotated[str, cli(EventaImageFusion)] = RANK.image_fusion
    image_pooling: Annotated[str, cli(EventaImagePooling)] = RANK.image_pooling
    article_weight: Annotated[float, cli(EventaArticleWeight), KNOB["article_weight"]] = RANK.article_weight
    depth: Annotated[int, cli(EventaDepth), KNOB["depth"]] = RANK.depth
    rerank: Annotated[Optional[str], cli(EventaRerank)] = RANK.rerank
    rerank_depth: Annotated[int, cli(EventaRerankDepth), KNOB["rerank_depth"]] = RANK.rerank_depth


def rank_params(o: Any, pooling: str = RANK.pooling) -> RankParams:
    """The pipeline's knobs of a command's options (`pooling`: eval compares several, one at a time)."""
    return taken(RankParams, o.knobs, pooling=pooling)


@dataclass(frozen=True)
class EventaSubmitOptions:
    """What `engine eventa submit` is told, each option declared once."""
    queries: Annotated[Path, cli(typer.Option("--queries", help="CSV query_id,query_text (the challenge's query "
                       "file)."))]
    out: Annotated[Path, cli(typer.Option("--out", help="submission.zip to write; submission.csv is written beside "
                   "it."))]
    name: Annotated[str, cli(EventaName)] = DEFAULT_NAME
    pooling: Annotated[str, cli(EventaPooling)] = RANK.pooling
    knobs: EventaKnobs = EventaKnobs()
    batch_size: Annotated[int, cli(EventaBatch), BATCH] = CAPTION_BATCH
    id_column: Annotated[Optional[str], cli(EventaIdColumn)] = None
    text_column: Annotated[Optional[str], cli(EventaTextColumn)] = None
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False
    pipeline: Annotated[Optional[Path], cli(typer.Option("--pipeline", help="A pipeline file to rank with instead of "
                        "the default (print the default with `engine pipeline show eventa`)."))] = None


def _submit(o: EventaSubmitOptions) -> None:
    """Rank 10 images per caption (articles first, then their images) and write the validated submission."""
    set_quiet(o.quiet)
    from engine.tasks.eventa.rank import submit_eventa
    submit_eventa(o.queries, o.out, o.name, o.root, rank_params(o, o.pooling), o.id_column, o.text_column,
                  o.pipeline)


eventa_submit_cmd = eventa_app.command("submit")(options_command(EventaSubmitOptions, _submit))


@dataclass(frozen=True)
class EventaEvalOptions:
    """What `engine eventa eval` is told, each option declared once."""
    queries: Annotated[Path, cli(typer.Option("--queries", help="Labeled CSV: query_id (or image_index), caption "
                       "(query_text), retrieved_article_id, retrieved_image_id."))]
    name: Annotated[str, cli(EventaName)] = DEFAULT_NAME
    pooling: Annotated[str, cli(typer.Option("--pooling", help="Comma-separated poolings of the article stage to "
                       "compare: mean, max, full (full truncates captions at the model's window), auto "
                       "(--image-pooling sets the image stage's)."))] = ",".join(EVAL_POOLINGS)
    knobs: EventaKnobs = EventaKnobs()
    sweep: Annotated[Optional[str], cli(typer.Option("--sweep", help="Comma-separated article weights to also score "
                     "the fused stage at (rows `fused w=…`), e.g. 0,0.5,0.8,1: pick the best for submit "
                     "--article-weight.", show_default=False))] = None
    limit: Annotated[Optional[int], cli(typer.Option("--limit", help="Score only the first N labeled captions.",
                     show_default=False)), Int(1, 100_000_000)] = None
    id_column: Annotated[Optional[str], cli(EventaIdColumn)] = None
    text_column: Annotated[Optional[str], cli(EventaTextColumn)] = None
    image_column: Annotated[Optional[str], cli(typer.Option("--image-column", help="Correct image id column "
                            "(default: retrieved_image_id).", show_default=False))] = None
    article_column: Annotated[Optional[str], cli(typer.Option("--article-column", help="Correct article id column "
                              "(default: retrieved_article_id; optional).", show_default=False))] = None
    as_json: Annotated[bool, cli(typer.Option("--json", help="Print JSON instead of a table."))] = False
    markdown: Annotated[bool, cli(typer.Option("--markdown", help="Print a Markdown table."))] = False
    out: Annotated[Optional[Path], cli(typer.Option("--out", help="Also write the table as JSON here."))] = None
    batch_size: Annotated[int, cli(EventaBatch), BATCH] = CAPTION_BATCH
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False

    def columns(self) -> dict[str, str | None]:
        """The labeled CSV's column names that were given (`engine.tasks.eventa.data.read_labeled`)."""
        return {"id_column": self.id_column, "text_column": self.text_column, "image_column": self.image_column,
                "article_column": self.article_column}


def _eval(o: EventaEvalOptions) -> None:
    """Overall and its parts (mAP, MRR, R@1/5/10) for each stage alone and fused, plus the gold article's recall."""
    set_quiet(o.quiet)
    from engine.tasks.eventa.evaluate import eval_command
    typer.echo(eval_command(o, rank_params(o)))


eventa_eval_cmd = eventa_app.command("eval")(options_command(EventaEvalOptions, _eval))


@eventa_app.command("fixture")
def eventa_fixture_cmd(
    out: Annotated[Path, typer.Argument(help="Folder to write database.json, images/, queries.csv, labeled.csv.")],
    articles: Annotated[int, typer.Option("--articles", help="Articles to generate."),
                        Int(1, 100_000)] = fixture.N_ARTICLES,
    images_per_article: Annotated[int, typer.Option("--images-per-article", help="Images per article (1–8)."),
                                  Int(1, 1_000)]
    = fixture.IMAGES_PER_ARTICLE,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same files)."), SEED] = fixture.SEED,
) -> None:
    """Generate a small offline EVENTA database in the OpenEvents V1 layout (images cut from scikit-image photos)."""
    from engine.tasks.eventa.fixture import make_eventa_fixture
    from engine.progress import info
    paths = make_eventa_fixture(out, articles, images_per_article, seed=seed)
    info(f"wrote {paths.database}, {paths.images}/ ({paths.n_images} images + 1 broken file), {paths.queries}, "
         f"{paths.labeled}")


def validate_eventa_cmd(file: Annotated[Path, typer.Argument(help="EVENTA submission.csv or submission.zip.")],
                        queries: QueriesOpt = None, docs: DocsOpt = None) -> None:
    """Check an EVENTA Track 2 submission; exit 1 if anything is wrong."""
    from engine.tasks.eventa.submission import validate_eventa
    report = validate_eventa(file, queries, docs)
    typer.echo(report.text())
    raise typer.Exit(report.exit_code)


def convert_eventa_submission_cmd(run: Annotated[Path, typer.Argument(help="TREC run.")],
                                  out_dir: Annotated[Path, typer.Argument(help="Folder for submission.csv/.zip.")],
                                  queries: QueriesOpt = None) -> None:
    """TREC run → EVENTA submission.csv + submission.zip (top 10, `#` for empty slots)."""
    from engine.tasks.eventa.submission import run_to_submission
    from engine.progress import info
    csv_path, zip_path = run_to_submission(run, out_dir, queries)
    info(f"wrote {csv_path} and {zip_path}")


def convert_eventa_qrels_cmd(labeled: Annotated[Path, typer.Argument(help="Labeled caption CSV (query id, "
                                                                       "caption, retrieved_image_id).")],
                             out: Annotated[Path, typer.Argument(help="TREC qrels to write.")]) -> None:
    """EVENTA labeled CSV → TREC qrels (each caption's correct image, grade 1), for `engine eval` and
    `engine compare` (`engine eval submission.zip labeled.csv` reads the CSV itself)."""
    from engine.io.runs import write_qrels
    from engine.progress import info
    from engine.tasks.eventa.data import labeled_qrels
    n = write_qrels(out, labeled_qrels(labeled))
    info(f"wrote {n} judgments to {out}")


def register(app: typer.Typer, validate: typer.Typer, convert: typer.Typer) -> None:
    from engine.commands.pipeline import register_task_pipeline
    from engine.tasks.eventa.stages import default_pipeline_file
    register_task_pipeline("eventa", default_pipeline_file, DEFAULT_NAME)
    app.add_typer(eventa_app, name="eventa")
    validate.command("eventa")(validate_eventa_cmd)
    convert.command("eventa-submission")(convert_eventa_submission_cmd)
    convert.command("eventa-qrels")(convert_eventa_qrels_cmd)
