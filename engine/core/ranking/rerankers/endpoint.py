"""A model served elsewhere behind an OpenAI-compatible API (vLLM, llama.cpp's server, TGI …), so a 7B reranker
runs on a GPU server and the engine only sends prompts: `llm:http://HOST:PORT/v1#MODEL` reads the "yes"/"no"
log-probabilities of the next token, `llm-list:http://…#MODEL` reads a generated ranking.

Requests are bounded: a few in flight at once (the server batches them), a deadline on each whole request
(connecting, sending and every byte of the answer: a server that trickles its answer is cut off at the
deadline, not waited on per read), and any failure, a truncated or garbled answer included, is one line
naming the server.
"""
from __future__ import annotations

import http.client
import json
import math
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence
from urllib.parse import urlsplit

from engine.errors import EngineError

TOP_LOGPROBS = 20   # the most OpenAI's API (and vLLM's default) returns per position
IN_FLIGHT = 8       # concurrent requests per scoring call
DEADLINE = 120.0    # seconds per whole request, not per socket read
MAX_ANSWER_BYTES = 64 << 20   # an answer is a few kB; a server streaming more is refused, not held in memory


def is_served(arg: str) -> bool:
    """A reranker argument that is a server's URL (`http://HOST:PORT/v1#MODEL`), not a model to load."""
    return arg.lower().startswith(("http://", "https://"))


@dataclass(frozen=True)
class Endpoint:
    base: str    # http://HOST:PORT/v1
    model: str

    @classmethod
    def parse(cls, arg: str) -> "Endpoint":
        url, _, model = arg.partition("#")
        return cls(url.rstrip("/"), model.strip())

    def post(self, path: str, body: dict) -> dict:
        """POST JSON, the answer as a dict; any failure one line naming the server."""
        where = self.base + path
        status, raw = self._exchange(where, json.dumps({"model": self.model, **body}).encode())
        if status >= 400:
            detail = raw.decode("utf-8", "replace")[:200]
            raise EngineError(f"reranker server {where} answered {status}: {' '.join(detail.split())}")
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            raise EngineError(f"reranker server {where} answered {status} with a body that is not JSON: "
                              f"{exc}") from None

    def _exchange(self, where: str, data: bytes) -> tuple[int, bytes]:
        """(status, body) of one POST, all of it within DEADLINE seconds: a watchdog shuts the socket at the
        deadline, so a server that sends one byte at a time cannot hold the request open past it."""
        url = urlsplit(where)
        kind = http.client.HTTPSConnection if url.scheme.lower() == "https" else http.client.HTTPConnection
        try:
            conn = kind(url.hostname or "", url.port, timeout=DEADLINE)
        except (ValueError, http.client.HTTPException) as exc:
            raise EngineError(f"reranker server {where} is not a server address: {exc}") from None
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            if conn.sock is not None:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        watchdog = threading.Timer(DEADLINE, expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.connect()
            if expired.is_set():
                raise TimeoutError
            target = url.path + (f"?{url.query}" if url.query else "")
            conn.request("POST", target or "/", body=data, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.length is not None and response.length > MAX_ANSWER_BYTES:
                raise EngineError(f"reranker server {where} announced an answer of {response.length:,} bytes, over "
                                  f"the {MAX_ANSWER_BYTES >> 20} MiB an answer may take")
            # a known length is read whole (a short one is an IncompleteRead); an unknown one up to the cap
            raw = response.read() if response.length is not None else response.read(MAX_ANSWER_BYTES + 1)
            if len(raw) > MAX_ANSWER_BYTES:
                raise EngineError(f"reranker server {where} answered more than the {MAX_ANSWER_BYTES >> 20} MiB "
                                  "an answer may take")
            if expired.is_set():
                raise TimeoutError
            return response.status, raw
        except (http.client.HTTPException, OSError, ValueError) as exc:
            if expired.is_set() or isinstance(exc, TimeoutError):
                raise EngineError(f"reranker server {where} gave no whole answer within {DEADLINE:g} s") from None
            why = exc.strerror or str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
            raise EngineError(f"reranker server {where} could not be reached or read: {why}") from None
        finally:
            watchdog.cancel()
            conn.close()

    def yes_no_completion(self, prompt: str) -> float:
        """Log-odds of "yes" over "no" as the next token of a text prompt (`/completions`); NaN when the
        answer holds no readable top logprobs (`log_odds`)."""
        out = self.post("/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0,
                                         "logprobs": TOP_LOGPROBS})
        try:
            top = out["choices"][0]["logprobs"]["top_logprobs"][0]
            return log_odds(top.items())
        except (KeyError, IndexError, TypeError, AttributeError):
            return math.nan

    def yes_no_chat(self, messages: list[dict]) -> float:
        """Log-odds of "yes" over "no" as the first answer token of a chat (`/chat/completions`); NaN when the
        answer holds no readable top logprobs."""
        out = self.post("/chat/completions", {"messages": messages, "max_tokens": 1, "temperature": 0,
                                              "logprobs": True, "top_logprobs": TOP_LOGPROBS})
        try:
            top = out["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            return log_odds([(t["token"], t["logprob"]) for t in top])
        except (KeyError, IndexError, TypeError, AttributeError):
            return math.nan

    def chat(self, messages: list[dict], max_tokens: int) -> str:
        """The assistant's answer text (greedy)."""
        out = self.post("/chat/completions", {"messages": messages, "max_tokens": max_tokens, "temperature": 0})
        try:
            return str(out["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            return ""  # an answer without text is an unparseable window, counted by the caller

    def each(self, fn, items: Sequence, in_flight: int = IN_FLIGHT) -> list:
        """`fn` over the items, at most `in_flight` requests at once, results in order; the first failure is
        raised once the requests already in flight end (those not yet sent are not sent)."""
        if len(items) <= 1 or in_flight <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(in_flight, len(items))) as pool:
            futures = [pool.submit(fn, x) for x in items]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise


UNREADABLE = ("the answers held no readable \"yes\"/\"no\" logprobs; serve a model that returns logprobs "
              "(vLLM, llama.cpp's server)")
"""What an unreadable served pointwise answer lacks, and the fix (said when none of a query's could be read)."""


def logprob(value: object) -> float | None:
    """A log-probability as a float; None for what is not one (not a number, NaN, infinite, positive)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    if not math.isfinite(value) or value > 1e-6:
        return None
    return value


def log_odds(top) -> float:
    """log P("yes") − log P("no") from (token, logprob) pairs; a token's spellings (" yes", "yes") summed. One
    missing from the top list is taken at the lowest logprob listed (a bound: it is at most that). NaN when
    the answer cannot be read: a logprob that is not a number, NaN or infinite, a positive "logprob", or
    neither "yes" nor "no" listed."""
    found: dict[str, list[float]] = {"yes": [], "no": []}
    listed = []
    for token, value in top:
        lp = logprob(value)
        if lp is None:
            return math.nan
        listed.append(lp)
        word = str(token).strip()
        if word in found:
            found[word].append(lp)
    if not found["yes"] and not found["no"]:
        return math.nan
    floor = min(listed)

    def total(lps: list[float]) -> float:
        if not lps:
            return floor
        m = max(lps)
        return m + math.log(sum(math.exp(x - m) for x in lps))

    return total(found["yes"]) - total(found["no"])
