"""Traces of the client's sends. When the application has set up an OpenTelemetry SDK, each
send is a span (`membus <op>`) whose context travels in the NATS headers to the handler, whose
spans join the same trace. With opentelemetry-api alone (a no-op) a send costs one check."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry import propagate, trace
from opentelemetry.trace import ProxyTracerProvider, SpanKind

_tracer = trace.get_tracer("memory_bus.client")


def traced() -> bool:
    """Whether a send is traced: an SDK is set up, or the caller runs inside a span context
    it was given (which is then passed on)."""
    return trace.get_current_span().get_span_context().is_valid or not isinstance(
        trace.get_tracer_provider(), ProxyTracerProvider
    )


@contextlib.contextmanager
def _send_span(
    op: str, subject: str, namespace: str, kind: SpanKind, headers: dict[str, str]
) -> Iterator[dict[str, str]]:
    attributes = {
        "messaging.system": "nats",
        "messaging.destination.name": subject,
        "membus.namespace": namespace,
        "membus.op": op,
    }
    # An exception leaving the block is recorded on the span, which is then an error.
    with _tracer.start_as_current_span(f"membus {op}", kind=kind, attributes=attributes):
        propagate.inject(headers)
        yield headers


def sending(
    op: str, subject: str, namespace: str, kind: SpanKind, headers: dict[str, str] | None = None
) -> contextlib.AbstractContextManager[dict[str, str] | None]:
    """Around one send: yields the headers to send (`headers` plus the trace context)."""
    if not traced():
        return contextlib.nullcontext(headers)
    return _send_span(op, subject, namespace, kind, {} if headers is None else headers)
