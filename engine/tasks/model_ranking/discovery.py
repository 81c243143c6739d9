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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from engine.errors import EngineError, missing_extra, opt, where
from engine.io.tables import check_file, id_text, iter_rows
from engine.progress import warn

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
    """The file exists, its format is known, the column map parses and the first row (a parquet file's schema)
    has the columns it maps: before any model loads, so a file of the wrong shape is one line, not a line after
    the encoder has loaded."""
    path = Path(path)
    check_file(path, "a discovery file (JSONL, TSV or parquet)")
    if path.suffix.lower() not in SUFFIXES:
        raise EngineError(f"{path}: a discovery file is JSONL, TSV or parquet ({', '.join(SUFFIXES)}), not "
                          f"{path.suffix or 'a file without a suffix'}")
    names = parse_columns(columns)
    first = _first_columns(path)
    if first is not None:
        _check_columns(path, *first, names)
    return path


REQUIRED = ("query_id", "llm_id", "logprobs")
"""The fields every row must have (`query_text` and `answer` may be absent)."""


def _check_columns(path: Path, line: int, found: Sequence[Any], names: Mapping[str, str]) -> None:
    missing = [names[f] for f in REQUIRED if names[f] not in found]
    if missing:
        raise EngineError(f"{where(path, line)}: no column {missing[0]!r} (columns: {', '.join(map(str, found))});"
                          f" map it with {opt('discovery_columns')} field=column")


def _first_columns(path: Path) -> tuple[int, list[str]] | None:
    """(line, column names) of the file's first row (a parquet file's schema, line 1); None when it has none."""
    if path.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise missing_extra("pyarrow", "parquet") from None
        try:
            return 1, list(pq.ParquetFile(path).schema_arrow.names)
        except Exception as exc:  # pyarrow's errors have no common base worth naming
            raise EngineError(f"{path}: not a readable parquet file ({str(exc).splitlines()[0][:120]})") from None
    for row in iter_rows(path):
        return row.line, list(row.data)
    return None


LOGPROB_FLOOR = -1e4
"""Token log-probabilities below this are clipped to it, counted and said: a finite −1e300 is a probability no
model can emit (float64 ends near −745), and its mean would overflow the stored float32 into −inf, which reads as
"never answered". APIs mark excluded tokens with −9999, which stays as it is."""
BATCH_ROWS = 65536
"""Rows per batch of the vectorized reader (bounded memory whatever the file's size)."""


class _Irregular(Exception):
    """The vectorized reader met something only the row-by-row reader can name exactly (a line, a type)."""


class _Answers:
    """What is kept of the rows: per (question, candidate) the mean token log-probability (float32, NaN: no answer)
    and the row that gave it (int32; 0: none), per candidate the tokens; questions in order of first appearance."""

    def __init__(self, candidates: Sequence[str], path: Path):
        self.path, self.m = path, len(candidates)
        self.col = {c: j for j, c in enumerate(candidates)}
        self.qrow: dict[str, int] = {}
        self.texts: list[str] = []
        self.conf = np.full((1024, self.m), np.nan, np.float32)
        self.first = np.zeros((1024, self.m), np.int32)
        self.tokens = np.zeros(self.m)
        self.rows = self.unknown = self.clipped = 0
        self.clipped_at = 0

    def question(self, qid: str, text: Any) -> int:
        q = self.qrow.get(qid)
        if q is None:
            q = self.qrow[qid] = len(self.texts)
            self.texts.append(str(text or ""))
            if q == len(self.conf):  # doubling: the copies cost less than the parse
                self.conf = np.concatenate([self.conf, np.full_like(self.conf, np.nan)])
                self.first = np.concatenate([self.first, np.zeros_like(self.first)])
        return q

    def clip(self, values: np.ndarray, line: int) -> np.ndarray:
        low = values < LOGPROB_FLOOR
        if low.any():
            self.clipped += int(low.sum())
            self.clipped_at = self.clipped_at or line
            values = np.maximum(values, LOGPROB_FLOOR)
        return values

    def duplicate(self, q: int, j: int, line: int) -> EngineError:
        qid = next(k for k, v in self.qrow.items() if v == q)
        llm = next(k for k, v in self.col.items() if v == j)
        return EngineError(f"{where(self.path, line)}: question {qid!r} answered twice by LLM {llm!r} (first on "
                           f"{'line' if self.path.suffix.lower() != '.parquet' else 'row'} {self.first[q, j]}); "
                           "keep one answer per question and LLM")

    def result(self) -> DiscoverySet:
        if not self.texts:
            raise EngineError(f"{self.path}: no row answers a question with one of the {self.m} candidate LLMs "
                              f"({self.rows} rows, {self.unknown} of other LLMs); do the LLM ids match?")
        if self.clipped:
            warn(f"{where(self.path, self.clipped_at)}: {self.clipped} token log-probabilit"
                 f"{'y' if self.clipped == 1 else 'ies'} below {LOGPROB_FLOOR:g} (the first on this "
                 f"{'line' if self.path.suffix.lower() != '.parquet' else 'row'}) clipped to {LOGPROB_FLOOR:g}")
        mat = self.conf[:len(self.texts)]
        return DiscoverySet(list(self.qrow), self.texts, within_question_z(mat), llm_statistics(mat, self.tokens),
                            self.rows, self.unknown)


def _parquet_rows(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    n = 0
    for batch in _parquet_batches(path):
        for row in batch.to_pylist():
            n += 1
            yield n, row


def _parquet_batches(path: Path) -> Iterator[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise missing_extra("pyarrow", "parquet") from None
    try:
        source = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow's errors have no common base worth naming
        raise EngineError(f"{path}: not a readable parquet file ({str(exc).splitlines()[0][:120]})") from None
    yield from source.iter_batches(batch_size=BATCH_ROWS)


def _rows(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    if path.suffix.lower() == ".parquet":
        yield from _parquet_rows(path)
        return
    for row in iter_rows(path):
        yield row.line, row.data


def _logprobs(value: Any, origin: Path, line: int, column: str) -> np.ndarray:
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
    out = np.empty(len(value))
    for i, v in enumerate(value):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            raise EngineError(f"{where(origin, line)}: column {column!r} holds {str(v)[:20]!r}, not a number") from None
    bad = ~np.isfinite(out) | (out > 1e-6)
    if bad.any():
        raise EngineError(f"{where(origin, line)}: column {column!r} holds {out[bad][0]}, not a log-probability (≤ 0)")
    return out


def _read_rows(path: Path, names: Mapping[str, str], answers: _Answers) -> None:
    """Row by row (TSV, and any file the vectorized reader finds irregular): every error names its line."""
    for line, data in _rows(path):
        _check_columns(path, line, list(data), names)
        answers.rows += 1
        llm = id_text(data[names["llm_id"]], path, line, "LLM id")
        if llm not in answers.col:
            answers.unknown += 1
            continue
        qid = id_text(data[names["query_id"]], path, line, "query id")
        lp = answers.clip(_logprobs(data[names["logprobs"]], path, line, names["logprobs"]), line)
        q, j = answers.question(qid, data.get(names["query_text"])), answers.col[llm]
        if answers.first[q, j]:
            raise answers.duplicate(q, j, line)
        answers.first[q, j] = line
        answers.conf[q, j] = float(lp.mean()) if len(lp) else np.nan
        answers.tokens[j] += len(lp)


def _ids(column: Any) -> Any:
    """An id column as trimmed text (strings or integers, as `id_text` takes them); anything else is irregular."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_integer(column.type):
        column = pc.cast(column, pa.string())
    elif pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.string())
    elif not pa.types.is_string(column.type):
        raise _Irregular
    return pc.utf8_trim_whitespace(column)


def _absorb(batch: Any, names: Mapping[str, str], answers: _Answers, candidates: Any) -> None:
    """One batch of rows into `answers` without a Python object per row: ids matched by pyarrow, each answer's
    tokens summed by one reduceat over the batch's flattened log-probabilities."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if any(names[f] not in batch.schema.names for f in REQUIRED):
        raise _Irregular
    base = answers.rows
    answers.rows += batch.num_rows
    llm = _ids(batch.column(names["llm_id"]))
    j_all = pc.index_in(llm, value_set=candidates)
    known = pc.is_valid(j_all)
    answers.unknown += batch.num_rows - pc.sum(known).as_py() if batch.num_rows else 0
    if not pc.any(known).as_py():
        return
    rows = np.flatnonzero(known.to_numpy(zero_copy_only=False))
    j = j_all.filter(known).to_numpy().astype(np.int64)
    qids = _ids(batch.column(names["query_id"]).filter(known))
    lp = batch.column(names["logprobs"]).filter(known)
    if qids.null_count or lp.null_count or not (pa.types.is_list(lp.type) or pa.types.is_large_list(lp.type)):
        raise _Irregular
    if not (pa.types.is_floating(lp.type.value_type) or pa.types.is_integer(lp.type.value_type)):
        raise _Irregular
    flat = pc.list_flatten(lp)
    if flat.null_count:
        raise _Irregular
    values = flat.to_numpy(zero_copy_only=False).astype(np.float64)
    if not np.isfinite(values).all() or (values > 1e-6).any():
        raise _Irregular
    lengths = pc.list_value_length(lp).to_numpy(zero_copy_only=False).astype(np.int64)
    low = np.flatnonzero(values < LOGPROB_FLOOR)
    if len(low):  # the row of the first clipped token: the one whose tokens end after it
        values = answers.clip(values, base + 1 + int(rows[np.searchsorted(np.cumsum(lengths), low[0], "right")]))
    sums = np.zeros(len(lengths))
    has = lengths > 0
    if has.any():
        sums[has] = np.add.reduceat(values, (np.cumsum(lengths) - lengths)[has]) if len(values) else 0.0
    mean = np.where(has, sums / np.maximum(lengths, 1), np.nan)
    encoded = qids.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    uniq, first_at = np.unique(codes, return_index=True)
    texts = batch.column(names["query_text"]).filter(known) if names["query_text"] in batch.schema.names else None
    dictionary = encoded.dictionary.to_pylist()
    q_of = np.empty(len(dictionary), np.int64)
    for code, at in zip(uniq.tolist(), first_at.tolist()):
        q_of[code] = answers.question(dictionary[code], texts[at].as_py() if texts is not None else "")
    q = q_of[codes]
    key = q * answers.m + j
    if len(np.unique(key)) < len(key) or answers.first[q, j].any():
        raise _Irregular  # an answer given twice: the row reader names both lines
    answers.first[q, j] = base + 1 + rows
    answers.conf[q, j] = mean
    answers.tokens += np.bincount(j, weights=lengths, minlength=answers.m)


def _batches(path: Path, logprobs: str) -> Iterator[tuple[Any, int, int]]:
    """(record batch, bytes or rows read so far, their total) of a JSONL or parquet file (JSONL's `logprobs`
    column read as lists of doubles whatever the first block holds: `[-1, -2]` would otherwise make it integers
    and a later `-0.5` irregular)."""
    if path.suffix.lower() == ".parquet":
        done = 0
        batches = _parquet_batches(path)
        import pyarrow.parquet as pq
        total = pq.ParquetFile(path).metadata.num_rows
        for batch in batches:
            done += batch.num_rows
            yield batch, done, total
        return
    import pyarrow as pa
    import pyarrow.json as pj

    total = path.stat().st_size
    schema = pa.schema([(logprobs, pa.list_(pa.float64()))])
    with open(path, "rb") as fh:
        try:
            reader = pj.open_json(fh, read_options=pj.ReadOptions(block_size=16 << 20),
                                  parse_options=pj.ParseOptions(explicit_schema=schema))
            for batch in reader:
                yield batch, fh.tell(), total
        except Exception as exc:  # pyarrow's JSON errors (bad line, mixed types) carry no line number
            if isinstance(exc, _Irregular):
                raise
            raise _Irregular from None


def _read_batches(path: Path, names: Mapping[str, str], answers: _Answers) -> None:
    """The vectorized reader, with a progress bar of rows read and their rate."""
    import pyarrow as pa

    from engine.progress import make_progress
    candidates = pa.array(list(answers.col), pa.string())
    start = time.perf_counter()
    with make_progress() as bar:
        task = bar.add_task("discovery", total=None)
        for batch, done, total in _batches(path, names["logprobs"]):
            _absorb(batch, names, answers, candidates)
            rate = answers.rows / max(time.perf_counter() - start, 1e-9)
            bar.update(task, completed=done, total=total,
                       description=f"discovery: {answers.rows:,} rows, {rate:,.0f} rows/s")


def read_discovery(path: str | Path, candidates: Sequence[str], columns: str | None = None) -> DiscoverySet:
    """Stream the discovery file into soft labels and per-LLM statistics for `candidates` (other LLMs' rows are
    counted and skipped). JSONL and parquet are read in batches by pyarrow (no Python object per row); TSV, and a
    file the batches find irregular (a bad line, a type pyarrow cannot take), row by row, where every error names
    its line. A question answered twice by one LLM is refused, naming both lines: which answer counts would be a
    guess, and counting both would double that LLM's tokens."""
    path = check_discovery(path, columns)
    names = parse_columns(columns)
    answers = _Answers(candidates, path)
    if path.suffix.lower() != ".tsv" and _pyarrow_json():
        try:
            _read_batches(path, names, answers)
            return answers.result()
        except _Irregular:
            answers = _Answers(candidates, path)
    _read_rows(path, names, answers)
    return answers.result()


def _pyarrow_json() -> bool:
    try:
        import pyarrow.json  # noqa: F401
    except ImportError:
        return False
    return True


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
