"""The connection under `MemoryBus`: connect to NATS (or reuse a client), send an
operation to its subject with the request's trace context, decode the reply or raise the
typed error it carries, and follow events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, Self, TypeVar

import msgspec
import nats
import structlog
from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from opentelemetry.trace import SpanKind

from bus.errors import BusTimeout, InvalidRequest, Unavailable, error_for
from bus.events import EventStream
from bus.tracing import sending
from contracts.messages import Request
from contracts.subjects import (
    DEFAULT_NAMESPACE,
    FULL_TRUST,
    TRUST_LEVELS,
    event_filter,
    is_valid_namespace,
    nats_servers,
    request_subject,
)

R = TypeVar("R", bound=msgspec.Struct)


class _Envelope(msgspec.Struct):
    success: bool = False
    code: str = "internal"
    error: str = ""
    # v4 `conflict` over a memory's version.
    id: str | None = None
    current_version: int | None = None


_encoder = msgspec.json.Encoder()
_envelope = msgspec.json.Decoder(_Envelope)
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def _decoder(reply_type: type[R]) -> msgspec.json.Decoder[R]:
    dec = _decoders.get(reply_type)
    if dec is None:
        dec = _decoders[reply_type] = msgspec.json.Decoder(reply_type)
    return dec


log = structlog.get_logger("membus.client")


class _ConnectErrors:
    """The error callback of a connection: nats-py's default logs a traceback for every
    failed attempt. Before the first connection the last error goes into the one message
    that `connect` raises; after it, each error is one log line."""

    def __init__(self) -> None:
        self.last = ""
        self.connected = False

    async def seen(self, exc: Exception) -> None:
        if self.connected:
            log.warning("nats.error", error=f"{type(exc).__name__}: {exc}")
        else:
            self.last = f"{type(exc).__name__}: {exc}"


class Connection:
    """One NATS connection for one namespace: an operation sent and its reply decoded (or
    raised as a typed `BusError`), events followed. `MemoryBus` adds the rest."""

    def __init__(
        self,
        nc: NatsClient,
        namespace: str,
        timeout: float,
        owns: bool,
        trust: str = FULL_TRUST,
    ) -> None:
        self.nc = nc
        self.namespace = namespace
        self.timeout = timeout
        # The trust level this connection's subjects carry; NATS permissions decide
        # whether this user may use it.
        self.trust = trust
        self._owns = owns

    @classmethod
    async def connect(
        cls,
        url: str = "nats://127.0.0.1:4222",
        *,
        namespace: str = DEFAULT_NAMESPACE,
        timeout: float = 5.0,
        nc: NatsClient | None = None,
        connect_within: float = 10.0,
        trust: str = FULL_TRUST,
        **nats_options: Any,
    ) -> Self:
        """Connect to NATS (or reuse `nc`, which the bus then does not close). Once
        connected, the client reconnects for ever; the first connection must succeed within
        `connect_within` seconds, else `Unavailable`.

        `trust` (full, inner, familiar, public) picks the subjects requests go to; an agent
        given reduced trust by the deployment connects with its own user and inbox prefix,
        e.g. `user=..., password=..., inbox_prefix="_INBOX_<agent>"` (see deploy/nats)."""
        if not is_valid_namespace(namespace):
            raise InvalidRequest(f"Namespace {namespace!r} must match [A-Za-z0-9_-]{{1,64}}")
        if trust not in TRUST_LEVELS:
            raise InvalidRequest(f"Unknown trust {trust!r}; one of: {', '.join(TRUST_LEVELS)}")
        if nc is not None:
            return cls(nc, namespace, timeout, owns=False, trust=trust)
        # With unlimited reconnects nats-py also retries the first connect for ever.
        nats_options.setdefault("max_reconnect_attempts", -1)
        errors = _ConnectErrors()
        nats_options.setdefault("error_cb", errors.seen)
        try:
            client = await asyncio.wait_for(
                nats.connect(nats_servers(url), **nats_options), connect_within
            )
        except TimeoutError:
            why = f" ({errors.last})" if errors.last else ""
            raise Unavailable(
                f"NATS at {url} did not answer within {connect_within}s{why}: start it"
                " (make up) or point the client at the right server."
            ) from None
        errors.connected = True
        return cls(client, namespace, timeout, owns=True, trust=trust)

    async def close(self) -> None:
        if self._owns and not self.nc.is_closed:
            await self.nc.drain()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, op: str, body: Request | bytes, reply_type: type[R]) -> R:
        """Send one operation and decode its reply; errors raise typed `BusError`s."""
        with self._request_span(op) as (subject, headers):
            data = await self._send(op, subject, body, headers)
            env = _envelope.decode(data)
            if not env.success:
                raise error_for(env.code, env.error, env.id, env.current_version)
            return _decoder(reply_type).decode(data)

    async def request_raw(self, op: str, body: Request | bytes) -> bytes:
        """Send one operation and return its reply as sent, a success or an error body (for
        callers that pass replies on, such as the tool executor). Same subject, trust and
        trace as `request`; a bus that does not answer raises `Unavailable` or `BusTimeout`."""
        with self._request_span(op) as (subject, headers):
            return await self._send(op, subject, body, headers)

    @contextlib.contextmanager
    def _request_span(self, op: str) -> Iterator[tuple[str, dict[str, str] | None]]:
        """The subject of `op` at this connection's trust, and the headers carrying the
        trace context of the request's span (an exception leaving it marks the span)."""
        subject = request_subject(self.namespace, op, self.trust)
        with sending(op, subject, self.namespace, SpanKind.CLIENT) as headers:
            yield subject, headers

    async def _send(
        self, op: str, subject: str, body: Request | bytes, headers: dict[str, str] | None
    ) -> bytes:
        data = body if isinstance(body, bytes) else _encoder.encode(body)
        try:
            msg = await self.nc.request(subject, data, timeout=self.timeout, headers=headers)
        except NoRespondersError:
            raise Unavailable(
                "No memory handlers are running (no responders); start them and retry."
            ) from None
        except NatsTimeoutError:
            raise BusTimeout(f"No reply to {op} within {self.timeout}s; retry.") from None
        return bytes(msg.data)

    async def subscribe(
        self,
        workflow_id: str | None = None,
        *,
        general: bool = False,
        type: str | None = None,
        action: str | None = None,
    ) -> EventStream:
        """Follow events: of one workflow, of general memories, or (neither) of all."""
        subject = event_filter(
            self.namespace, workflow_id, general=general, type_=type, action=action
        )
        sub = await self.nc.subscribe(subject)
        return EventStream(sub)
