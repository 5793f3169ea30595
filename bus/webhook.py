"""Webhooks: a namespace's events (or one workflow's) delivered to an HTTP endpoint as signed
POSTs, in order, none missed while the receiver is down. `membus webhook` runs `serve`.

- Events are plain NATS publishes. To keep those a receiver has not taken yet, the
  namespace's event subjects `mem.<ns>.events.>` are captured by the JetStream stream
  `MEMBUS_EVENTS_<ns>`, which the first webhook of the namespace creates: file storage,
  interest retention (an event stays until every webhook that follows it has delivered it,
  and one no webhook follows is not kept), at most 7 days and 1 GiB (then the oldest go).
  Creating it is idempotent, so webhooks may start together; a stream that already takes
  those subjects (an operator's) is used as it is, and an existing stream's configuration is
  never changed here, so that an operator may tune its limits.
- Each webhook is a durable pull consumer named from its URL and its filter (namespace,
  workflow): a restarted `membus webhook` resumes where it stopped. A new one starts with the
  events published after it was created. At most one event is outstanding (max_ack_pending
  1), so events go out in stream order even when several processes share a consumer; an
  event is acknowledged after a 2xx only.
- A failed POST (no connection, timeout, 408, 425, 429, 5xx) is retried with exponential
  backoff from 0.5 s up to a cap (30 s by default; `Retry-After` is honoured up to the cap)
  for as long as it takes; in-progress acks hold the event meanwhile. Any other answer (3xx,
  4xx) is a refusal, usually a wrong URL or secret: retried the same way by default, so
  nothing is lost once it is fixed; with `on_4xx="skip"` the event is logged and dropped.
- Delivery is once in normal operation and at least once across crashes (a process killed
  between the receiver's 2xx and JetStream's ack delivers that event again): receivers
  dedupe on `X-Membus-Event-Id`, `<stream>:<stream created, µs>:<stream sequence>`, the
  same for every webhook that delivers the event.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import hashlib
import hmac
import http.client
import re
import signal
import ssl
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import nats
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BadRequestError, NotFoundError, ServiceUnavailableError

from bus.client import MemoryBus
from bus.errors import Unavailable
from contracts.subjects import PREFIX, WORKFLOW_ID_PATTERN, event_filter, is_valid_namespace

log = structlog.get_logger("membus.webhook")

STREAM_PREFIX = "MEMBUS_EVENTS_"
# How long, and how much, a namespace's stream keeps events no webhook has delivered yet.
STREAM_MAX_AGE_S = 7 * 24 * 3600.0
STREAM_MAX_BYTES = 1 << 30
CONSUMER_PREFIX = "membus-webhook-"
# A webhook that has not pulled for as long as its events are kept is gone: its consumer is
# removed, so that it no longer holds events for nobody.
CONSUMER_INACTIVE_S = STREAM_MAX_AGE_S
# An event held by a process that died is delivered again after ACK_WAIT_S; a live process
# holds it longer with an in-progress ack every PROGRESS_EVERY_S.
ACK_WAIT_S = 30.0
PROGRESS_EVERY_S = 10.0
ACK_ATTEMPTS = 3
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
TIMEOUT_S = 10.0
FETCH_WAIT_S = 1.0
# How long a webhook waits for JetStream at start (a cluster electing its leader).
START_WITHIN_S = 30.0
# Answers that mean "not now": retried like a failed connection.
RETRIED_STATUSES = frozenset({408, 425, 429})
REPLY_LOG_CHARS = 300

SIGNATURE_HEADER = "X-Membus-Signature"
EVENT_ID_HEADER = "X-Membus-Event-Id"
SUBJECT_HEADER = "X-Membus-Subject"

OnRefusal = Literal["retry", "skip"]
Verdict = Literal["delivered", "retry", "refused"]
_WORKFLOW_RE = re.compile(WORKFLOW_ID_PATTERN)
_UNSAFE_URL = re.compile(r"[\x00-\x20\x7f]")


class SettingError(ValueError):
    """A webhook setting that cannot work; `option` names the command-line option."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True, slots=True)
class Target:
    """Where the POSTs go, checked once."""

    https: bool
    host: str
    port: int
    # Path and query, as sent on the request line.
    path: str
    # Basic credentials from the URL's user part, if any.
    authorization: str | None

    @property
    def shown(self) -> str:
        """The URL for logs: no credentials, no query (either may hold a token)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.https else 'http'}://{host}:{self.port}{self.path.split('?')[0]}"


def parse_url(url: str) -> Target:
    """The target of `url`, or a SettingError saying what is wrong with it."""
    example = "e.g. https://example.com/hooks/membus"
    if not url:
        raise SettingError("--url", f"the URL is empty ({example})")
    if _UNSAFE_URL.search(url):
        raise SettingError(
            "--url",
            f"{url!r} is not a URL ({example}): spaces and control"
            " characters must be percent-encoded",
        )
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise SettingError("--url", f"{url!r}: the scheme must be http or https ({example})")
    if not parts.hostname:
        raise SettingError("--url", f"{url!r} names no host ({example})")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise SettingError("--url", f"{url!r}: the port must be a number 1-65535")
    https = parts.scheme.lower() == "https"
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if port is None:
        port = 443 if https else 80
    return Target(https, parts.hostname, port, path, authorization)


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """One webhook: where, what it follows, how it signs and retries. Checked when made."""

    url: str
    namespace: str
    workflow_id: str | None = None
    # Empty or None: bodies go unsigned. Never in a repr (nor, hence, a log line).
    secret: str | None = field(default=None, repr=False)
    timeout_s: float = TIMEOUT_S
    max_backoff_s: float = MAX_BACKOFF_S
    on_4xx: OnRefusal = "retry"

    def __post_init__(self) -> None:
        parse_url(self.url)
        if not is_valid_namespace(self.namespace):
            raise SettingError(
                "--namespace", f"{self.namespace!r} must match [A-Za-z0-9_-]{{1,64}}"
            )
        if self.workflow_id is not None and not _WORKFLOW_RE.match(self.workflow_id):
            raise SettingError(
                "WORKFLOW", f"{self.workflow_id!r} is not a workflow id ([A-Za-z0-9_-]{{1,128}})"
            )
        if not 0 < self.timeout_s <= 300:
            raise SettingError("--timeout", "the timeout is more than 0 and at most 300 seconds")
        if not FIRST_BACKOFF_S <= self.max_backoff_s <= 3600:
            raise SettingError(
                "--max-backoff", f"the longest backoff is {FIRST_BACKOFF_S} to 3600 seconds"
            )
        if self.on_4xx not in ("retry", "skip"):
            raise SettingError("--on-4xx", f"{self.on_4xx!r}: retry or skip")

    @property
    def target(self) -> Target:
        return parse_url(self.url)

    @property
    def filter_subject(self) -> str:
        return event_filter(self.namespace, self.workflow_id)


# ---------------------------------------------------------------------------- the pure parts


def stream_name(namespace: str) -> str:
    return f"{STREAM_PREFIX}{namespace}"


def consumer_name(url: str, filter_subject: str) -> str:
    """The durable consumer of a webhook: the same URL and filter (namespace, workflow) give
    the same consumer, hence the same place in the stream. The secret is not part of it, so
    that rotating it keeps the place."""
    digest = hashlib.sha256(f"{filter_subject}\n{url}".encode()).hexdigest()[:20]
    return f"{CONSUMER_PREFIX}{digest}"


def signature(secret: str, body: bytes) -> str:
    """`X-Membus-Signature`'s value: the hex HMAC-SHA256 of the body, keyed with the secret's
    UTF-8 bytes."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def event_id(stream: str, created_us: int, sequence: int) -> str:
    """An event's id: its place in the stream, and the stream's creation time (a stream made
    anew starts its sequence at 1 again)."""
    return f"{stream}:{created_us}:{sequence}"


def verdict(status: int | None) -> Verdict:
    """What an answer means: taken, try again later, or refused."""
    if status is None or status in RETRIED_STATUSES or status >= 500:
        return "retry"
    if 200 <= status < 300:
        return "delivered"
    return "refused"


def backoff_s(attempt: int, cap: float, retry_after: float | None = None) -> float:
    """The wait after failed attempt number `attempt` (1, 2, ...): 0.5 s doubling, or the
    receiver's `Retry-After`, never more than `cap`."""
    if retry_after is not None:
        return min(cap, max(0.0, retry_after))
    return min(cap, FIRST_BACKOFF_S * 2 ** min(attempt - 1, 32))


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """A `Retry-After` header in seconds: delta-seconds or an HTTP date; None if absent or
    unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def covers(pattern: str, subject: str) -> bool:
    """Whether every subject that `subject` (wildcards allowed) matches also matches
    `pattern`: a stream on `pattern` then keeps all of `subject`."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return i < len(have)
        if i >= len(have) or have[i] == ">":
            return False
        if token != "*" and token != have[i]:
            return False
    return len(have) == len(want)


# ---------------------------------------------------------------------------- HTTP


@dataclass(frozen=True, slots=True)
class Answer:
    """How a POST went: the status, or (None) the error that kept it from an answer."""

    status: int | None
    error: str | None = None
    retry_after_s: float | None = None
    text: str = ""


def post(
    target: Target,
    body: bytes,
    headers: dict[str, str],
    timeout: float,
    tls: ssl.SSLContext | None = None,
) -> Answer:
    """One POST on a connection of its own (closed after it: a reused connection that the
    server had closed would make a request that may or may not have been seen). Blocking:
    run it in a thread. HTTPS checks the certificate against the system's CAs
    (`SSL_CERT_FILE` and `SSL_CERT_DIR` point elsewhere) unless `tls` says otherwise."""
    conn: http.client.HTTPConnection
    try:
        if target.https:
            conn = http.client.HTTPSConnection(
                target.host,
                target.port,
                timeout=timeout,
                context=tls or ssl.create_default_context(),
            )
        else:
            conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout)
        try:
            conn.request("POST", target.path, body=body, headers=headers)
            reply = conn.getresponse()
            text = reply.read(REPLY_LOG_CHARS).decode("utf-8", "replace")
            return Answer(reply.status, None, retry_after_s(reply.getheader("Retry-After")), text)
        finally:
            conn.close()
    # OSError: refused, reset, timed out, TLS; ValueError: a host name IDNA cannot encode.
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}")


def _user_agent() -> str:
    try:
        return f"membus-webhook/{metadata.version('memory-bus')}"
    except metadata.PackageNotFoundError:
        return "membus-webhook"


# ---------------------------------------------------------------------------- JetStream


def stream_config(namespace: str, replicas: int = 1) -> api.StreamConfig:
    return api.StreamConfig(
        name=stream_name(namespace),
        description=f"memory-bus events of {namespace}, kept until its webhooks deliver them",
        subjects=[f"{PREFIX}.{namespace}.events.>"],
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.INTEREST,
        max_age=STREAM_MAX_AGE_S,
        max_bytes=STREAM_MAX_BYTES,
        discard=api.DiscardPolicy.OLD,
        num_replicas=replicas,
    )


def consumer_config(name: str, filter_subject: str, shown_url: str) -> api.ConsumerConfig:
    return api.ConsumerConfig(
        durable_name=name,
        description=f"membus webhook to {shown_url}",
        deliver_policy=api.DeliverPolicy.NEW,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=ACK_WAIT_S,
        max_deliver=-1,
        max_ack_pending=1,
        filter_subject=filter_subject,
        inactive_threshold=CONSUMER_INACTIVE_S,
    )


async def ensure_stream(
    js: JetStreamContext, namespace: str, filter_subject: str, replicas: int = 1
) -> api.StreamInfo:
    """The stream that keeps `filter_subject`'s events: one that already takes them, or the
    namespace's `MEMBUS_EVENTS_<ns>`, created if need be (by as many webhooks at once as
    like: an identical creation is a no-op, and a stream of that name is kept as it is)."""
    wanted = stream_config(namespace, replicas)
    for _ in range(3):
        try:
            holder: str | None = await js.find_stream_name_by_subject(filter_subject)
        except NotFoundError:
            holder = None
        if holder is not None:
            info = await js.stream_info(holder)
            subjects = info.config.subjects or []
            if not any(covers(s, filter_subject) for s in subjects):
                raise Unavailable(
                    f"The JetStream stream {holder} takes part of {filter_subject} but not"
                    f" all of it (its subjects: {', '.join(subjects) or 'none'}), and JetStream"
                    " allows no second stream over the same subjects: widen it to"
                    f" {PREFIX}.{namespace}.events.> or delete it."
                )
            return info
        try:
            return await js.add_stream(wanted)
        except BadRequestError as exc:
            # 10058: the name is taken with another configuration (tuned by an operator, or
            # made by another version): keep it, if it takes these subjects (looked up
            # again). 10065: another stream took them meanwhile: look again.
            if exc.err_code not in (10058, 10065):
                raise
    raise Unavailable(
        f"The JetStream stream {wanted.name} exists but does not take {filter_subject}: give"
        f" it the subject {PREFIX}.{namespace}.events.> or delete it."
    )


def _micros(at: datetime | None) -> int:
    return 0 if at is None else int(at.timestamp() * 1_000_000)


def _replicas(nc: NatsClient) -> int:
    """Copies of a new stream: one per server the client knows (its cluster), up to 3."""
    return min(3, max(1, len(nc.servers)))


async def _keep_in_progress(msg: Msg) -> None:
    """Tell JetStream, until cancelled, that `msg` is still being delivered."""
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        with contextlib.suppress(Exception):  # a reconnect: the next one will do
            await msg.in_progress()


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


# ---------------------------------------------------------------------------- the webhook


class Webhook:
    """Pulls the events of one filter from the stream and POSTs them, one at a time."""

    def __init__(self, nc: NatsClient, settings: WebhookSettings) -> None:
        self.nc = nc
        self.settings = settings
        self.target = settings.target
        self.js = nc.jetstream()
        self.filter = settings.filter_subject
        self.consumer = consumer_name(settings.url, self.filter)
        self.stream = ""
        self.delivered = self.skipped = 0
        self._created_us = 0
        self._secret = settings.secret or None
        self._tls = ssl.create_default_context() if self.target.https else None
        self._headers = {
            "Content-Type": "application/json",
            "User-Agent": _user_agent(),
            "Connection": "close",
        }
        if self.target.authorization:
            self._headers["Authorization"] = self.target.authorization

    def headers(self, body: bytes, eid: str, subject: str) -> dict[str, str]:
        headers = {**self._headers, EVENT_ID_HEADER: eid, SUBJECT_HEADER: subject}
        if self._secret:
            headers[SIGNATURE_HEADER] = signature(self._secret, body)
        return headers

    async def setup(self) -> JetStreamContext.PullSubscription:
        """Find or create the stream and the consumer; the pull subscription bound to it."""
        info = await ensure_stream(
            self.js, self.settings.namespace, self.filter, _replicas(self.nc)
        )
        self.stream = info.config.name or ""
        self._created_us = _micros(info.created)
        config = consumer_config(self.consumer, self.filter, self.target.shown)
        consumer = await self.js.add_consumer(self.stream, config)
        sub = await self.js.pull_subscribe_bind(durable=self.consumer, stream=self.stream)
        log.info(
            "webhook.ready",
            stream=self.stream,
            consumer=self.consumer,
            filter=self.filter,
            url=self.target.shown,
            waiting=consumer.num_pending,
            signed=self._secret is not None,
        )
        return sub

    async def _start(self, stop: asyncio.Event) -> JetStreamContext.PullSubscription | None:
        """`setup`, waiting out a JetStream not ready yet; a clear error when there is none."""
        deadline = time.monotonic() + START_WITHIN_S
        where = self.nc.connected_url.geturl() if self.nc.connected_url else "NATS"
        while True:
            try:
                return await self.setup()
            except (ServiceUnavailableError, nats.errors.TimeoutError) as exc:
                code = getattr(exc, "err_code", None)
                # No err_code: nats-py's form of "no responders", nothing serves the
                # JetStream API; 10039: JetStream is off for this account.
                if isinstance(exc, ServiceUnavailableError) and code in (None, 10039):
                    raise Unavailable(
                        f"{where} has no JetStream for this account, which a webhook needs to"
                        " keep events while its receiver is down: start nats-server with -js"
                        " (make up does), or enable JetStream for the account."
                    ) from None
                # 10008: a cluster still electing its JetStream leader; a timeout: the same,
                # or a NATS user that may not use $JS.API.
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"JetStream on {where} did not answer within {START_WITHIN_S:.0f}s: is"
                        " it on (nats-server -js), and may this NATS user use $JS.API.>?"
                    ) from None
                log.info("webhook.waiting_for_jetstream", error=repr(exc))
                if await _stopped_within(stop, 1.0):
                    return None
            except APIError as exc:
                raise Unavailable(
                    f"JetStream refused the webhook's stream or consumer: {exc.description}"
                ) from None

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver events until `stop` is set (the event in hand is finished or left for the
        next process first)."""
        sub = await self._start(stop)
        failures = 0
        while sub is not None and not stop.is_set():
            try:
                msgs = await sub.fetch(1, timeout=FETCH_WAIT_S)
            except nats.errors.TimeoutError:
                failures = 0
                continue
            except Exception as exc:  # NATS reconnecting, or the consumer gone
                failures += 1
                log.warning("webhook.fetch_failed", error=repr(exc), failures=failures)
                if await _stopped_within(stop, 1.0):
                    break
                if failures % 5 == 0:  # the stream or consumer may have been deleted
                    try:
                        fresh = await self.setup()
                    except Exception as again:
                        log.warning("webhook.setup_failed", error=repr(again))
                    else:
                        with contextlib.suppress(Exception):
                            await sub.unsubscribe()
                        sub = fresh
                continue
            failures = 0
            for msg in msgs:
                await self.deliver(msg, stop)
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        log.info("webhook.stopped", delivered=self.delivered, skipped=self.skipped)

    async def deliver(self, msg: Msg, stop: asyncio.Event) -> None:
        """POST one event until the receiver takes it (then ack it), refuses it with
        `on_4xx="skip"` (ack it too), or the webhook stops (nak: the next process has it)."""
        meta = msg.metadata
        eid = event_id(meta.stream, self._created_us, meta.sequence.stream)
        bound = log.bind(event_id=eid, subject=msg.subject)
        if stop.is_set():
            await msg.nak()
            return
        headers = self.headers(msg.data, eid, msg.subject)
        progress = asyncio.create_task(_keep_in_progress(msg))
        try:
            attempt = 0
            while True:
                attempt += 1
                started = time.monotonic()
                answer = await asyncio.to_thread(
                    post, self.target, msg.data, headers, self.settings.timeout_s, self._tls
                )
                ms = round((time.monotonic() - started) * 1000, 1)
                outcome = verdict(answer.status)
                if outcome == "delivered":
                    await self._ack(msg, bound)
                    self.delivered += 1
                    bound.info(
                        "webhook.delivered",
                        status=answer.status,
                        attempts=attempt,
                        ms=ms,
                        redelivered=meta.num_delivered > 1,
                    )
                    return
                if outcome == "refused" and self.settings.on_4xx == "skip":
                    await self._ack(msg, bound)
                    self.skipped += 1
                    bound.error("webhook.skipped", status=answer.status, reply=answer.text)
                    return
                wait = backoff_s(attempt, self.settings.max_backoff_s, answer.retry_after_s)
                fields = {
                    "status": answer.status,
                    "error": answer.error,
                    "reply": answer.text or None,
                    "attempt": attempt,
                    "ms": ms,
                    "retry_in_s": wait,
                }
                if outcome == "refused":
                    fields["hint"] = "the receiver refused it: check the URL and the secret"
                report = bound.error if outcome == "refused" else bound.warning
                report("webhook.retry", **{k: v for k, v in fields.items() if v is not None})
                if await _stopped_within(stop, wait):
                    with contextlib.suppress(Exception):
                        await msg.nak()
                    bound.info("webhook.left_for_later", attempts=attempt)
                    return
        finally:
            progress.cancel()

    async def _ack(self, msg: Msg, bound: Any) -> None:
        """Acknowledge and wait for JetStream to confirm, so that the next event is only
        pulled once this one is done with."""
        for attempt in range(1, ACK_ATTEMPTS + 1):
            try:
                await msg.ack_sync(timeout=2.0)
                return
            except Exception as exc:
                if attempt == ACK_ATTEMPTS:
                    bound.warning(
                        "webhook.ack_failed",
                        error=repr(exc),
                        note="delivered; it may be delivered again with the same event id",
                    )
                else:
                    await asyncio.sleep(0.5)


async def serve(nats_url: str, settings: WebhookSettings) -> None:
    """Run one webhook until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
    log.info(
        "webhook.start",
        url=settings.target.shown,
        ns=settings.namespace,
        workflow_id=settings.workflow_id,
        on_4xx=settings.on_4xx,
    )
    if not settings.secret:
        log.warning(
            "webhook.unsigned", note="no secret: receivers cannot check where POSTs come from"
        )
    try:
        bus = await MemoryBus.connect(nats_url, namespace=settings.namespace, connect_within=10.0)
        async with bus:
            await Webhook(bus.nc, settings).run(stop)
    finally:
        for sig in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
