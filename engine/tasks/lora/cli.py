"""`engine lora build|submit|eval`: options parsed into the pipeline's dataclasses, which hold every default."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.core.cli import Device, Quiet, RayAddress, Root
from engine.io.options import split_list
from engine.core.collection import DEFAULT_ROOT
from engine.progress import set_quiet
from engine.tasks.lora.cv import EvalOptions
from engine.tasks.lora.features import ExtractOptions
from engine.tasks.lora.model import LoraConfig
from engine.tasks.lora.pipeline import DEFAULT_NAME, SubmitOptions

CONFIG, EXTRACT, SUBMIT, EVAL = LoraConfig(), ExtractOptions(), SubmitOptions(), EvalOptions()

lora_app = typer.Typer(no_args_is_help=True, help="Style image → LoRA (NTCIR-19 ModelRetrieval B): build "
                                                  "prototypes, submit a run, cross-validate by content image.")
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
    name: LoraName = DEFAULT_NAME,
    rep: Annotated[str, typer.Option("--rep", help="Representation: pooled, meanvar, gram, or parts joined by "
                                     "'+' (e.g. pooled+meanvar).")] = CONFIG.rep,
    scorer: Annotated[str, typer.Option("--scorer", help="proto (prototype cosine), knn (vote of nearest training "
                                        "images), probe (logistic regression) or text (zero-shot names).")]
    = CONFIG.scorer,
    content_removal: Annotated[bool, typer.Option("--content-removal/--no-content-removal", help="Subtract the mean "
                               "of the images that share a content image (test ids `test-<content>-<n>`).")]
    = CONFIG.content_removal,
    text_weight: Annotated[float, typer.Option("--text-weight", help="Weight of the zero-shot text prior blended "
                                               "with the image scores (0: off).")] = CONFIG.text_weight,
    k: Annotated[int, typer.Option("-k", help="Neighbours for the knn scorer.")] = CONFIG.k,
    image_model: LoraImageModel = EXTRACT.image_model,
    text_model: LoraTextModel = EXTRACT.text_model,
    batch_size: LoraBatch = EXTRACT.batch_size,
    workers: LoraWorkers = EXTRACT.workers,
    force: Annotated[bool, typer.Option("--force", help="Rebuild an adapter that already exists.")] = False,
    device: Device = EXTRACT.device,
    ray: RayAddress = EXTRACT.ray,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Embed the training images; store one prototype per LoRA, the per-image embeddings and the probe."""
    set_quiet(quiet)
    from engine.tasks.lora.pipeline import build_adapter
    build_adapter(train, images, models, name, root,
                  LoraConfig(rep=rep, scorer=scorer, content_removal=content_removal, text_weight=text_weight, k=k),
                  ExtractOptions(image_model, text_model, batch_size, workers, device, ray), force=force)


@lora_app.command("submit")
def lora_submit_cmd(
    queries: Annotated[Path, typer.Option("--queries", help="Folder of query images (id = file name without "
                                          "suffix) or a list of ids/paths, one per line.")],
    out: Annotated[Path, typer.Option("--out", help="TREC run to write: image_id Q0 lora_id rank score runid.")],
    images: Annotated[Optional[Path], typer.Option("--images", help="Where the ids of a list are found "
                      "(default: the list's folder and its images/).")] = None,
    name: LoraName = DEFAULT_NAME,
    run_id: Annotated[str, typer.Option("--run-id", help="Run id column.")] = SUBMIT.run_id,
    text_weight: Annotated[Optional[float], typer.Option("--text-weight", help="Override the adapter's text-prior "
                           "weight.", show_default=False)] = SUBMIT.text_weight,
    batch_size: LoraBatch = SUBMIT.batch_size,
    workers: LoraWorkers = SUBMIT.workers,
    root: Root = DEFAULT_ROOT,
    quiet: Quiet = False,
) -> None:
    """Rank all LoRAs for every query image with a built adapter."""
    set_quiet(quiet)
    from engine.tasks.lora.pipeline import submit_run
    submit_run(queries, out, name, root, images, SubmitOptions(run_id, text_weight, batch_size, workers))


@lora_app.command("eval")
def lora_eval_cmd(
    train: LoraTrain,
    images: LoraImages,
    models: LoraModels = None,
    folds: Annotated[int, typer.Option("--folds", help="GroupKFold folds by content image.")] = EVAL.folds,
    reps: Annotated[str, typer.Option("--reps", help="Comma-separated representations to compare.")]
    = ",".join(EVAL.reps),
    scorers: Annotated[str, typer.Option("--scorers", help="Comma-separated: proto, knn, probe.")]
    = ",".join(EVAL.scorers),
    text_weights: Annotated[str, typer.Option("--text-weights", help="Comma-separated text-prior weights (0: off).")]
    = ",".join(f"{w:g}" for w in EVAL.text_weights),
    content_removal: Annotated[str, typer.Option("--content-removal", help="off, on or both.")]
    = EVAL.content_removal,
    image_model: LoraImageModel = EXTRACT.image_model,
    text_model: LoraTextModel = EXTRACT.text_model,
    out: Annotated[Optional[Path], typer.Option("--out", help="Also write the table as JSON here.")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a Markdown table.")] = False,
    batch_size: LoraBatch = EXTRACT.batch_size,
    workers: LoraWorkers = EXTRACT.workers,
    quiet: Quiet = False,
) -> None:
    """Cross-validate by content image (never random): MRR, R@1, R@5 for every configuration."""
    set_quiet(quiet)
    from engine.tasks.lora.cv import cv_report
    options = EvalOptions(folds, tuple(split_list(reps) or ()), tuple(split_list(scorers) or ()), content_removal,
                          tuple(split_list(text_weights) or ()))
    typer.echo(cv_report(train, images, models, options, ExtractOptions(image_model, text_model, batch_size, workers),
                         out, markdown))


def register(app: typer.Typer, validate: typer.Typer, convert: typer.Typer) -> None:
    app.add_typer(lora_app, name="lora")
