"""Micro-batching of concurrent text queries: one thread takes what has queued (waiting at most a short window
for more, up to a maximum batch, only when others are already queued), encodes the texts in one forward pass
per collection and searches them together per k through `search` (the service's: the search pipeline over
the batch's vectors), so throughput grows with the number of clients while a lone query is answered at once.
"""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from engine.core.collection import Collection, Hit
from engine.serve.metrics import Metrics


@dataclass
class TextJob:
    col: Collection
    text: str
    k: int
    future: Future = field(default_factory=Future)


class MicroBatcher:
    """`workers` threads take batches from one queue: while one searches its batch (one FAISS thread), the next
    is encoded, and each batch runs start to end on its own thread (no hand-off between stages)."""

    def __init__(self, window_s: float, max_batch: int, metrics: Metrics, workers: int = 1,
                 search: "Callable[[Collection, np.ndarray, int], list[list[Hit]]] | None" = None):
        self.window_s, self.max_batch, self.metrics = window_s, max_batch, metrics
        self.search = search or (lambda col, vectors, k: col.hits(*col.search_vectors(vectors, k)))
        self._queue: queue.Queue[TextJob | None] = queue.Queue()
        self._threads = [threading.Thread(target=self._run, name=f"engine-text-batcher-{n}", daemon=True)
                         for n in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, col: Collection, text: str, k: int) -> Future:
        """A future of the query's hits (or of the EngineError it raised)."""
        job = TextJob(col, text, k)
        self._queue.put(job)
        return job.future

    def close(self) -> None:
        self._queue.put(None)  # each worker puts it back for the next
        for thread in self._threads:
            thread.join(timeout=5)

    def _take(self) -> list[TextJob] | None:
        first = self._queue.get()
        if first is None:
            self._queue.put(None)
            return None
        batch = [first]
        if self._queue.empty():
            return batch  # nothing else waiting: a lone query is answered at once, never held for the window
        deadline = time.perf_counter() + self.window_s
        while len(batch) < self.max_batch:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    job = self._queue.get(timeout=left)
                except queue.Empty:
                    break
            if job is None:
                self._queue.put(None)
                break
            batch.append(job)
        return batch

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            batch = [job for job in batch if job.future.set_running_or_notify_cancel()]  # drop timed-out ones
            if not batch:
                continue
            self.metrics.batch_size.observe(len(batch))
            groups: dict[int, list[TextJob]] = {}
            for job in batch:
                groups.setdefault(id(job.col), []).append(job)
            for jobs in groups.values():
                try:
                    self._answer(jobs)
                except Exception as exc:  # noqa: BLE001  every waiting request gets the error, the thread goes on
                    for job in jobs:
                        if not job.future.done():
                            job.future.set_exception(exc)

    def _answer(self, jobs: list[TextJob]) -> None:
        col = jobs[0].col
        t0 = time.perf_counter()
        vectors = col.encode_queries(texts=[j.text for j in jobs], batch_size=len(jobs))
        self.metrics.encode.labels("text").observe(time.perf_counter() - t0)
        by_k: dict[int, list[int]] = {}
        for n, job in enumerate(jobs):
            by_k.setdefault(job.k, []).append(n)
        for k, positions in by_k.items():
            t0 = time.perf_counter()
            hits: list[list[Hit]] = self.search(col, vectors[positions], k)
            self.metrics.search.observe(time.perf_counter() - t0)
            for n, found in zip(positions, hits):
                jobs[n].future.set_result(found)
