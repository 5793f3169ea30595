"""OpenTelemetry traces of the handler: the span of each request, a child of the caller's span
(whose context comes in the NATS message headers), and Redis command spans below it.

Tracing is set up from the standard `OTEL_*` variables: with `OTEL_EXPORTER_OTLP_ENDPOINT`
(or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_TRACES_EXPORTER`) set, an SDK tracer
provider sends spans to an OTLP/HTTP collector; otherwise it stays off and costs nothing
(`Deps.tracer` is None). The SDK and the Redis instrumentation are in the `observability`
extra and imported only when tracing is on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from handlers import __version__
from handlers.errors import HandlerError

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from opentelemetry.sdk.trace import TracerProvider

log = structlog.get_logger("membus.tracing")

SERVICE_NAME = "membus-handler"
EXTRA_HINT = "pip install 'memory-bus[observability]'"
# The codes that mean the handler failed; the others are the caller's mistake, which the
# OpenTelemetry conventions leave unset on a server span (like an HTTP 4xx).
SERVER_FAULTS = frozenset({"internal", "unavailable"})


def tracing_wanted(env: Mapping[str, str]) -> bool:
    """Whether the OTEL_* variables ask for traces."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure_tracing(env: Mapping[str, str] | None = None) -> TracerProvider | None:
    """The process's tracer provider (also set as the global one), or None when tracing is
    off. The SDK reads the rest of its configuration (endpoint, headers, sampler, resource
    attributes) from the OTEL_* variables itself."""
    env = os.environ if env is None else env
    if not tracing_wanted(env):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        log.warning(
            "tracing.unavailable", reason=f"OTEL_* set but no OpenTelemetry SDK: {EXTRA_HINT}"
        )
        return None
    attributes: dict[str, Any] = {"service.version": __version__}
    # OTEL_SERVICE_NAME or a service.name in OTEL_RESOURCE_ATTRIBUTES wins over the default.
    if not env.get("OTEL_SERVICE_NAME") and "service.name=" not in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes["service.name"] = SERVICE_NAME
    provider = TracerProvider(resource=Resource.create(attributes))
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")]
    exporting = []
    for name in filter(None, names):
        exporter: SpanExporter
        if name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError:
                log.warning("tracing.unavailable", reason=f"no OTLP/HTTP exporter: {EXTRA_HINT}")
                return None
            protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
                "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
            )
            if protocol != "http/protobuf":  # point the endpoint at the collector's HTTP port
                log.warning(
                    "tracing.protocol_unsupported", protocol=protocol, using="http/protobuf"
                )
            exporter = OTLPSpanExporter()
        elif name == "console":
            exporter = ConsoleSpanExporter()
        else:
            log.warning("tracing.exporter_unknown", exporter=name, known="otlp, console, none")
            continue
        # Spans leave in batches from a thread of their own, never on the request path.
        provider.add_span_processor(BatchSpanProcessor(exporter))
        exporting.append(name)
    if not exporting:
        return None
    trace.set_tracer_provider(provider)
    log.info("tracing.on", exporters=exporting)
    return provider


def instrument_redis(client: aioredis.Redis, provider: trace.TracerProvider) -> None:
    """Make every command of this client (pipelines and Lua scripts too) a span, a child of
    the request span that runs it. Only this client: nothing else in the process changes."""
    try:
        from opentelemetry.instrumentation.redis import RedisInstrumentor
    except ImportError:
        log.warning("tracing.redis_off", reason=f"no Redis instrumentation: {EXTRA_HINT}")
        return
    RedisInstrumentor.instrument_client(client, tracer_provider=provider)


def untraced() -> contextlib.AbstractContextManager[object]:
    """No Redis spans for what runs inside (readiness pings: no trace of their own)."""
    try:
        from opentelemetry.instrumentation.utils import suppress_instrumentation
    except ImportError:  # no instrumentation, no spans
        return contextlib.nullcontext()
    return suppress_instrumentation()


def handler_tracer(provider: trace.TracerProvider) -> Tracer:
    return provider.get_tracer("membus.handler", __version__)


def start_request_span(
    tracer: Tracer,
    op: str,
    subject: str,
    ns: str,
    headers: Mapping[str, str] | None,
    *,
    durable: bool,
    request_id: str | None = None,
) -> Span:
    """The span of one request (CONSUMER for a durable write taken from JetStream): a child
    of the caller's span when the request's headers carry one."""
    parent = propagate.extract(headers) if headers else None
    attributes = {
        "messaging.system": "nats",
        "messaging.destination.name": subject,
        "messaging.operation.type": "process",
        "membus.op": op,
        "membus.namespace": ns,
    }
    if request_id is not None:
        attributes["membus.request_id"] = request_id
    kind = SpanKind.CONSUMER if durable else SpanKind.SERVER
    return tracer.start_span(f"membus {op}", context=parent, kind=kind, attributes=attributes)


def note_reply(span: Span, error: HandlerError | None) -> None:
    """Note the reply's code on the span, and status error for the handler's own faults."""
    if error is None:
        span.set_attribute("membus.code", "ok")
    else:
        span.set_attribute("membus.code", error.code)
        span.set_attribute("error.type", error.code)
        if error.code in SERVER_FAULTS:
            cause = error.__cause__ or error.__context__
            if cause is not None:
                span.record_exception(cause)
            span.set_status(Status(StatusCode.ERROR, error.message))


def trace_id(span: Span) -> str | None:
    """The span's trace id as the logs show it, so a log line leads to its trace."""
    ctx = span.get_span_context()
    return trace.format_trace_id(ctx.trace_id) if ctx.is_valid else None
