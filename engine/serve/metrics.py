"""Prometheus metrics of one app (its own registry, so several apps in one process never collide)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("engine_requests", "HTTP requests by endpoint and status code",
                                ["endpoint", "status"], registry=self.registry)
        self.latency = Histogram("engine_request_seconds", "Request latency by endpoint", ["endpoint"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.encode = Histogram("engine_encode_seconds", "Query encoding time per batch, by modality",
                                ["modality"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.search = Histogram("engine_search_seconds", "FAISS search time per batch", buckets=LATENCY_BUCKETS,
                                registry=self.registry)
        self.batch_size = Histogram("engine_text_batch_size", "Text queries encoded together by the micro-batcher",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=self.registry)
        self.collections = Gauge("engine_collections_loaded", "Collections open in this server",
                                 registry=self.registry)
