"""Durable writes (PROTOCOL "Durable writes"): `add`, `update`, `delete` and `capture` taken
from the JetStream stream MEMBUS_WRITES through one durable consumer that every handler
shares, each acknowledged only once Redis has it.

A write is applied at most once per request id (its `Nats-Msg-Id`): a handler claims the id
in Redis before applying it and marks it done (kept 24 h) after, so a write redelivered after
it was applied is acknowledged without a second apply. If a handler dies between the write
and the mark, the claim lapses and the write is applied again; `add` and `capture` then write
the same memory id (`ids.derived_id`), not a second memory. A write whose dependency is down
is redelivered with backoff; one that can never succeed is acknowledged and reported on
`mem.<ns>.events._rejected.<op>.rejected`.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Any

import msgspec
import nats.errors
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import BadRequestError, NotFoundError, ServiceUnavailableError
from redis.exceptions import RedisError

from contracts.messages import RejectedEvent, UpdateRequest
from contracts.operations import DURABLE_OPERATIONS, REQUEST_TYPES
from contracts.subjects import (
    DURABLE_CONSUMER,
    DURABLE_PREFIX,
    DURABLE_STREAM,
    is_valid_namespace,
    parse_request_subject,
    rejected_subject,
)
from handlers.dispatch import count_redis_error, dispatch
from handlers.errors import HandlerError, InvalidRequest, Unavailable
from handlers.ops.deps import Deps, DurableWrite
from handlers.ops.secrets import redact

log = structlog.get_logger("membus.durable")
_encoder = msgspec.json.Encoder()

# Handlers remember applied ids (by Nats-Msg-Id) this long, well beyond JetStream's own
# duplicate window (settings.durable_duplicate_window_s).
APPLIED_KEEP_S = 24 * 3600
# A claim lapses after this long, should its handler die while applying the write.
CLAIM_MS = 30_000
ACK_WAIT_S = 30
BATCH = 64
MAX_BACKOFF_S = 30.0


# How long a handler keeps trying to create the stream while a new NATS cluster elects its
# JetStream leader.
START_WITHIN_S = 30.0


def cluster_size(server_info: dict[str, Any], configured: int = 1) -> int:
    """How many NATS servers there are: as many as the connected one says its cluster has
    (its INFO's client URLs, itself included; none outside a cluster), or as the handler
    was given in MEMBUS_NATS_URL if more (a cluster still forming its routes lists only the
    servers it has met so far)."""
    return max(1, configured, len(server_info.get("connect_urls") or []))


def stream_replicas(setting: int, servers: int) -> int:
    """The durable stream's copies: the setting, or as many as there are servers, up to 3."""
    return setting if setting > 0 else min(3, servers)


def stream_config(duplicate_window_s: float, replicas: int = 1) -> api.StreamConfig:
    return api.StreamConfig(
        name=DURABLE_STREAM,
        description=f"memory-bus durable writes ({', '.join(DURABLE_OPERATIONS)})",
        subjects=[f"{DURABLE_PREFIX}.>"],
        # File storage survives a NATS restart; a work queue drops each write once applied.
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.WORK_QUEUE,
        duplicate_window=duplicate_window_s,
        max_msg_size=1024 * 1024,
        # Acknowledged once a majority of the copies stored it: a server's loss loses nothing.
        num_replicas=replicas,
    )


def consumer_config() -> api.ConsumerConfig:
    return api.ConsumerConfig(
        durable_name=DURABLE_CONSUMER,
        description="every memory-bus handler pulls from this one consumer",
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=ACK_WAIT_S,
        max_deliver=-1,  # a write whose dependency is down is retried until it succeeds
        max_ack_pending=4 * BATCH,
        filter_subject=f"{DURABLE_PREFIX}.>",
    )


def backoff_s(deliveries: int) -> float:
    """The delay before the next delivery of a write that found a dependency down."""
    return min(MAX_BACKOFF_S, 0.5 * 2 ** max(0, deliveries - 1))


class _Target(msgspec.Struct):
    id: str | None = None


_target = msgspec.json.Decoder(_Target)


def _lanes(msgs: list[Msg]) -> list[list[Msg]]:
    """A fetched batch as lanes that may run side by side: the updates of one memory share
    a lane, in stream order; every other write has a lane of its own. (Across handlers,
    `writes.update` keeps the stream order.)"""
    lanes: dict[object, list[Msg]] = {}
    for i, msg in enumerate(msgs):
        key: object = i
        parts = msg.subject.split(".")  # memq.<ns>.<op>[.<trust>]
        if len(parts) > 2 and REQUEST_TYPES.get(parts[2]) is UpdateRequest:
            with contextlib.suppress(msgspec.DecodeError, RecursionError):
                key = (parts[1], _target.decode(msg.data).id)
        lanes.setdefault(key, []).append(msg)
    return list(lanes.values())


def _micros(at: datetime | None) -> int:
    return 0 if at is None else int(at.timestamp() * 1_000_000)


class DurableWriteConsumer:
    """This handler's pull from the shared consumer of MEMBUS_WRITES: it creates the stream
    and the consumer, applies each write through `dispatch` once its claim is won, and
    acknowledges, retries or rejects it. (The SDK's `bus.DurableWrites` is the sending side.)"""

    def __init__(self, nc: NatsClient, deps: Deps) -> None:
        self.nc = nc
        self.deps = deps
        self.js: JetStreamContext = nc.jetstream()
        self._sub: Any = None
        # When the stream was created: a write's position is (this, its stream sequence).
        self._created_us = 0
        self.applied = self.duplicates = self.rejected = self.retried = 0

    def _count(self, op: str, outcome: str) -> None:
        if self.deps.metrics is not None:
            # The subject's op token is anyone's text: keep the label to the known ones.
            self.deps.metrics.durable_write(op if op in DURABLE_OPERATIONS else "unknown", outcome)

    async def start(self) -> bool:
        """Create or update the stream and the shared consumer; False when this NATS has no
        JetStream (durable writes are then off; request/reply works as ever)."""
        settings = self.deps.settings
        given = len(self.nc.servers) - len(self.nc.discovered_servers)
        replicas = stream_replicas(
            settings.stream_replicas, cluster_size(self.nc._server_info, given)
        )
        config = stream_config(settings.durable_duplicate_window_s, replicas)
        deadline = asyncio.get_running_loop().time() + START_WITHIN_S
        while True:
            try:
                await self._open(config)
                break
            except (
                ServiceUnavailableError,
                NotFoundError,
                nats.errors.NoRespondersError,
                nats.errors.TimeoutError,
            ) as exc:
                # A cluster that restarts answers late, or not yet, after the stream is
                # there (consumer, bind, info): wait that out as `_create_stream` does. A
                # NATS without JetStream says so at once.
                electing = isinstance(exc, ServiceUnavailableError) and exc.err_code == 10008
                passing = electing or isinstance(exc, NotFoundError | nats.errors.TimeoutError)
                if not passing or asyncio.get_running_loop().time() > deadline:
                    log.warning("durable.off", reason=f"JetStream is not available: {exc!r}")
                    return False
                log.info("durable.waiting_for_jetstream", error=repr(exc))
                await asyncio.sleep(0.5)
        log.info("durable.on", stream=DURABLE_STREAM, consumer=DURABLE_CONSUMER, replicas=replicas)
        return True

    async def _open(self, config: api.StreamConfig) -> None:
        """The stream, the shared consumer, and this handler's pull subscription to it."""
        await self._create_stream(config)
        try:
            await self.js.add_consumer(DURABLE_STREAM, consumer_config())
        except BadRequestError:
            log.warning("durable.consumer_kept", consumer=DURABLE_CONSUMER, exc_info=True)
        if self._sub is None:
            self._sub = await self.js.pull_subscribe_bind(
                durable=DURABLE_CONSUMER, stream=DURABLE_STREAM
            )
        info = await self.js.stream_info(DURABLE_STREAM)
        self._created_us = _micros(info.created)

    async def _create_stream(self, config: api.StreamConfig) -> None:
        """Create the stream, or bring an existing one to `config` (its replicas too),
        waiting out a new cluster's JetStream leader election."""
        deadline = asyncio.get_running_loop().time() + START_WITHIN_S
        while True:
            try:
                try:
                    await self.js.add_stream(config)
                except BadRequestError:  # it exists with another configuration: bring it up
                    await self.js.update_stream(config)
                return
            except ServiceUnavailableError as exc:
                # 10008: "JetStream system temporarily unavailable", a cluster still electing.
                if exc.err_code != 10008 or asyncio.get_running_loop().time() > deadline:
                    raise
                log.info("durable.waiting_for_jetstream", error=exc.description)
                await asyncio.sleep(0.5)
            except nats.errors.TimeoutError:
                # A restarted cluster: no meta leader answers until it has elected one.
                if asyncio.get_running_loop().time() > deadline:
                    raise
                log.info("durable.waiting_for_jetstream", error="no answer from JetStream yet")

    async def run(self, stop: asyncio.Event) -> None:
        """Pull and apply writes until `stop` is set (the batch in hand is finished)."""
        while not stop.is_set():
            try:
                msgs = await self._sub.fetch(batch=BATCH, timeout=1.0)
            except nats.errors.TimeoutError:
                continue
            except Exception as exc:  # NATS restarting: the subscription comes back with it
                log.warning("durable.fetch_failed", error=repr(exc))
                await asyncio.sleep(0.5)
                continue
            await asyncio.gather(*(self._apply_in_order(lane) for lane in _lanes(msgs)))

    async def _apply_in_order(self, lane: list[Msg]) -> None:
        for msg in lane:
            await self._apply(msg)

    async def close(self) -> None:
        """Drop the pull subscription: draining the connection would otherwise wait out its
        timeout on it (a pull subscription has no pending messages to drain, only waiting
        fetches). Writes not yet pulled stay in the stream for the other handlers."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def _apply(self, msg: Msg) -> None:
        try:
            await self._apply_one(msg)
        except Exception:  # never lose the loop; the write is redelivered after ack_wait
            log.exception("durable.apply_failed", subject=msg.subject)

    async def _apply_one(self, msg: Msg) -> None:
        meta = msg.metadata
        request_id = (msg.headers or {}).get("Nats-Msg-Id") or (
            f"{meta.stream}:{meta.sequence.stream}"
        )
        parsed = parse_request_subject(msg.subject)
        ns, op = (parsed[0], parsed[1]) if parsed else ("", "")
        if not is_valid_namespace(ns) or op not in DURABLE_OPERATIONS:
            bad = InvalidRequest(
                f"{msg.subject!r} is not a durable write: publish memq.<ns>.<op> with op one of"
                f" {', '.join(DURABLE_OPERATIONS)}."
            )
            await self._reject(msg, ns, op, request_id, bad)
            return
        store = self.deps.store
        try:
            # Its claim and its replicas' wait go to the namespace's slot (`Store.locate`).
            ns = await store.locate(ns)
            state = await store.claims.claim(ns, request_id, CLAIM_MS)
        except Unavailable as exc:
            count_redis_error(self.deps.metrics, exc)
            await self._retry(msg, op, "redis unreachable")
            return
        if state is not None:
            if state == "pending":  # another handler is applying it right now
                self._count(op, "in_progress")
                await msg.nak(delay=1.0)
            elif await self._replicated(msg, ns, op, request_id):
                self.duplicates += 1
                self._count(op, "duplicate")
                log.info("durable.duplicate", request_id=request_id, state=state)
                await msg.ack()
            return
        published_ms = int(meta.timestamp.timestamp() * 1000)
        write = DurableWrite(request_id, published_ms, (self._created_us, meta.sequence.stream))
        # The headers carry the producer's trace context: the write's span is its child.
        _, error = await dispatch(op, msg.subject, msg.data, self.deps, write, msg.headers)
        if isinstance(error, Unavailable):
            with contextlib.suppress(Unavailable):  # else the claim lapses by itself
                await store.claims.release(ns, request_id)
            await self._retry(msg, op, error.message)
            return
        state = "done" if error is None else "rejected"
        try:
            if not await store.claims.finish(ns, request_id, state, APPLIED_KEEP_S):
                log.warning("durable.unmarked", request_id=request_id, why="its claim is gone")
        except Unavailable:
            # Applied, but not marked. On a cluster or with replicas the wait below finds no
            # mark and retries it; on one server Redis has the write: acknowledged. Either
            # way a redelivery applies it again (add and capture rewrite the same memory).
            log.warning("durable.unmarked", request_id=request_id, why="redis unreachable")
        if error is None:
            if not await self._replicated(msg, ns, op, request_id):
                return  # retried: its redelivery finds it applied and waits again
            self.applied += 1
            self._count(op, "applied")
            await msg.ack()
        else:
            await self._reject(msg, ns, op, request_id, error)

    async def _replicated(self, msg: Msg, ns: str, op: str, request_id: str) -> bool:
        """Whether the Redis replicas the deployment declares have every write so far (True
        where it declares none); if not, the message is retried, and its redelivery, finding
        the write applied, waits again before it is acknowledged (see `replicas`)."""
        try:
            if await self.deps.store.replicas.reached(ns, request_id):
                return True
        except (RedisError, OSError) as exc:
            await self._retry(msg, op, f"redis unreachable: {exc!r}")
            return False
        await self._retry(msg, op, "no Redis replica confirmed the write in time")
        return False

    async def _retry(self, msg: Msg, op: str, why: str) -> None:
        self.retried += 1
        self._count(op, "retried")
        delay = backoff_s(msg.metadata.num_delivered)
        log.warning("durable.retry", subject=msg.subject, delay_s=delay, why=why)
        await msg.nak(delay=delay)

    async def _reject(
        self, msg: Msg, ns: str, op: str, request_id: str, error: HandlerError
    ) -> None:
        self.rejected += 1
        self._count(op, "rejected")
        # The error may quote the request (an unknown field's name, a workspace's): its
        # secrets stay out of the event, which a webhook's stream keeps for days.
        why, _ = redact(error.message)
        log.warning("durable.rejected", request_id=request_id, code=error.code, error=why)
        if is_valid_namespace(ns):
            event = RejectedEvent(request_id=request_id, code=error.code, error=why)
            subject = rejected_subject(ns, op if op.isidentifier() else "unknown")
            await self.deps.publish(subject, _encoder.encode(event))
        await msg.ack()  # never retried: it can never succeed
