"""The Million LLMs discovery set: questions answered by every LLM, with each answer's next-token log-probabilities.

One row per (question, LLM answer): query id, query text, LLM id, answer, per-token log-probabilities (a JSON
list in JSONL and parquet; a JSON list or numbers separated by spaces or commas in TSV). `--discovery-columns`
maps other column names (`query_id=qid,logprobs=token_logprobs`). The file is streamed: what is kept is one
float per (question, candidate LLM), about 68 MB at 15,000 × 1,131, never the rows.

What is derived (the best-known system's signals, as arrays stored with the training side):

- soft labels: each answer's mean token log-probability (the LLM's confidence), z-scored within its question
  so questions of different difficulty weigh alike; NaN where an LLM did not answer;
- per-LLM statistics: mean and std of its answers' mean log-probability, its mean answer length in tokens, and
  the share of questions it answered.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from engine.errors import EngineError, missing_extra, opt, where
from engine.io.tables import check_file, id_text, iter_rows

FIELDS = ("query_id", "query_text", "llm_id", "answer", "logprobs")
"""What each row holds, under these column names unless `--discovery-columns` maps them."""
STATS = ("mean_logprob", "std_logprob", "mean_tokens", "answered")
"""Per-LLM statistics, in column order of `DiscoverySet.llm_stats`."""
SUFFIXES = (".jsonl", ".ndjson", ".tsv", ".parquet")


@dataclass
class DiscoverySet:
    """Derived from a discovery file, aligned with the candidate LLMs."""
    query_ids: list[str]
    texts: list[str]
    soft: np.ndarray
    """questions × candidates: the answer's mean token log-probability z-scored within the question (NaN: none)."""
    llm_stats: np.ndarray
    """candidates × len(STATS) (NaN where an LLM answered nothing)."""
    rows: int = 0
    unknown_llms: int = 0


def parse_columns(spec: str | None) -> dict[str, str]:
    """`--discovery-columns field=column,…` → field → column name (the fields not given keep their names)."""
    names = {f: f for f in FIELDS}
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        field, eq, column = part.partition("=")
        field, column = field.strip(), column.strip()
        if not eq or field not in FIELDS or not column:
            raise EngineError(f"{opt('discovery_columns')} {spec!r}: write field=column pairs separated by commas, "
                              f"fields among {', '.join(FIELDS)}")
        names[field] = column
    return names


def check_discovery(path: str | Path, columns: str | None) -> Path:
    """The file exists, its format is known and the column map parses (before any model loads)."""
    path = Path(path)
    check_file(path, "a discovery file (JSONL, TSV or parquet)")
    if path.suffix.lower() not in SUFFIXES:
        raise EngineError(f"{path}: a discovery file is JSONL, TSV or parquet ({', '.join(SUFFIXES)}), not "
                          f"{path.suffix or 'a file without a suffix'}")
    parse_columns(columns)
    return path


def _parquet_rows(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise missing_extra("pyarrow", "parquet") from None
    try:
        source = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow's errors have no common base worth naming
        raise EngineError(f"{path}: not a readable parquet file ({str(exc).splitlines()[0][:120]})") from None
    n = 0
    for batch in source.iter_batches(batch_size=8192):
        for row in batch.to_pylist():
            n += 1
            yield n, row


def _rows(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    if path.suffix.lower() == ".parquet":
        yield from _parquet_rows(path)
        return
    for row in iter_rows(path):
        yield row.line, row.data


def _logprobs(value: Any, origin: Path, line: int, column: str) -> list[float]:
    """A row's token log-probabilities: a list of numbers (JSON text, or numbers split by spaces or commas)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise EngineError(f"{where(origin, line)}: column {column!r} is not a JSON list of numbers") from None
        else:
            value = [v for v in text.replace(",", " ").split() if v]
    if not isinstance(value, (list, tuple)):
        raise EngineError(f"{where(origin, line)}: column {column!r} must list the answer's token log-probabilities")
    out = []
    for v in value:
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise EngineError(f"{where(origin, line)}: column {column!r} holds {str(v)[:20]!r}, not a number") from None
        if not math.isfinite(x) or x > 1e-6:
            raise EngineError(f"{where(origin, line)}: column {column!r} holds {x}, not a log-probability (≤ 0)")
        out.append(x)
    return out


def read_discovery(path: str | Path, candidates: Sequence[str], columns: str | None = None) -> DiscoverySet:
    """Stream the discovery file into soft labels and per-LLM statistics for `candidates` (other LLMs' rows are
    counted and skipped; a question answered twice by one LLM keeps the later answer)."""
    path = check_discovery(path, columns)
    names = parse_columns(columns)
    col = {c: j for j, c in enumerate(candidates)}
    m = len(candidates)
    qrow: dict[str, int] = {}
    texts: list[str] = []
    conf: list[np.ndarray] = []
    tokens = np.zeros(m)
    rows = unknown = 0
    for line, data in _rows(path):
        missing = [names[f] for f in ("query_id", "llm_id", "logprobs") if names[f] not in data]
        if missing:
            raise EngineError(f"{where(path, line)}: no column {missing[0]!r} (columns: {', '.join(map(str, data))});"
                              f" map it with {opt('discovery_columns')} field=column")
        rows += 1
        llm = id_text(data[names["llm_id"]], path, line, "LLM id")
        if llm not in col:
            unknown += 1
            continue
        qid = id_text(data[names["query_id"]], path, line, "query id")
        lp = _logprobs(data[names["logprobs"]], path, line, names["logprobs"])
        if qid not in qrow:
            qrow[qid] = len(texts)
            texts.append(str(data.get(names["query_text"]) or ""))
            conf.append(np.full(m, np.nan, dtype=np.float32))
        j = col[llm]
        conf[qrow[qid]][j] = float(np.mean(lp)) if lp else np.nan
        tokens[j] += len(lp)
    if not conf:
        raise EngineError(f"{path}: no row answers a question with one of the {m} candidate LLMs "
                          f"({rows} rows, {unknown} of other LLMs); do the LLM ids match?")
    mat = np.stack(conf)
    return DiscoverySet(list(qrow), texts, within_question_z(mat), llm_statistics(mat, tokens), rows, unknown)


def within_question_z(conf: np.ndarray) -> np.ndarray:
    """Each question's confidences z-scored over the LLMs that answered it (NaN stays NaN)."""
    ok = np.isfinite(conf)
    count = np.maximum(ok.sum(axis=1, keepdims=True), 1)
    mean = np.where(ok, conf, 0.0).sum(axis=1, keepdims=True) / count
    std = np.sqrt(np.where(ok, (conf - mean) ** 2, 0.0).sum(axis=1, keepdims=True) / count)
    return np.where(ok, (conf - mean) / np.where(std > 1e-12, std, 1.0), np.nan).astype(np.float32)


def llm_statistics(conf: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """candidates × STATS from the raw confidences (questions × candidates) and the token counts."""
    ok = np.isfinite(conf)
    answered = ok.sum(axis=0)
    safe = np.maximum(answered, 1)
    mean = np.where(ok, conf, 0.0).sum(axis=0) / safe
    std = np.sqrt(np.where(ok, (conf - mean) ** 2, 0.0).sum(axis=0) / safe)
    stats = np.stack([mean, std, tokens / safe, answered / len(conf)], axis=1)
    stats[answered == 0, :3] = np.nan
    return stats
