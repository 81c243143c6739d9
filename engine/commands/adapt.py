"""`engine adapt`: fit an adapter over a frozen encoder on labelled pairs. Parsing only (work: `.fit`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from engine.core.ranking.adapters.fit import NEIGHBOURS, RANGES as FIT_RANGES, FitOptions
from engine.io.options import cli, options_command, taken

FIT = FitOptions()


@dataclass(frozen=True)
class AdaptOptions:
    """What `engine adapt` is told, each option declared once (engine.io.options.options_command)."""
    base: Annotated[str, cli(typer.Option("--base", help="Encoder spec to adapt (kept frozen), e.g. conse, "
                  "sbert:all-MiniLM-L6-v2, clip:ViT-B-32:openai."))]
    pairs: Annotated[Path, cli(typer.Option("--pairs", help="CSV with the columns text,image (caption and image path, "
                     "relative to the CSV or absolute) or query,document."))]
    out: Annotated[Path, cli(typer.Option("--out", help="Folder to write; use it as --model adapted:DIR."))]
    holdout: Annotated[float, cli(typer.Option("--holdout", help="Linear form: share of images/documents held "
                       "out for early stopping (0.05–0.5).")), FIT_RANGES["holdout"]] = FIT.holdout
    reg: Annotated[float, cli(typer.Option("--reg", help="Linear form: pull toward the identity (≥ 0).")),
                   FIT_RANGES["reg"]] = FIT.reg
    epochs: Annotated[int, cli(typer.Option("--epochs", help="Linear form: most full-batch steps.")),
                      FIT_RANGES["epochs"]] = FIT.epochs
    seed: Annotated[int, cli(typer.Option("--seed", help="Seed of the held-out split and the fit (conse-neighbours: "
                    "of its folds).")), FIT_RANGES["seed"]] = FIT.seed
    form: Annotated[str, cli(typer.Option("--form", help="auto (conse-neighbours for text,image pairs over conse, "
                    "else linear), linear (two linear maps) or conse-neighbours."))] = FIT.form
    force: Annotated[bool, cli(typer.Option("--force", help="Replace an adapter already in --out."))] = False
    device: Annotated[str, cli(typer.Option("--device", help="Where the base encoder runs: auto, cpu, cuda, mps."))] \
        = "auto"
    quiet: Annotated[bool, cli(typer.Option("--quiet", "-q", help="No status lines."))] = False


def _adapt(o: AdaptOptions) -> None:
    """Fit an adapter on labelled pairs: over conse with text,image pairs, centring + 10 views + a memory of the
    fitted photos (knobs by cross-validation); otherwise two linear maps (contrastive, regularised toward the
    identity, early-stopped on held-out pairs)."""
    from engine.core.ranking.adapters.fit import adapt
    from engine.core.encoders.device import set_device
    from engine.progress import info, set_quiet
    set_quiet(o.quiet)
    set_device(o.device)
    options = taken(FitOptions, o).check()
    config = adapt(o.base, o.pairs, o.out, options, o.force)
    r = config["report"]
    if config.get("form") == NEIGHBOURS:
        info(f"adapter {NEIGHBOURS} over {config['base']} in {o.out}: {r['photos']} photos, {r['pairs']} pairs; "
             f"{r['folds']}-fold R@1 {r['cv_r@1_views_only']:.3f} (centring and memory off) → "
             f"{r['cv_r@1_chosen']:.3f} with {r['chosen']}; use --model adapted:{o.out}")
        return
    info(f"adapter over {config['base']} in {o.out}: held-out loss {r['held_out_loss_before']:.3f} → "
         f"{r['held_out_loss_after']:.3f} ({r['pairs_fitted']} pairs fitted, {r['pairs_held_out']} held out, "
         f"{r['steps']} steps); use --model adapted:{o.out}")


adapt_cmd = options_command(AdaptOptions, _adapt)
