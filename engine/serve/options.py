"""What `engine serve` can be told, with its defaults in one place (the CLI and `create_app` read them)."""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from engine.core.collection import DEFAULT_ROOT
from engine.core.remote import API_KEY_ENV
from engine.errors import EngineError, opt


@dataclass(frozen=True)
class ServeOptions:
    root: Path = DEFAULT_ROOT                   # folder of collections
    collections: tuple[str, ...] | None = None  # serve only these (None: every collection under root, new ones too)
    host: str = "127.0.0.1"                     # loopback unless told; elsewhere needs api_key
    port: int = 8080
    api_key: str | None = None                  # every data request must carry it (header or ?api_key=)
    max_k: int = 1000                           # results per query
    max_query_chars: int = 1000                 # a text query longer than this is refused, not truncated
    max_batch_queries: int = 256                # queries in one /search/batch request
    max_body_bytes: int = 8 << 20               # a JSON request body (a batch of vectors fits)
    max_upload_bytes: int = 16 << 20            # an uploaded image file
    max_image_pixels: int = 40_000_000          # width × height of an uploaded image (decompression bombs)
    timeout_s: float = 30.0                     # per request; then 503 and the server goes on
    batch_window_ms: float = 2.0                # how long the text micro-batcher waits for company
    max_batch: int = 32                         # texts encoded in one forward pass
    batch_workers: int = 2                      # batches encoded and searched at once (benchmarks/peers.py)
    thumb_size: int = 256                       # longest side of a thumbnail, pixels
    rerank: tuple = ()                          # reranker specs requests may ask for ("rerank": true: the first),
                                                # parsed once by `checked` (RerankerSpec)
    pipelines: tuple = ()                        # (name, parsed pipeline) pairs served by POST /search {"pipeline"}

    def checked(self) -> ServeOptions:
        """The options with the API key taken from the environment when not given; binding beyond loopback
        without a key, or nonsense bounds, is an error."""
        key = self.api_key or os.environ.get(API_KEY_ENV) or None
        if not is_loopback(self.host) and not key:
            raise EngineError(f"serving on {self.host} (not loopback) needs an API key: give {opt('api_key')} "
                              f"KEY or set {API_KEY_ENV}")
        for name, (lo, hi) in RANGES.items():
            in_range(name, getattr(self, name), lo, hi)
        if self.timeout_s == 0:
            raise EngineError(f"{opt('timeout_s')} must be over 0 (got 0)")
        from dataclasses import replace

        from engine.serve.rerank import check_allowed
        return replace(self, api_key=key, rerank=check_allowed(self.rerank))


RANGES: dict[str, tuple[float, float]] = {
    "port": (1, 65535), "max_k": (1, 100_000), "max_query_chars": (1, 1_000_000), "max_batch_queries": (1, 10_000),
    "max_body_bytes": (1, 1 << 30), "max_upload_bytes": (1, 1 << 30), "max_image_pixels": (1, 1_000_000_000),
    "timeout_s": (0, 3600), "batch_window_ms": (0, 1000), "max_batch": (1, 1024), "batch_workers": (1, 64),
    "thumb_size": (16, 1024),
}
"""Each numeric option's range, both ends included (`timeout_s` must also be over 0): out of range is refused."""


def in_range(name: str, value: float, lo: float, hi: float) -> float:
    """`value` when it is a finite number within [lo, hi] (NaN fails every comparison: refused too)."""
    if not lo <= value <= hi:
        raise EngineError(f"{opt(name)} must be between {lo:g} and {hi:g} (got {value:g})")
    return value


def upload_bytes(mib: float) -> int:
    """`--max-upload-mb` in bytes, refused out of range before it is converted (NaN cannot become an int)."""
    return int(in_range("max_upload_mb", mib, 0.001, 1024) * 2**20)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost` are loopback; anything else (0.0.0.0 included) is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
