"""JSON in and out with the checks `json` leaves to us.

In: nesting depth and number length bounded before the parser recurses or Python builds a 5000-digit
integer (`engine.io.limits`), NaN/Infinity refused (not JSON; they would become the text "nan"), a key
repeated in one object refused (the standard leaves it undefined; `json` keeps the last silently), and a
lone surrogate escape (`"\ud800"`) refused (it is no character: writing it as UTF-8 later fails).
Out: NaN and infinities become null, so what we print is always valid JSON.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from engine.errors import EngineError, where
from engine.io.limits import limit, over

_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class InvalidJSON(EngineError):
    """Text that is not JSON at all (a syntax error), as opposed to JSON past one of our limits."""


class _Bad(Exception):
    def __init__(self, message: str, error: EngineError | None = None) -> None:
        super().__init__(message)
        self.message, self.error = message, error


def nesting_depth(text: str) -> int:
    """Deepest bracket nesting outside strings: vectorized, so a large file costs milliseconds."""
    bare = _STRING.sub('""', text).encode("utf-8", "ignore")
    if not bare:
        return 0
    b = np.frombuffer(bare, dtype=np.uint8)
    step = ((b == 91) | (b == 123)).astype(np.int32) - ((b == 93) | (b == 125)).astype(np.int32)
    return int(np.cumsum(step).max(initial=0))


def _number(text: str, kind: type) -> Any:
    if len(text) > limit("max_number_chars"):
        raise _Bad("", over("max_number_chars", f"a number of {len(text)} characters ({text[:12]}…)"))
    value = kind(text)
    if kind is float and not math.isfinite(value):
        raise _Bad(f"number {text[:20]} is out of range")
    return value


def _constant(name: str) -> Any:
    raise _Bad(f"{name} is not valid JSON (write null, or a number)")


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Bad(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def parse_json(text: str, origin: object, line: int | None = None) -> Any:
    """`text` parsed with the checks above; any fault is an EngineError naming `origin` (and `line`)."""
    depth = nesting_depth(text)
    if depth > limit("max_json_depth"):
        raise over("max_json_depth", f"JSON nested {depth:,} levels deep", where(origin, line))
    try:
        value = json.loads(text, parse_int=lambda s: _number(s, int), parse_float=lambda s: _number(s, float),
                          parse_constant=_constant, object_pairs_hook=_pairs)
        if _SURROGATE_ESCAPE.search(text):  # rare: only then walk the strings
            _no_lone_surrogates(value)
        return value
    except json.JSONDecodeError as exc:
        at = line if line is not None else exc.lineno
        raise InvalidJSON(f"{where(origin, at)}: invalid JSON ({exc.msg})") from None
    except _Bad as exc:
        if exc.error is not None:
            exc.error.message = f"{where(origin, line)}: {exc.error.message}"
            raise exc.error from None
        raise EngineError(f"{where(origin, line)}: {exc.message}") from None
    except RecursionError:
        raise over("max_json_depth", "JSON nested too deeply to parse", where(origin, line)) from None


def _no_lone_surrogates(obj: Any) -> None:
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _Bad(f"string {item[:20]!r} holds a lone surrogate (\\u{ord(item[exc.start]):04x}), "
                           "which is no character") from None


def finite(obj: Any) -> Any:
    """`obj` with NaN and infinite floats replaced by None, for output that must be valid JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, np.floating):
        return finite(float(obj))
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """`json.dumps` that never writes NaN or Infinity (they become null)."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)


def check_finite(obj: Any, what: str, path: str = "") -> None:
    """EngineError naming the key of the first NaN or infinity in `obj` (dicts, lists, numbers): what a store
    writes must read back (`json` would write NaN, which no JSON reader, ours included, accepts)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            check_finite(value, what, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, (list, tuple)):
        for n, value in enumerate(obj):
            check_finite(value, what, f"{path}[{n}]")
    elif isinstance(obj, (float, np.floating)) and not math.isfinite(obj):
        raise EngineError(f"{what}: refusing to write {obj} at {path or 'the top'} (not a finite number); "
                          "nothing was written")


def print_json(obj: object) -> None:
    """`obj` on standard output as valid JSON always: NaN and infinities print as null."""
    print(dumps(obj, indent=2, ensure_ascii=False, default=str), flush=True)
