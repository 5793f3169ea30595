"""Metrics and traces of the handlers, against real servers.

- A handler process with MEMBUS_METRICS_PORT serves /metrics, /healthz and /readyz, and its
  counters move with the requests it answers (on a private stack, so that every request of
  the test reaches that one handler).
- One agent call is one trace: the SDK's span, the handler's span (the service's serve loop
  run in this process, reached over real NATS) and the Redis command spans share a trace id
  and nest. The global tracer provider can be set once per process, so the module sets (or
  joins) it once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import http.server
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence

import nats
import pytest
from inprocess import InProcess
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families
from stacks import private_stack

from bus import InvalidRequest, MemoryBus, Unavailable
from contracts.messages import SearchReply
from deploy.embedded import EmbeddedStack, free_port, wait_for_handlers
from handlers.dispatch import dispatch, shed
from handlers.errors import Busy
from handlers.metrics import Metrics
from handlers.service import serve
from handlers.settings import load_settings
from handlers.tracing import handler_tracer

# Each test starts servers or handler processes of its own.
pytestmark = pytest.mark.processes


REDIS_SCOPE = "opentelemetry.instrumentation.redis"

# ---------------------------------------------------------------------------------------
# Metrics


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def get(url: str) -> tuple[int, str]:
    return await asyncio.to_thread(_get, url)


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def test_a_handler_process_serves_metrics_health_and_readiness() -> None:
    port = free_port()
    env = {"MEMBUS_METRICS_PORT": str(port), "MEMBUS_METRICS_HOST": "127.0.0.1"}
    base = f"http://127.0.0.1:{port}"
    async with private_stack("hash", env=env) as stack:
        assert await get(f"{base}/healthz") == (200, "ok\n")
        assert await get(f"{base}/readyz") == (200, "ok\n")
        status, _ = await get(f"{base}/nothing-here")
        assert status == 404

        bus = await MemoryBus.connect(stack.nats_url, namespace="metrics")
        mem = bus.agent(workflow_id="wf_1")
        for text in ("first fact", "second fact", "third fact"):
            await mem.add("knowledge", text)
        await mem.search("fact")
        with pytest.raises(InvalidRequest):
            await bus.request("search", b'{"limit": "many"}', SearchReply)
        # A plain publish that fails is lost to its sender: the metrics still count it.
        await bus.nc.publish("mem.metrics.capture", b'{"tool": 42}')
        accepted = await mem.durable.add("knowledge", "a durable fact")
        assert accepted.request_id

        async def durable_applied() -> Samples:
            deadline = asyncio.get_running_loop().time() + 20
            while True:
                status, text = await get(f"{base}/metrics")
                assert status == 200
                found = samples(text)
                lost = {"op": "capture", "code": "invalid_request"}
                if value(
                    found, "membus_durable_writes_total", op="add", outcome="applied"
                ) and value(found, "membus_unanswered_failures_total", **lost):
                    return found
                assert asyncio.get_running_loop().time() < deadline, "durable add not counted"
                await asyncio.sleep(0.1)

        found = await durable_applied()
        # Three request/reply adds and the durable one: all ran `add` and answered ok.
        assert value(found, "membus_requests_total", op="add", code="ok") == 4
        assert value(found, "membus_requests_total", op="search", code="ok") == 1
        assert (
            value(found, "membus_unanswered_failures_total", op="capture", code="invalid_request")
            == 1
        )
        assert value(found, "membus_requests_total", op="search", code="invalid_request") == 1
        assert value(found, "membus_request_duration_seconds_count", op="add", code="ok") == 4
        assert (
            value(found, "membus_request_duration_seconds_bucket", op="add", code="ok", le="+Inf")
            == 4
        )
        assert 0 < value(found, "membus_request_duration_seconds_sum", op="add", code="ok") < 20
        assert (
            value(
                found, "membus_request_duration_seconds_count", op="search", code="invalid_request"
            )
            == 1
        )
        # Four adds and one query embedded by `hash` (no cache for hash).
        assert value(found, "membus_embedded_texts_total", embedder="hash") == 5
        assert value(found, "membus_embed_duration_seconds_count", embedder="hash") == 5
        assert ("membus_inflight_requests", frozenset()) in found
        assert value(found, "membus_waiting_requests") == 0
        assert value(found, "process_resident_memory_bytes") > 0

        # Redis down: requests fail `unavailable`, counted with the Redis error's kind, and
        # the handler is alive but not ready.
        stack.stop_server("redis")
        with pytest.raises(Unavailable):
            await mem.add("knowledge", "written during the outage")
        status, text = await get(f"{base}/readyz")
        assert status == 503 and "Redis" in text
        assert await get(f"{base}/healthz") == (200, "ok\n")
        _, text = await get(f"{base}/metrics")
        found = samples(text)
        assert value(found, "membus_requests_total", op="add", code="unavailable") == 1
        assert value(found, "membus_redis_errors_total", kind="connection") >= 1
        await bus.close()


async def test_dispatch_counts_requests_errors_and_shed_ones(
    in_process: InProcess, ns: str
) -> None:
    """In one process, with a `Metrics` of its own: two handlers' registries never collide."""
    metrics, other = Metrics(process=False), Metrics(process=False)
    deps = dataclasses.replace(in_process.deps, metrics=metrics)
    body = b'{"type": "knowledge", "content": "counted"}'
    _, error = await dispatch("add", f"mem.{ns}.add", body, deps)
    assert error is None
    _, error = await dispatch("get", f"mem.{ns}.get", b'{"ids": 5}', deps)
    assert error is not None and error.code == "invalid_request"
    shed("get", f"mem.{ns}.get", deps, Busy(128, 1024), received=None)

    reg = metrics.registry
    assert reg.get_sample_value("membus_requests_total", {"op": "add", "code": "ok"}) == 1
    assert (
        reg.get_sample_value("membus_requests_total", {"op": "get", "code": "invalid_request"}) == 1
    )
    assert reg.get_sample_value("membus_requests_total", {"op": "get", "code": "unavailable"}) == 1
    labels = {"op": "add", "code": "ok"}
    assert reg.get_sample_value("membus_request_duration_seconds_count", labels) == 1
    assert other.registry.get_sample_value("membus_requests_total", labels) is None


# ---------------------------------------------------------------------------------------
# Traces


@pytest.fixture(scope="module")
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """The process's SDK tracer provider (set here unless a test before set one) and an
    exporter that keeps this module's spans in memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "another tracer provider is set globally"
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    exporter.shutdown()  # later spans of this process are dropped, not kept


@pytest.fixture(scope="module")
async def traced_handler(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> AsyncIterator[EmbeddedStack]:
    """Servers of its own and the handler's serve loop in this process, tracing to `spans`."""
    stack = EmbeddedStack.temporary()
    stop = asyncio.Event()
    serving: asyncio.Task[None] | None = None
    try:
        await asyncio.to_thread(stack.start_servers)
        settings = load_settings(
            {
                "MEMBUS_EMBEDDER": "hash",
                "MEMBUS_NATS_URL": stack.nats_url,
                "MEMBUS_REDIS_URL": stack.redis_url,
            }
        )
        serving = asyncio.create_task(serve(settings, stop, tracer_provider=spans[0]))
        await wait_for_handlers(stack.nats_url, 1, timeout=30)
        yield stack
    finally:
        stop.set()
        if serving is not None:
            await asyncio.wait_for(serving, 30)
        stack.stop()


def one(found: Sequence[ReadableSpan], name: str, kind: SpanKind) -> ReadableSpan:
    """The one span of that name and kind."""
    matching = [s for s in found if s.name == name and s.kind == kind]
    assert len(matching) == 1, f"{name} {kind}: {[(s.name, s.kind) for s in found]}"
    return matching[0]


def in_trace(exporter: InMemorySpanExporter, trace_id: int) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]


def redis_spans(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    return [
        s for s in spans if s.instrumentation_scope and s.instrumentation_scope.name == REDIS_SCOPE
    ]


def under(span: ReadableSpan, found: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    """The spans below `span` (children, their children, ...)."""
    ids = {span.context.span_id}
    below: list[ReadableSpan] = []
    grew = True
    while grew:
        grew = False
        for s in found:
            if s.parent is not None and s.parent.span_id in ids and s.context.span_id not in ids:
                ids.add(s.context.span_id)
                below.append(s)
                grew = True
    return below


async def test_one_agent_call_is_one_trace_from_the_sdk_through_the_handler_to_redis(
    spans: tuple[TracerProvider, InMemorySpanExporter], traced_handler: EmbeddedStack
) -> None:
    provider, exporter = spans
    bus = await MemoryBus.connect(traced_handler.nats_url, namespace="traced")
    mem = bus.agent(workflow_id="wf_1")
    await mem.add("knowledge", "warm up: the namespace's index is created on first use")
    with provider.get_tracer("test").start_as_current_span("agent turn") as turn:
        exporter.clear()
        added = await mem.add("knowledge", "traces nest across NATS")
        with pytest.raises(InvalidRequest):
            await bus.request("search", b'{"limit": "many"}', SearchReply)
    await bus.close()
    found = in_trace(exporter, turn.get_span_context().trace_id)
    assert added.id

    client = one(found, "membus add", SpanKind.CLIENT)
    assert client.parent is not None and client.parent.span_id == turn.get_span_context().span_id
    assert client.attributes is not None
    assert client.attributes["messaging.system"] == "nats"
    assert client.attributes["messaging.destination.name"] == "mem.traced.add"
    assert client.attributes["membus.namespace"] == "traced"

    server = one(found, "membus add", SpanKind.SERVER)
    assert server.parent is not None and server.parent.span_id == client.context.span_id
    assert server.parent.is_remote  # it came in the NATS headers
    assert server.attributes is not None
    assert server.attributes["membus.code"] == "ok"
    assert server.attributes["membus.op"] == "add"
    assert server.status.status_code == StatusCode.UNSET

    commands = redis_spans(under(server, found))
    assert all(s.kind == SpanKind.CLIENT for s in commands)
    # The add is a Lua script (a redis.asyncio Script: EVALSHA).
    assert "EVALSHA" in [s.name for s in commands], [s.name for s in found]

    # A refused request: the client span failed, the handler's records the code, no error
    # status (it is the caller's mistake).
    bad_client = one(found, "membus search", SpanKind.CLIENT)
    assert bad_client.status.status_code == StatusCode.ERROR
    bad_server = one(found, "membus search", SpanKind.SERVER)
    assert bad_server.parent is not None and bad_server.parent.span_id == bad_client.context.span_id
    assert (
        bad_server.attributes is not None
        and bad_server.attributes["membus.code"] == "invalid_request"
    )
    assert bad_server.status.status_code == StatusCode.UNSET


async def test_a_durable_write_is_consumed_in_the_producer_s_trace(
    spans: tuple[TracerProvider, InMemorySpanExporter], traced_handler: EmbeddedStack
) -> None:
    provider, exporter = spans
    bus = await MemoryBus.connect(traced_handler.nats_url, namespace="traced")
    mem = bus.agent(workflow_id="wf_1")
    with provider.get_tracer("test").start_as_current_span("agent turn") as turn:
        accepted = await mem.durable.add("knowledge", "a durable traced fact")
    await bus.close()
    trace_id = turn.get_span_context().trace_id

    deadline = asyncio.get_running_loop().time() + 20
    while not any(s.kind == SpanKind.CONSUMER for s in in_trace(exporter, trace_id)):
        assert asyncio.get_running_loop().time() < deadline, "the durable add was not traced"
        await asyncio.sleep(0.05)
    found = in_trace(exporter, trace_id)
    producer = one(found, "membus add", SpanKind.PRODUCER)
    consumer = one(found, "membus add", SpanKind.CONSUMER)
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert consumer.attributes is not None
    assert consumer.attributes["membus.request_id"] == accepted.request_id
    assert consumer.attributes["membus.code"] == "ok"
    assert redis_spans(under(consumer, found)), "no Redis command span under the write's"


async def test_in_process_requests_carry_the_trace_context_too(
    spans: tuple[TracerProvider, InMemorySpanExporter], in_process: InProcess, ns: str
) -> None:
    """The in-process stand-in passes the SDK's headers to dispatch, as NATS would."""
    provider, exporter = spans
    traced = InProcess(
        in_process.nc, dataclasses.replace(in_process.deps, tracer=handler_tracer(provider))
    )
    bus = await MemoryBus.connect(namespace=ns, nc=traced)  # type: ignore[arg-type]
    with provider.get_tracer("test").start_as_current_span("agent turn") as turn:
        await bus.agent().list()
    trace_id = turn.get_span_context().trace_id
    found = in_trace(exporter, trace_id)
    client = one(found, "membus list", SpanKind.CLIENT)
    server = one(found, "membus list", SpanKind.SERVER)
    assert server.parent is not None and server.parent.span_id == client.context.span_id


class Collector(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: keeps each export request it is sent."""

    def __init__(self) -> None:
        self.received: list[ExportTraceServiceRequest] = []
        super().__init__(("127.0.0.1", 0), _CollectorHandler)


class _CollectorHandler(http.server.BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        assert self.path == "/v1/traces"
        self.server.received.append(ExportTraceServiceRequest.FromString(body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


async def test_a_handler_process_exports_its_spans_as_the_otel_variables_say() -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT alone turns tracing on: the handler's spans, children of
    the caller's context from the NATS headers, reach the collector as `membus-handler`."""
    collector = Collector()
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms between batches
    }
    trace_id, parent_id = "5" * 32, "6" * 16
    try:
        async with private_stack("hash", env=env) as stack:
            nc = await nats.connect(stack.nats_url)
            headers = {"traceparent": f"00-{trace_id}-{parent_id}-01"}
            body = b'{"type": "knowledge", "content": "exported"}'
            reply = await nc.request("mem.otlp.add", body, timeout=10, headers=headers)
            assert b'"success":true' in reply.data
            await nc.close()

            def exported() -> list[tuple[str, str, str, str, str]]:
                """(service.name, name, trace id, span id, parent span id) of every span."""
                return [
                    (
                        next(
                            a.value.string_value
                            for a in rs.resource.attributes
                            if a.key == "service.name"
                        ),
                        span.name,
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                    )
                    for request in list(collector.received)
                    for rs in request.resource_spans
                    for ss in rs.scope_spans
                    for span in ss.spans
                ]

            deadline = asyncio.get_running_loop().time() + 20
            while not any(s[1] == "membus add" for s in exported()):
                assert asyncio.get_running_loop().time() < deadline, "no span exported"
                await asyncio.sleep(0.1)
    finally:
        collector.shutdown()
        collector.server_close()
    spans = exported()
    [(service, _, server_trace, server_id, server_parent)] = [
        s for s in spans if s[1] == "membus add"
    ]
    assert (service, server_trace, server_parent) == ("membus-handler", trace_id, parent_id)
    script = ("membus-handler", "EVALSHA", trace_id, server_id)
    assert script in [(s[0], s[1], s[2], s[4]) for s in spans], spans
