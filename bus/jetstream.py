"""Writes through the JetStream stream MEMBUS_WRITES: `publish` (sent without waiting, for
`capture`) and `durable` (acknowledged once stored: never lost, applied at most once)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import msgspec
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import APIError, NoStreamResponseError
from opentelemetry.trace import SpanKind

from bus.connection import Connection
from bus.errors import BusTimeout, Unavailable
from bus.tracing import sending
from contracts.messages import Request
from contracts.subjects import DURABLE_STREAM, request_subject

# How often a durable publish is sent again (same Nats-Msg-Id, so never applied twice)
# when JetStream's acknowledgement does not come in time.
DURABLE_ATTEMPTS = 3
# How soon a durable publish that found no stream is sent again (within the timeout).
NO_STREAM_RETRY_S = 0.25


class Accepted(msgspec.Struct, frozen=True):
    """JetStream's acknowledgement of a durable write: it is stored in the stream and will
    be applied (at most once), even through handler crashes and NATS or Redis restarts.
    Its outcome comes as an event carrying `request_id` (or a `rejected` event)."""

    request_id: str  # the Nats-Msg-Id
    stream: str
    seq: int
    # JetStream had this request_id already (a retried publish): nothing new was stored.
    duplicate: bool = False


_encoder = msgspec.json.Encoder()


class JetStreamConnection(Connection):
    """A connection that also writes through the JetStream stream MEMBUS_WRITES."""

    # The JetStream context, made on first use.
    _js: Any = None
    # Whether the durable stream takes plain publishes (`publish`); None: not known yet.
    _stream: bool | None = None
    _probing: asyncio.Future[None] | None = None

    async def publish(self, op: str, body: Request) -> None:
        """Send a write without waiting for (or getting) a reply: `capture`. Where the
        durable stream binds `memq.<ns>.<op>`, it goes there as a plain publish: JetStream
        stores it without the sender waiting, and a handler applies it when it can, so a
        burst is never shed. Without the stream (NATS without JetStream) it goes to the
        request subject, where a handler with no room sheds it. Whether the stream is there
        is learnt once per connection: the first write waits for JetStream's ack."""
        data = _encoder.encode(body)
        if self._stream is None:
            if self._probing is None:
                self._probing = asyncio.ensure_future(self._probe_stream(op, data))
                await self._probing
                return
            with contextlib.suppress(Exception):  # the first write's failure is its own
                await asyncio.shield(self._probing)
        durable = self._stream is not False
        subject = request_subject(self.namespace, op, self.trust, durable=durable)
        ids = {"Nats-Msg-Id": uuid.uuid4().hex} if durable else None
        with sending(op, subject, self.namespace, SpanKind.PRODUCER, ids) as headers:
            await self.nc.publish(subject, data, headers=headers)

    async def _probe_stream(self, op: str, data: bytes) -> None:
        """Send one write through JetStream, waiting for its ack: that tells whether the
        stream is there (else the write goes to the request subject)."""
        subject = request_subject(self.namespace, op, self.trust, durable=True)
        if self._js is None:
            self._js = self.nc.jetstream()
        ids = {"Nats-Msg-Id": uuid.uuid4().hex}
        try:
            with sending(op, subject, self.namespace, SpanKind.PRODUCER, ids) as headers:
                await self._js.publish(subject, data, timeout=self.timeout, headers=headers)
            self._stream = True
        except NatsTimeoutError:
            self._stream = True  # JetStream is there, only slow: the write is likely stored
        except (NoRespondersError, NoStreamResponseError, APIError):
            self._stream = False
            plain = request_subject(self.namespace, op, self.trust)
            with sending(op, plain, self.namespace, SpanKind.PRODUCER) as headers:
                await self.nc.publish(plain, data, headers=headers)
        finally:
            self._probing = None

    async def durable(self, op: str, body: Request, request_id: str | None = None) -> Accepted:
        """Send a write (add, update, delete, capture) through the JetStream stream
        MEMBUS_WRITES: once this returns, the write is not lost, and it is applied at most
        once. `request_id` (the Nats-Msg-Id; new by default) makes a retry by the caller
        idempotent too; the write's event carries it."""
        if self._js is None:
            self._js = self.nc.jetstream()
        request_id = request_id or uuid.uuid4().hex
        subject = request_subject(self.namespace, op, self.trust, durable=True)
        data = _encoder.encode(body)
        # One span for the attempts; the handler's span of the write is its child.
        with sending(
            op, subject, self.namespace, SpanKind.PRODUCER, {"Nats-Msg-Id": request_id}
        ) as headers:
            loop = asyncio.get_running_loop()
            # No responder is also what a cluster answers while the stream elects a new
            # leader (a server lost): asked again until the timeout, then it is a missing
            # stream.
            give_up = loop.time() + self.timeout
            attempt = 0
            while attempt < DURABLE_ATTEMPTS:
                try:
                    ack = await self._js.publish(
                        subject, data, timeout=self.timeout, headers=headers
                    )
                    return Accepted(request_id, ack.stream, ack.seq, bool(ack.duplicate))
                except (NoRespondersError, NoStreamResponseError):
                    if loop.time() < give_up:
                        await asyncio.sleep(NO_STREAM_RETRY_S)
                        continue
                    raise Unavailable(
                        f"No JetStream stream takes {subject}: the handlers create"
                        f" {DURABLE_STREAM} when they start (on a cluster, its leader may"
                        " still be being elected); start one (with JetStream on) and retry."
                    ) from None
                except APIError as exc:  # e.g. the stream is full, or a subject it refuses
                    raise Unavailable(
                        f"JetStream refused the {op}: {exc.description}; retry."
                    ) from None
                except NatsTimeoutError:
                    attempt += 1
                    if attempt == DURABLE_ATTEMPTS:
                        raise BusTimeout(
                            f"JetStream did not acknowledge {op} within {self.timeout}s,"
                            f" three times; retry with request_id={request_id!r} (never"
                            " applied twice)."
                        ) from None
        raise AssertionError("unreachable")
