"""Limits on what one input may make the engine do, checked where the input enters.

Each limit is a named constant with a reason; a user who needs more sets the environment variable it
names (`ENGINE_MAX_IMAGE_PIXELS=400000000 engine build …`). Past a limit the input is refused with one
line naming the file, the value found, the limit and that variable: a tiny hostile file (a 60000×1 PNG,
a zip bomb, a grade of 1e300) must never become gigabytes of memory or hours of work.
`docs/limits.md` is `python -m engine.io.limits` (tests/test_docs.py says when it is stale).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from engine.errors import EngineError


@dataclass(frozen=True)
class Limit:
    name: str         # lower-case; the variable is ENGINE_<NAME>
    default: float
    unit: str
    why: str

    @property
    def env(self) -> str:
        return f"ENGINE_{self.name.upper()}"

    def value(self) -> float:
        """The default, or the environment's value (read on every call, so tests and users can change it)."""
        raw = os.environ.get(self.env)
        if raw is None or not raw.strip():
            return self.default
        try:
            v = float(raw)
        except ValueError:
            raise EngineError(f"{self.env}={raw!r} is not a number") from None
        if not v > 0:
            raise EngineError(f"{self.env}={raw!r} must be positive")
        return v


LIMITS: dict[str, Limit] = {lim.name: lim for lim in (
    Limit("max_image_pixels", 100_000_000, "pixels",
          "decoded images above this are refused (JPEGs are first decoded smaller with a draft); 100 MP is "
          "~300 MB of RGB"),
    Limit("max_image_aspect", 50, "long side / short side",
          "a 60000×1 image, resized by its short side to the model's input, would be billions of pixels"),
    Limit("max_zip_member_bytes", 1 << 30, "bytes",
          "uncompressed size of one member of a zip we read (an EVENTA submission is a few MB)"),
    Limit("max_zip_ratio", 1000, "uncompressed / compressed",
          "zip bombs compress 1000-fold and more; real CSVs about 3–10-fold"),
    Limit("max_json_depth", 100, "levels of nesting",
          "deeper JSON overflows the parser's stack; real files nest a few levels"),
    Limit("max_filter_depth", 64, "levels of nesting",
          "a --where filter's 'not's and brackets; each level is a step of the parser and of the evaluation, and "
          "real filters nest two or three"),
    Limit("max_number_chars", 100, "characters",
          "a number written with more digits is refused before Python turns it into an integer or float"),
    Limit("max_line_bytes", 16 << 20, "bytes",
          "one line of a text or table file (one row, one text); encoders read only its first few hundred "
          "tokens anyway"),
    Limit("max_query_chars", 20_000, "characters",
          "a query text is cut here (at a word) before BM25 and sentence pooling, with a warning: a caption is a "
          "few hundred words, and a 1 MB one kept `eventa submit` busy for minutes"),
    Limit("max_grade", 100, "absolute value",
          "a relevance grade; ndcg_exp's gain is 2^grade − 1, and a float holds 2^1023 at most"),
    Limit("max_score", 1e15, "absolute value",
          "a run's score: finite and small enough that its order survives printing at 6 decimals"),
)}


def limit(name: str) -> float:
    """The current value of the limit `name` (a key of `LIMITS`)."""
    return LIMITS[name].value()


def truncate_query(text: str) -> str:
    """`text` cut to `max_query_chars` at the last white space before the limit (see LIMITS)."""
    most = int(limit("max_query_chars"))
    if len(text) <= most:
        return text
    cut = text[:most]
    space = cut.rfind(" ")
    return cut[:space] if space > most // 2 else cut


def over(name: str, found: object, origin: object = "") -> EngineError:
    """The one-line error for an input past the limit `name`: what was found, the limit, how to raise it."""
    lim = LIMITS[name]
    value = lim.value()
    shown = f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"
    prefix = f"{origin}: " if origin not in ("", None) else ""
    return EngineError(f"{prefix}{found} is over the limit of {shown} {lim.unit} ({lim.name}; set {lim.env} "
                       "to raise it)")


def check(name: str, value: float, found: str, origin: object = "") -> None:
    """Raise `over(...)` when `value` exceeds the limit `name`."""
    if value > limit(name):
        raise over(name, found, origin)


def markdown() -> str:
    """The table docs/limits.md holds."""
    rows = ["| limit | default | unit | environment variable | why |", "|---|---|---|---|---|"]
    for lim in LIMITS.values():
        default = f"{int(lim.default):,}" if float(lim.default).is_integer() and lim.default < 1e15 \
            else f"{lim.default:g}"
        rows.append(f"| `{lim.name}` | {default} | {lim.unit} | `{lim.env}` | {lim.why} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown())
