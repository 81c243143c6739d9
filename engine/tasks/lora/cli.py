"""`engine lora build|submit|eval`: options parsed into the pipeline's dataclasses, which hold every default."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from engine.commands.collection import Device, Quiet, RayAddress, Root
from engine.io.options import BATCH_SIZE, FOLDS, WORKERS, Float, cli, options_command, split_list
from engine.core.collection import DEFAULT_ROOT
from engine.progress import set_quiet
from engine.tasks.lora.cv import EvalOptions
from engine.tasks.lora.features import ExtractOptions
from engine.tasks.lora.model import RANGES as LORA_RANGES, LoraConfig
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


@dataclass(frozen=True)
class LoraBuildOptions:
    """What `engine lora build` is told, each option declared once (engine.io.options.options_command)."""
    train: Annotated[Path, cli(LoraTrain)]
    images: Annotated[Path, cli(LoraImages)]
    models: Annotated[Optional[Path], cli(LoraModels)] = None
    name: Annotated[str, cli(LoraName)] = DEFAULT_NAME
    rep: Annotated[str, cli(typer.Option("--rep", help="Representation: pooled, meanvar, gram, or parts joined by "
                                     "'+' (e.g. pooled+meanvar)."))] = CONFIG.rep
    scorer: Annotated[str, cli(typer.Option("--scorer", help="proto (prototype cosine), knn (vote of nearest training "
                                        "images), probe (logistic regression) or text (zero-shot names)."))] \
        = CONFIG.scorer
    content_removal: Annotated[bool, cli(typer.Option("--content-removal/--no-content-removal", help="Subtract the "
                               "mean of the images that share a content image (test ids `test-<content>-<n>`)."))] \
        = CONFIG.content_removal
    text_weight: Annotated[float, cli(typer.Option("--text-weight", help="Weight of the zero-shot text prior blended "
                                               "with the image scores (0: off).")),
                           LORA_RANGES["text_weight"]] = CONFIG.text_weight
    k: Annotated[int, cli(typer.Option("-k", help="Neighbours for the knn scorer.")), LORA_RANGES["k"]] = CONFIG.k
    image_model: Annotated[str, cli(LoraImageModel)] = EXTRACT.image_model
    text_model: Annotated[str, cli(LoraTextModel)] = EXTRACT.text_model
    batch_size: Annotated[int, cli(LoraBatch), BATCH_SIZE] = EXTRACT.batch_size
    workers: Annotated[int, cli(LoraWorkers), WORKERS] = EXTRACT.workers
    force: Annotated[bool, cli(typer.Option("--force", help="Rebuild an adapter that already exists."))] = False
    device: Annotated[str, cli(Device)] = EXTRACT.device
    ray: Annotated[Optional[str], cli(RayAddress)] = EXTRACT.ray
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False


def _lora_build(o: LoraBuildOptions) -> None:
    """Embed the training images; store one prototype per LoRA, the per-image embeddings and the probe."""
    set_quiet(o.quiet)
    from engine.tasks.lora.pipeline import build_adapter
    build_adapter(o.train, o.images, o.models, o.name, o.root,
                  LoraConfig(rep=o.rep, scorer=o.scorer, content_removal=o.content_removal, text_weight=o.text_weight,
                             k=o.k),
                  ExtractOptions(o.image_model, o.text_model, o.batch_size, o.workers, o.device, o.ray), force=o.force)


lora_build_cmd = lora_app.command("build")(options_command(LoraBuildOptions, _lora_build))


@dataclass(frozen=True)
class LoraSubmitOptions:
    """What `engine lora submit` is told, each option declared once (engine.io.options.options_command)."""
    queries: Annotated[Path, cli(typer.Option("--queries", help="Folder of query images (id = file name without "
                                          "suffix) or a list of ids/paths, one per line."))]
    out: Annotated[Path, cli(typer.Option("--out", help="TREC run to write: image_id Q0 lora_id rank score runid."))]
    images: Annotated[Optional[Path], cli(typer.Option("--images", help="Where the ids of a list are found "
                      "(default: the list's folder and its images/)."))] = None
    name: Annotated[str, cli(LoraName)] = DEFAULT_NAME
    run_id: Annotated[str, cli(typer.Option("--run-id", help="Run id column."))] = SUBMIT.run_id
    text_weight: Annotated[Optional[float], cli(typer.Option("--text-weight", help="Override the adapter's text-prior "
                           "weight.", show_default=False)), LORA_RANGES["text_weight"]] = SUBMIT.text_weight
    batch_size: Annotated[int, cli(LoraBatch), BATCH_SIZE] = SUBMIT.batch_size
    workers: Annotated[int, cli(LoraWorkers), WORKERS] = SUBMIT.workers
    root: Annotated[Path, cli(Root)] = DEFAULT_ROOT
    quiet: Annotated[bool, cli(Quiet)] = False


def _lora_submit(o: LoraSubmitOptions) -> None:
    """Rank all LoRAs for every query image with a built adapter."""
    set_quiet(o.quiet)
    from engine.tasks.lora.pipeline import submit_run
    submit_run(o.queries, o.out, o.name, o.root, o.images,
               SubmitOptions(o.run_id, o.text_weight, o.batch_size, o.workers))


lora_submit_cmd = lora_app.command("submit")(options_command(LoraSubmitOptions, _lora_submit))


@dataclass(frozen=True)
class LoraEvalOptions:
    """What `engine lora eval` is told, each option declared once (engine.io.options.options_command)."""
    train: Annotated[Path, cli(LoraTrain)]
    images: Annotated[Path, cli(LoraImages)]
    models: Annotated[Optional[Path], cli(LoraModels)] = None
    folds: Annotated[int, cli(typer.Option("--folds", help="GroupKFold folds by content image.")), FOLDS] = EVAL.folds
    reps: Annotated[str, cli(typer.Option("--reps", help="Comma-separated representations to compare."))] \
        = ",".join(EVAL.reps)
    scorers: Annotated[str, cli(typer.Option("--scorers", help="Comma-separated: proto, knn, probe."))] \
        = ",".join(EVAL.scorers)
    text_weights: Annotated[str, cli(typer.Option("--text-weights", help="Comma-separated text-prior weights "
                            "(0: off).")), Float(0, 1_000, listed=True)] = ",".join(f"{w:g}" for w in EVAL.text_weights)
    content_removal: Annotated[str, cli(typer.Option("--content-removal", help="off, on or both."))] \
        = EVAL.content_removal
    image_model: Annotated[str, cli(LoraImageModel)] = EXTRACT.image_model
    text_model: Annotated[str, cli(LoraTextModel)] = EXTRACT.text_model
    out: Annotated[Optional[Path], cli(typer.Option("--out", help="Also write the table as JSON here."))] = None
    markdown: Annotated[bool, cli(typer.Option("--markdown", help="Print a Markdown table."))] = False
    batch_size: Annotated[int, cli(LoraBatch), BATCH_SIZE] = EXTRACT.batch_size
    workers: Annotated[int, cli(LoraWorkers), WORKERS] = EXTRACT.workers
    quiet: Annotated[bool, cli(Quiet)] = False


def _lora_eval(o: LoraEvalOptions) -> None:
    """Cross-validate by content image (never random): MRR, R@1, R@5 for every configuration."""
    set_quiet(o.quiet)
    from engine.tasks.lora.cv import cv_report
    options = EvalOptions(o.folds, tuple(split_list(o.reps) or ()), tuple(split_list(o.scorers) or ()),
                          o.content_removal, tuple(split_list(o.text_weights) or ()))
    typer.echo(cv_report(o.train, o.images, o.models, options,
                         ExtractOptions(o.image_model, o.text_model, o.batch_size, o.workers),
                         o.out, o.markdown))


lora_eval_cmd = lora_app.command("eval")(options_command(LoraEvalOptions, _lora_eval))


def register(app: typer.Typer, validate: typer.Typer, convert: typer.Typer) -> None:
    app.add_typer(lora_app, name="lora")
