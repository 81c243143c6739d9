"""The micro-batcher holds a query for the batch window only when others are already queued."""
from __future__ import annotations

import time

import numpy as np

from engine.core.collection import Hit
from engine.serve.batching import MicroBatcher
from engine.serve.metrics import Metrics


class SlowCollection:
    """Encodes in `delay` seconds, so queries sent meanwhile queue up behind the first."""

    def __init__(self, delay: float = 0.0):
        self.delay, self.batches = delay, []

    def encode_queries(self, texts, batch_size):
        self.batches.append(list(texts))
        time.sleep(self.delay)
        return np.zeros((len(texts), 2), np.float32)

    def search_vectors(self, vectors, k):
        return np.zeros((len(vectors), k), np.float32), np.zeros((len(vectors), k), np.int64)

    def hits(self, scores, rows):
        return [[Hit("d0", 0.0, 1)] for _ in rows]


def test_a_lone_query_is_not_held_for_the_window():
    batcher = MicroBatcher(window_s=5.0, max_batch=8, metrics=Metrics())
    try:
        t = time.perf_counter()
        assert batcher.submit(SlowCollection(), "a dog", 1).result(timeout=10)[0].id == "d0"
        assert time.perf_counter() - t < 1.0  # not the 5 s window
    finally:
        batcher.close()


def test_queries_queued_behind_a_busy_batch_are_encoded_together():
    col = SlowCollection(delay=0.3)
    batcher = MicroBatcher(window_s=0.05, max_batch=8, metrics=Metrics())
    try:
        first = batcher.submit(col, "first", 1)
        time.sleep(0.1)  # the first is being encoded: the next ones queue
        futures = [batcher.submit(col, f"q{i}", 1) for i in range(5)]
        assert first.result(timeout=10) and all(f.result(timeout=10) for f in futures)
    finally:
        batcher.close()
    assert col.batches[0] == ["first"] and col.batches[1] == [f"q{i}" for i in range(5)]


class BarrierCollection(SlowCollection):
    """Each encode waits until `parties` encodes run at the same time (a timeout means they ran one by one)."""

    def __init__(self, parties: int):
        import threading
        super().__init__()
        self.barrier = threading.Barrier(parties, timeout=5)

    def encode_queries(self, texts, batch_size):
        self.barrier.wait()
        return super().encode_queries(texts, batch_size)


def test_batch_workers_encode_batches_at_the_same_time_and_all_stop():
    col = BarrierCollection(parties=2)
    batcher = MicroBatcher(window_s=0.0, max_batch=1, metrics=Metrics(), workers=2)
    try:
        futures = [batcher.submit(col, f"q{i}", 1) for i in range(4)]
        assert all(f.result(timeout=10)[0].id == "d0" for f in futures)
    finally:
        batcher.close()
    assert sorted(t for b in col.batches for t in b) == [f"q{i}" for i in range(4)]
    assert not any(t.is_alive() for t in batcher._threads)
