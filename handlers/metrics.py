"""The Prometheus metrics of one handler process, in a registry of its own.

Nothing goes to prometheus_client's default registry, so several handlers (or tests) in one
process never collide. Names and labels are a contract: dashboards (deploy/grafana) and the
"Metrics and traces" table of docs/operations.md use them as they are.

Only the wiring builds a `Metrics` (when MEMBUS_METRICS_PORT is set); the request path calls
it through `Deps.metrics`, None when metrics are off, so they then cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

# A request takes about a millisecond; the slow tail (big searches, a Redis hiccup, the wait
# for an admission slot) reaches seconds.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# `hash` embeds in microseconds, minilm in milliseconds, a remote model in up to seconds.
EMBED_BUCKETS = (0.0001, 0.00025, *REQUEST_BUCKETS, 10)
# The values of `membus_durable_writes_total`'s `outcome` label.
DURABLE_OUTCOMES = ("applied", "duplicate", "rejected", "retried", "in_progress")


class Metrics:
    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.requests = Counter(
            "membus_requests_total",
            "Requests handled, by operation and reply code (ok or the protocol error code);"
            " requests shed for load count as unavailable.",
            ["op", "code"],
            registry=reg,
        )
        self.request_duration = Histogram(
            "membus_request_duration_seconds",
            "Time from a request's arrival (including its wait for a slot) to its reply.",
            ["op", "code"],
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        self.inflight = Gauge("membus_inflight_requests", "Requests running now.", registry=reg)
        self.waiting = Gauge(
            "membus_waiting_requests", "Requests waiting for a slot (admission).", registry=reg
        )
        self.embed_duration = Histogram(
            "membus_embed_duration_seconds",
            "Time to compute embeddings (one call, one or more texts; cache hits excluded).",
            ["embedder"],
            buckets=EMBED_BUCKETS,
            registry=reg,
        )
        self.embedded_texts = Counter(
            "membus_embedded_texts_total",
            "Texts embedded by the model (cache hits excluded).",
            ["embedder"],
            registry=reg,
        )
        self.redis_errors = Counter(
            "membus_redis_errors_total",
            "Redis errors that failed a request: connection, timeout, pool_exhausted, response.",
            ["kind"],
            registry=reg,
        )
        self.durable_writes = Counter(
            "membus_durable_writes_total",
            "Durable writes taken from JetStream, by operation and outcome.",
            ["op", "outcome"],
            registry=reg,
        )
        self.unanswered_failures = Counter(
            "membus_unanswered_failures_total",
            "Requests sent without a reply subject (plain-publish captures) that failed or"
            " were shed: lost, with nobody else told. The SDK publishes captures into the"
            " durable stream where it exists, so these come from other publishers.",
            ["op", "code"],
            registry=reg,
        )
        if process:
            # CPU, memory, open files, GC: what a dashboard shows next to the request rates.
            ProcessCollector(registry=reg)
            PlatformCollector(registry=reg)
            GCCollector(registry=reg)
        # Labelled children, looked up once: `labels()` takes a lock and builds a key each time.
        self._request_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}

    def request_done(self, op: str, code: str, seconds: float) -> None:
        children = self._request_children.get((op, code))
        if children is None:
            children = (self.requests.labels(op, code), self.request_duration.labels(op, code))
            self._request_children[op, code] = children
        children[0].inc()
        children[1].observe(seconds)

    def watch_admission(self, running: Callable[[], float], waiting: Callable[[], float]) -> None:
        """Read the admission's counts at scrape time: nothing to do per request."""
        self.inflight.set_function(running)
        self.waiting.set_function(waiting)

    def embedder_report(self, embedder: str) -> Callable[[int, float], None]:
        """The callback a timed embedder reports (texts, seconds) of each call to."""
        duration = self.embed_duration.labels(embedder)
        texts = self.embedded_texts.labels(embedder)

        def report(count: int, seconds: float) -> None:
            duration.observe(seconds)
            texts.inc(count)

        return report

    def redis_error(self, kind: str) -> None:
        self.redis_errors.labels(kind).inc()

    def durable_write(self, op: str, outcome: str) -> None:
        self.durable_writes.labels(op, outcome).inc()

    def unanswered_failure(self, op: str, code: str) -> None:
        self.unanswered_failures.labels(op, code).inc()
