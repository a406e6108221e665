"""The server's Prometheus metrics (`GET /metrics`), in a registry of its own.

- `transformer_serve_requests_total{path, status}`: answered requests;
- `transformer_serve_request_seconds{path}`: from the request's arrival to its answer;
- `transformer_serve_waiting_requests`: requests waiting for the decoder;
- `transformer_serve_batch_sentences`: sentences per engine call;
- `transformer_serve_decode_seconds`: seconds per engine call;
- `transformer_serve_sentences_total`: sentences decoded.

Each server has its own `prometheus_client.CollectorRegistry`, so that
several servers (tests) in one process do not share counts.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """The counters, gauge and histograms of one server.

    Args:
        waiting: returns the number of requests waiting for the decoder, read
            when the metrics are scraped.
    """

    def __init__(self, waiting: Callable[[], int]):
        self.registry = CollectorRegistry()
        prefix = "transformer_serve_"
        self.requests = Counter(prefix + "requests", "Answered requests by path and status.",
                                ["path", "status"], registry=self.registry)
        self.request_seconds = Histogram(prefix + "request_seconds",
                                         "Seconds from a request's arrival to its answer.",
                                         ["path"], buckets=_SECONDS_BUCKETS,
                                         registry=self.registry)
        waiting_gauge = Gauge(prefix + "waiting_requests",
                              "Requests waiting for the decoder.", registry=self.registry)
        waiting_gauge.set_function(waiting)
        self.batch_sentences = Histogram(prefix + "batch_sentences",
                                         "Sentences per engine call.", buckets=_BATCH_BUCKETS,
                                         registry=self.registry)
        self.decode_seconds = Histogram(prefix + "decode_seconds", "Seconds per engine call.",
                                        buckets=_SECONDS_BUCKETS, registry=self.registry)
        self.sentences = Counter(prefix + "sentences", "Sentences decoded.",
                                 registry=self.registry)

    def batch(self, sentences: int, seconds: float) -> None:
        """Records one engine call (the batcher's `on_batch`)."""
        self.batch_sentences.observe(sentences)
        self.decode_seconds.observe(seconds)
        self.sentences.inc(sentences)

    def answered(self, path: str, status: int, seconds: float) -> None:
        """Records one answered request; `path` is one of the server's or "other"."""
        self.requests.labels(path=path, status=str(status)).inc()
        self.request_seconds.labels(path=path).observe(seconds)

    def text(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)
