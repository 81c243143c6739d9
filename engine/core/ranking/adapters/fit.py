"""Fitting an adapter: two linear maps over a frozen encoder's embeddings (one per side: captions and images,
or one shared by queries and documents), started at the identity, trained contrastively (InfoNCE, caption →
its image among all images of the batch) with a penalty toward the identity, early-stopped on a held-out slice
of the pairs split by image/document (never fitted on it). Only embeddings are computed from the model, once."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engine.errors import EngineError, opt
from engine.io.options import SEED, Float, Int

from engine.core.encoders.adapted import ADAPTER_FILE, CONFIG_FILE
from engine.core.encoders.neighbours import FORM as NEIGHBOURS


FORMS = ("auto", "linear", NEIGHBOURS)


RANGES = {"holdout": Float(0.05, 0.5), "reg": Float(0, 1_000), "temperature": Float(0, 1, open_lo=True),
          "lr": Float(0, 1, open_lo=True), "epochs": Int(1, 100_000), "patience": Int(1, 100_000), "seed": SEED}
"""Each `FitOptions` value's range: `FitOptions.check` and `engine adapt`'s flags of the same names read these."""


@dataclass(frozen=True)
class FitOptions:
    holdout: float = 0.2        # share of the images/documents held out for early stopping
    reg: float = 1.0            # weight of ||W - I||² (Frobenius), per side
    temperature: float = 0.05   # InfoNCE temperature on cosine similarities
    lr: float = 1e-3
    epochs: int = 300           # most full-batch steps
    patience: int = 30          # steps without a better held-out loss before stopping
    seed: int = 0
    form: str = "auto"          # auto: conse-neighbours for text,image pairs over conse, else linear

    def check(self) -> "FitOptions":
        for name, declared in RANGES.items():
            declared.check(name, getattr(self, name), text=False)
        if self.form not in FORMS:
            raise EngineError(f"{opt('form')} must be one of {', '.join(FORMS)}, not {self.form!r}")
        return self


def split_groups(right: list[str], holdout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Pair positions (fit, held out), split by image/document so no held-out one is ever fitted."""
    groups = sorted(set(right))
    rng = np.random.default_rng(seed)
    n_out = max(1, int(round(len(groups) * holdout)))
    out = set(rng.choice(len(groups), n_out, replace=False).tolist())
    held = {groups[i] for i in out}
    is_out = np.array([r in held for r in right])
    return np.flatnonzero(~is_out), np.flatnonzero(is_out)


def fit_maps(left: np.ndarray, right: np.ndarray, right_ids: list[str], shared: bool,
             options: FitOptions = FitOptions()) -> tuple[np.ndarray, np.ndarray, dict]:
    """(W_left, W_right, report) from embeddings of the pairs (rows aligned; `right_ids` group the right side)."""
    import torch
    options.check()
    torch.manual_seed(options.seed)
    fit, held = split_groups(right_ids, options.holdout, options.seed)
    d = left.shape[1]
    eye = torch.eye(d)
    wl = torch.nn.Parameter(eye.clone())
    wr = wl if shared else torch.nn.Parameter(eye.clone())
    params = [wl] if shared else [wl, wr]
    opt_ = torch.optim.Adam(params, lr=options.lr)

    def batch(rows: np.ndarray):
        ids = [right_ids[i] for i in rows]
        uniq = sorted(set(ids))
        first = {u: int(rows[ids.index(u)]) for u in uniq}
        target = torch.tensor([uniq.index(i) for i in ids])
        return (torch.from_numpy(left[rows]), torch.from_numpy(right[[first[u] for u in uniq]]), target)

    def loss_of(a, b, target):
        a = torch.nn.functional.normalize(a @ wl, dim=1)
        b = torch.nn.functional.normalize(b @ wr, dim=1)
        logits = a @ b.T / options.temperature
        return torch.nn.functional.cross_entropy(logits, target), logits

    fit_b, held_b = batch(fit), batch(held)
    with torch.no_grad():
        h0 = loss_of(*held_b)[0].item()
    best, best_state, since, step = h0, [eye.clone(), eye.clone()], 0, 0
    for step in range(1, options.epochs + 1):
        opt_.zero_grad()
        loss, _ = loss_of(*fit_b)
        penalty = sum(((w - eye) ** 2).sum() for w in params)
        (loss + options.reg * penalty / d).backward()
        opt_.step()
        with torch.no_grad():
            h, _ = loss_of(*held_b)
        if h.item() < best - 1e-5:
            best, since = h.item(), 0
            best_state = [w.detach().clone() for w in (wl, wr)]
        else:
            since += 1
            if since >= options.patience:
                break
    with torch.no_grad():
        wl.copy_(best_state[0])
        if not shared:
            wr.copy_(best_state[1])
        h1, logits = loss_of(*held_b)
        r1 = float((logits.argmax(1) == held_b[2]).float().mean())
    report = {"pairs_fitted": int(len(fit)), "pairs_held_out": int(len(held)), "steps": step,
              "held_out_loss_before": h0, "held_out_loss_after": float(h1.item()), "held_out_r@1": r1,
              **asdict(options)}
    return best_state[0].numpy(), best_state[1].numpy(), report


def adapt(base: str, pairs_path: str | Path, out: str | Path, options: FitOptions = FitOptions(),
          force: bool = False) -> dict:
    """`engine adapt`: embed the pairs with `base`, fit, write DIR (adapter.npz + adapter.json) atomically."""
    from engine.core.ranking.adapters.pairs import read_pairs
    from engine.core.encoders.registry import entry_for, load_encoder
    from engine.io.atomic import atomic_path, write_json
    options.check()
    entry, _ = entry_for(base)
    out = Path(out)
    if (out / CONFIG_FILE).exists() and not force:
        raise EngineError(f"{out} already holds an adapter; give {opt('force')} to replace it")
    pairs = read_pairs(pairs_path)
    form = resolve_form(options.form, entry.prefix, pairs.kind)
    encoder = load_encoder(base)
    if pairs.kind not in encoder.modalities or "text" not in encoder.modalities:
        raise EngineError(f"{pairs.path}: {pairs.kind} pairs need a text ↔ {pairs.kind} encoder; {encoder.spec} "
                          f"embeds {', '.join(sorted(encoder.modalities))}")
    if form == NEIGHBOURS:
        return adapt_neighbours(encoder, pairs, out, options.seed)
    left = encoder.encode_texts(pairs.left)
    if pairs.kind == "image":
        uniq = sorted(set(pairs.right))
        res = encoder.encode_images(uniq)
        if res.failed:
            pos, reason = res.failed[0]
            raise EngineError(f"{pairs.path}: image {uniq[pos]}: {reason}")
        by = dict(zip(uniq, res.embeddings))
        right = np.stack([by[r] for r in pairs.right])
    else:
        right = encoder.encode_texts(pairs.right)
    wl, wr, report = fit_maps(left, right, pairs.right, pairs.kind == "text", options)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / ADAPTER_FILE) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, text=wl.astype(np.float32), other=wr.astype(np.float32))
    config = {"base": encoder.spec, "kind": pairs.kind, "dim": int(encoder.dim), "pairs": str(pairs.path),
              "report": report}
    write_json(out / CONFIG_FILE, config)
    return config


def resolve_form(form: str, base_prefix: str, kind: str) -> str:
    """The form `--form` names (auto: conse-neighbours for text,image pairs over conse, else linear)."""
    fits = kind == "image" and base_prefix == "conse"
    if form == "auto":
        return NEIGHBOURS if fits else "linear"
    if form == NEIGHBOURS and not fits:
        raise EngineError(f"{opt('form')} {NEIGHBOURS} needs text,image pairs and --base conse (it reads conse's "
                          f"class probabilities and EfficientNet features); use {opt('form')} linear")
    return form


def adapt_neighbours(encoder, pairs, out: Path, seed: int) -> dict:
    """The conse-neighbours form: captions and photos embedded once (10 views each photo), knobs by 5-fold
    cross-validation by photo, written as version 2 of DIR."""
    from engine.core.ranking.adapters.neighbours import fit_neighbours
    from engine.core.encoders import neighbours as nb
    from engine.io.atomic import atomic_path, write_json
    caps = encoder.encode_texts(pairs.left)
    uniq = sorted(set(pairs.right))
    conse, pooled = embed_views(encoder, uniq, pairs.path)
    row = {r: i for i, r in enumerate(uniq)}
    owner = np.array([row[r] for r in pairs.right])
    form, report = fit_neighbours(caps, owner, conse, pooled, seed)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / ADAPTER_FILE) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **form.arrays())
    config = {"version": nb.VERSION, "form": nb.FORM, "base": encoder.spec, "kind": "image",
              "dim": int(encoder.dim), "pairs": str(pairs.path), "params": form.params(), "report": report}
    write_json(out / CONFIG_FILE, config)
    return config


def embed_views(encoder, paths: list[str], source: Path) -> tuple[np.ndarray, np.ndarray]:
    """(ConSE vectors over all classes, pooled features) of image files, each averaged over the 10 views; an
    unreadable image is named with `source` (the pairs file)."""
    from dataclasses import replace

    from engine.core.encoders import neighbours as nb
    from engine.core.encoders.conse import N_CLASSES, class_embeddings
    from engine.core.encoders.efficientnet import POOLED_DIM
    from engine.core.encoders.adapted import effnet_forward
    forward = effnet_forward(encoder)
    # probabilities and pooled features side by side in one row (encode_image_batch scales a row as one; both
    # are used only after their own normalisation)
    views = replace(encoder, dim=N_CLASSES + POOLED_DIM, preprocess=nb.views_transform(),
                    image_batch_fn=lambda b: np.concatenate(nb.view_features(b, forward), axis=1))
    res = views.encode_images(paths, batch_size=8)
    if res.failed:
        pos, reason = res.failed[0]
        raise EngineError(f"{source}: image {paths[pos]}: {reason}")
    probs, pooled = res.embeddings[:, :N_CLASSES], res.embeddings[:, N_CLASSES:]
    return probs @ class_embeddings(encoder), pooled
