"""Reranker scores kept on disk per (reranker fingerprint, query text, candidate content), so a deeper depth or
a new query set scores only the pairs not seen before.

A candidate's content is its text, or its image file's path, size and modification time. A pointwise kind's
scores are kept per pair; a listwise kind's depend on the whole list it was shown, so they are kept per (query,
ordered candidate list): a deeper depth is a new list, scored again. One SQLite database under the stage cache
folder (`<cache>/scores/scores.sqlite3`): every write is one transaction (atomic: a crash leaves the pairs
written before it or none of them), and processes that share the folder wait for each other's writes.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.core.ranking.rerankers.base import IMAGE
from engine.errors import EngineError

FILE = "scores.sqlite3"
TIMEOUT = 60.0     # seconds a process waits for another's write
CHUNK = 500        # keys per SELECT (below SQLite's bound on parameters)
SCHEMA = ("CREATE TABLE IF NOT EXISTS pairs (fp TEXT NOT NULL, key BLOB NOT NULL, score REAL NOT NULL, "
          "PRIMARY KEY (fp, key)) WITHOUT ROWID",
          "CREATE TABLE IF NOT EXISTS lists (fp TEXT NOT NULL, key BLOB NOT NULL, scores BLOB NOT NULL, "
          "PRIMARY KEY (fp, key)) WITHOUT ROWID")


def content_key(doc: str, kind: str) -> str:
    """A candidate's content as the cache knows it: its text, or its image file's path, size and mtime (a
    rewritten image is a new candidate; one that cannot be read is known by its path alone)."""
    if kind != IMAGE:
        return "t:" + doc
    try:
        st = os.stat(doc)
        return f"i:{os.path.abspath(doc)}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return f"i:{doc}:missing"


def pair_key(query: str, content: str) -> bytes:
    return hashlib.sha256(query.encode("utf-8") + b"\0" + content.encode("utf-8")).digest()


def list_key(query: str, contents: Sequence[str]) -> bytes:
    h = hashlib.sha256(query.encode("utf-8"))
    for c in contents:
        h.update(b"\0" + hashlib.sha256(c.encode("utf-8")).digest())
    return h.digest()


class ScoreCache:
    """The kept scores of one reranker (by its fingerprint) under `folder`."""

    def __init__(self, folder: str | os.PathLike, fingerprint: str) -> None:
        self.folder, self.fp = Path(folder), fingerprint
        self._db: sqlite3.Connection | None = None

    def db(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.folder / FILE, timeout=TIMEOUT, isolation_level=None)
                try:
                    db.execute("PRAGMA journal_mode=WAL")  # readers never wait for a writer
                except sqlite3.Error:
                    pass  # a file system without shared memory: the default journal, still atomic
                for statement in SCHEMA:
                    db.execute(statement)
            except (OSError, sqlite3.Error) as e:
                raise self.failed(e) from None
            self._db = db
        return self._db

    def failed(self, e: Exception) -> EngineError:
        return EngineError(f"cannot use the reranker score cache in {self.folder} ({e}); give another --cache or "
                           "--no-cache")

    def pairs(self, query: str, contents: Sequence[str]) -> dict[int, float]:
        """Position → kept score, for the candidates whose pair with `query` was scored before."""
        keys = [pair_key(query, c) for c in contents]
        found: dict[bytes, float] = {}
        try:
            for start in range(0, len(keys), CHUNK):
                chunk = keys[start:start + CHUNK]
                rows = self.db().execute(f"SELECT key, score FROM pairs WHERE fp = ? AND key IN "
                                         f"({','.join('?' * len(chunk))})", [self.fp, *chunk])
                found.update(rows.fetchall())
        except sqlite3.Error:
            return {}  # damaged: scored again (and rewritten)
        return {i: float(found[k]) for i, k in enumerate(keys) if k in found}

    def put_pairs(self, pairs: Sequence[tuple[str, str, float]]) -> None:
        """Keep (query, content, score) triples, in one transaction; NaN scores (unread answers) never."""
        rows = [(self.fp, pair_key(q, c), float(s)) for q, c, s in pairs if not np.isnan(s)]
        if rows:
            self._write("INSERT OR REPLACE INTO pairs VALUES (?, ?, ?)", rows)

    def scores_of_list(self, query: str, contents: Sequence[str]) -> np.ndarray | None:
        """The scores kept for this query and this ordered list of candidates, or None."""
        try:
            row = self.db().execute("SELECT scores FROM lists WHERE fp = ? AND key = ?",
                                    (self.fp, list_key(query, contents))).fetchone()
        except sqlite3.Error:
            return None
        if row is None:
            return None
        scores = np.frombuffer(row[0], dtype=np.float64)
        return scores.copy() if len(scores) == len(contents) else None

    def put_list(self, query: str, contents: Sequence[str], scores: np.ndarray) -> None:
        self._write("INSERT OR REPLACE INTO lists VALUES (?, ?, ?)",
                    [(self.fp, list_key(query, contents), np.asarray(scores, dtype=np.float64).tobytes())])

    def _write(self, sql: str, rows: list[tuple]) -> None:
        db = self.db()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(sql, rows)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as e:
            raise self.failed(e) from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
