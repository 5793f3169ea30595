"""The client agents import: `MemoryBus.connect(...)`, then one `AgentMemory` per agent."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from datetime import datetime
from typing import (
    Any,
    Concatenate,
    Literal,
    ParamSpec,
    Self,
    TypedDict,
    TypeVar,
    Unpack,
    overload,
)

import msgspec
import nats
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import APIError, NoStreamResponseError
from opentelemetry.trace import SpanKind

from bus.errors import BusTimeout, InvalidRequest, Unavailable, error_for
from bus.tracing import sending
from contracts import limits
from contracts.messages import (
    AddReply,
    AddRequest,
    ApplyAction,
    ApplyReply,
    ApplyRequest,
    ArchiveStateRequest,
    ArchiveWorkspaceRequest,
    CaptureRequest,
    ClearByTypeReply,
    ClearByTypeRequest,
    CompactListReply,
    CompactRequest,
    CompactTimelineReply,
    Context,
    CreateStateRequest,
    CreateWorkspaceRequest,
    DeleteReply,
    DeleteRequest,
    DescribeReply,
    DescribeRequest,
    Event,
    ExportedMemory,
    ExportReply,
    ExportRequest,
    GetReply,
    GetRequest,
    HistoryReply,
    HistoryRequest,
    ImportedMemory,
    ImportReply,
    ImportRequest,
    ListDataReply,
    ListReply,
    ListRequest,
    ListStatesRequest,
    ListWorkspacesRequest,
    LoadStateRequest,
    LoadWorkspaceRequest,
    OkReply,
    PeopleReply,
    PeopleRequest,
    RecallReply,
    RecallRequest,
    ReconcileFact,
    ReconcileReply,
    ReconcileRequest,
    Request,
    SearchReply,
    SearchRequest,
    State,
    StateReply,
    TimelineReply,
    TimelineRequest,
    UpdateReply,
    UpdateRequest,
    UpdateWorkspaceRequest,
    Workspace,
    WorkspaceReply,
)
from contracts.subjects import (
    DEFAULT_NAMESPACE,
    DURABLE_STREAM,
    FULL_TRUST,
    TRUST_LEVELS,
    event_filter,
    is_valid_namespace,
    nats_servers,
    request_subject,
)

R = TypeVar("R", bound=msgspec.Struct)
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


Q = TypeVar("Q", bound=msgspec.Struct)
P = ParamSpec("P")


class _Envelope(msgspec.Struct):
    success: bool = False
    code: str = "internal"
    error: str = ""


_encoder = msgspec.json.Encoder()
_envelope = msgspec.json.Decoder(_Envelope)
_event_decoder = msgspec.json.Decoder(Event)
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def _opt_list(items: Sequence[Any] | None) -> list[Any] | None:
    return list(items) if items is not None else None


def _build(cls: type[Q], **fields: Any) -> Q:
    # Request structs check some rules on construction (tag patterns, query-or-embedding);
    # surface those as the same typed error the server would send.
    try:
        return cls(**fields)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(str(exc)) from None


def _signed(
    send: Any, build: Callable[..., Any], owner: str, op: str, returns: str, doc: str
) -> None:
    """What help() and inspect show of a write made from a builder: the builder's
    parameters, the write's own name, reply type and text."""
    send.__signature__ = inspect.signature(build).replace(return_annotation=returns)
    send.__annotations__ = {**build.__annotations__, "return": returns}
    send.__name__ = op
    send.__qualname__ = f"{owner}.{op}"
    send.__module__ = build.__module__
    send.__doc__ = doc


def _replying(
    op: str, reply: type[R], build: Callable[Concatenate[AgentMemory, P], Request], doc: str
) -> Callable[Concatenate[AgentMemory, P], Coroutine[Any, Any, R]]:
    """A write of `AgentMemory` from its request builder: the parameters are the builder's,
    spelled once; the write sends the request and waits for the handler's reply."""

    async def send(self: AgentMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.bus.request(op, build(self, *args, **kwargs), reply)

    _signed(send, build, "AgentMemory", op, reply.__name__, doc)
    return send


def _durably(
    op: str, build: Callable[Concatenate[AgentMemory, P], Request]
) -> Callable[Concatenate[DurableWrites, P], Coroutine[Any, Any, Accepted]]:
    """The same write through JetStream (see `DurableWrites`), from the same builder."""

    async def send(self: DurableWrites, /, *args: P.args, **kwargs: P.kwargs) -> Accepted:
        memory = self.memory
        return await memory.bus.durable(op, build(memory, *args, **kwargs), self.request_id)

    doc = f"`{op}` through JetStream: returns `Accepted` once the stream has it."
    _signed(send, build, "DurableWrites", op, "Accepted", doc)
    return send


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


class MemoryBus:
    """A connection to the memory bus for one namespace."""

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
        self._js: Any = None
        # Whether the durable stream takes plain publishes (`publish`); None: not known yet.
        self._stream: bool | None = None
        self._probing: asyncio.Future[None] | None = None

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

    async def __aenter__(self) -> MemoryBus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def agent(
        self,
        *,
        workflow_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        context: Context | None = None,
        workspace: str | None = None,
    ) -> AgentMemory:
        """A handle bound, for good, to one agent in one workflow (and, optionally, one
        session: its requests carry `context.session_id`, which writes record; and one
        workspace: its adds go into it, its reads look only inside it, and its state
        operations default to it)."""
        if session_id is not None:
            base = context or Context()
            context = _build(
                Context,
                session_id=session_id,
                goal=base.goal,
                memory=base.memory,
                constraints=base.constraints,
            )
        return AgentMemory(
            self,
            workflow_id=workflow_id,
            agent_id=agent_id,
            context=context,
            workspace=workspace,
        )

    async def request(self, op: str, body: Request | bytes, reply_type: type[R]) -> R:
        """Send one operation and decode its reply; errors raise typed `BusError`s."""
        with self._request_span(op) as (subject, headers):
            data = await self._send(op, subject, body, headers)
            env = _envelope.decode(data)
            if not env.success:
                raise error_for(env.code, env.error)
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

    # Workspaces belong to the namespace, not to an agent.

    async def create_workspace(
        self,
        name: str,
        *,
        description: str,
        root_folder: str,
        purpose: str,
        workflows: Sequence[str] = (),
        key_files: Sequence[str] = (),
        preferences: dict[str, Any] | None = None,
        context: Context | None = None,
    ) -> None:
        """Create a workspace; its name is unique in the namespace (else `Conflict`)."""
        req = _build(
            CreateWorkspaceRequest,
            name=name,
            description=description,
            root_folder=root_folder,
            purpose=purpose,
            workflows=list(workflows),
            key_files=list(key_files),
            preferences=preferences or {},
            context=context,
        )
        await self.request("create_workspace", req, OkReply)

    async def list_workspaces(
        self, *, include_archived: bool = False, context: Context | None = None
    ) -> ListDataReply:
        """`reply.data`: `{name, description}` of each workspace, oldest first."""
        req = ListWorkspacesRequest(include_archived=include_archived, context=context)
        return await self.request("list_workspaces", req, ListDataReply)

    async def load_workspace(self, name: str, *, context: Context | None = None) -> Workspace:
        req = _build(LoadWorkspaceRequest, name=name, context=context)
        return (await self.request("load_workspace", req, WorkspaceReply)).data

    async def update_workspace(
        self,
        name: str,
        *,
        description: str | None = None,
        root_folder: str | None = None,
        purpose: str | None = None,
        workflows: Sequence[str] | None = None,
        key_files: Sequence[str] | None = None,
        preferences: dict[str, Any] | None = None,
        is_archived: bool | None = None,
        context: Context | None = None,
    ) -> None:
        """Change a workspace's fields; `is_archived=False` restores an archived one."""
        req = _build(
            UpdateWorkspaceRequest,
            name=name,
            description=description,
            root_folder=root_folder,
            purpose=purpose,
            workflows=_opt_list(workflows),
            key_files=_opt_list(key_files),
            preferences=preferences,
            is_archived=is_archived,
            context=context,
        )
        await self.request("update_workspace", req, OkReply)

    async def archive_workspace(self, name: str, *, context: Context | None = None) -> None:
        """Hide a workspace from `list_workspaces` (its memories stay)."""
        req = _build(ArchiveWorkspaceRequest, name=name, context=context)
        await self.request("archive_workspace", req, OkReply)

    # Export and import: the whole namespace, every store (full trust).

    async def export_page(
        self,
        cursor: str = "0",
        *,
        ids: Sequence[str] | None = None,
        limit: int = 200,
        embeddings: bool = False,
    ) -> ExportReply:
        """One page of `export` (see `export` for the loop over pages)."""
        req = _build(
            ExportRequest, cursor=cursor, ids=_opt_list(ids), limit=limit, embeddings=embeddings
        )
        return await self.request("export", req, ExportReply)

    async def export(
        self, *, limit: int = 200, embeddings: bool = False
    ) -> AsyncIterator[list[ExportedMemory]]:
        """Every live memory of the namespace, whole, a page at a time (each memory once)."""
        seen: set[str] = set()
        cursor: str | None = "0"
        while cursor is not None:
            page = await self.export_page(cursor, limit=limit, embeddings=embeddings)
            cursor = page.cursor
            pending = page.pending
            while True:
                fresh = [m for m in page.memories if m.id not in seen]
                seen.update(m.id for m in fresh)
                if fresh:
                    yield fresh
                if not pending:
                    break
                # What did not fit that page, at most MAX_IDS a request (and again what of
                # those does not fit the next).
                ask, pending = pending[: limits.MAX_IDS], pending[limits.MAX_IDS :]
                page = await self.export_page(ids=ask, embeddings=embeddings)
                pending = page.pending + pending

    async def import_memories(self, memories: Sequence[ImportedMemory]) -> ImportReply:
        """Write exported memories back as they were (ids, times, expiry, counters); one
        whose id exists is left alone, so importing twice changes nothing. At most 100 a
        call, within the 256 KiB request limit. Through JetStream:
        `bus.durable("import", ImportRequest(memories=...), request_id)`."""
        return await self.request(
            "import", _build(ImportRequest, memories=list(memories)), ImportReply
        )

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


class EventStream:
    """An async iterator of `Event`s; close it (or use `async with`) to unsubscribe."""

    def __init__(self, sub: Any) -> None:
        self._sub = sub
        self.subject: str = sub.subject

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        async for msg in self._sub.messages:
            yield decode_event(msg)

    async def next(self, timeout: float = 5.0) -> Event:
        try:
            msg = await self._sub.next_msg(timeout=timeout)
        except NatsTimeoutError:
            raise BusTimeout(f"No event on {self.subject} within {timeout}s") from None
        return decode_event(msg)

    async def close(self) -> None:
        await self._sub.unsubscribe()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def decode_event(msg: Msg) -> Event:
    return _event_decoder.decode(msg.data)


class Filters(TypedDict, total=False):
    """What a read (`search`, `list`) may be narrowed by, on top of the handle's scope."""

    # both (default): this workflow's and general memories; workflow; general.
    scope: Literal["both", "workflow", "general"]
    # Only these types; only memories with ANY of these tags; naming ANY of these people.
    types: Sequence[str] | None
    tags: Sequence[str] | None
    people: Sequence[str] | None
    # Also memories a newer one superseded (default False).
    include_superseded: bool
    # Only this workspace's (default: the handle's, if it has one).
    workspace: str | None
    # v3: what was valid at this time, memories superseded since included (default: now,
    # current memories only).
    as_of: datetime | None


class AgentMemory:
    """One agent's memory tool: `workflow_id` and `agent_id` are fixed when it is made."""

    __slots__ = ("_agent_id", "_bus", "_context", "_workflow_id", "_workspace")

    def __init__(
        self,
        bus: MemoryBus,
        *,
        workflow_id: str | None,
        agent_id: str | None,
        context: Context | None = None,
        workspace: str | None = None,
    ) -> None:
        self._bus = bus
        self._workflow_id = workflow_id
        self._agent_id = agent_id
        self._context = context
        self._workspace = workspace

    @property
    def workspace(self) -> str | None:
        return self._workspace

    def _in_workspace(self, given: str | None) -> str:
        ws = given or self._workspace
        if ws is None:
            raise InvalidRequest(
                "States live in a workspace: pass `workspace=...` or make the handle with"
                " bus.agent(..., workspace=...)."
            )
        return ws

    @property
    def workflow_id(self) -> str | None:
        return self._workflow_id

    @property
    def agent_id(self) -> str | None:
        return self._agent_id

    @property
    def session_id(self) -> str | None:
        return self._context.session_id if self._context else None

    @property
    def context(self) -> Context | None:
        """The `context` block every request of this handle carries."""
        return self._context

    @property
    def bus(self) -> MemoryBus:
        return self._bus

    def _scoped(self, filters: Filters) -> dict[str, Any]:
        """A read's filters as request fields, in this handle's workflow and workspace."""
        fields: dict[str, Any] = dict(filters)
        for name in ("types", "tags", "people"):
            if name in fields:
                fields[name] = _opt_list(fields[name])
        fields["workspace"] = fields.get("workspace") or self._workspace
        return {**fields, "workflow_id": self._workflow_id, "context": self._context}

    def add_request(
        self,
        type: str,
        content: str | None = None,
        *,
        tags: Sequence[str] = (),
        importance: float | None = None,
        scope: Literal["general", "workflow"] | None = None,
        ttl_s: int | None = None,
        source: str | None = None,
        metadata: dict[str, Any] | None = None,
        embedding: Sequence[float] | None = None,
        dedup: Literal["exact", "semantic", "none"] = "exact",
        dedup_threshold: float | None = None,
        title: str | None = None,
        facts: Sequence[str] = (),
        narrative: str | None = None,
        related_files: Sequence[str] = (),
        related_people: Sequence[str] = (),
        supersedes: Sequence[str] = (),
        workspace: str | None = None,
        store: Literal["private", "shared", "social"] | None = None,
        valid_from: datetime | None = None,
        valid_until: datetime | None = None,
        idle_ttl_s: int | None = None,
    ) -> AddRequest:
        """The request of `add` (see it), with this handle's identity and workspace."""
        return _build(
            AddRequest,
            type=type,
            content=content,
            tags=list(tags),
            importance=importance,
            workflow_id=self._workflow_id,
            scope=scope,
            ttl_s=ttl_s,
            agent_id=self._agent_id,
            source=source,
            metadata=metadata,
            embedding=_opt_list(embedding),
            dedup=dedup,
            dedup_threshold=dedup_threshold,
            title=title,
            facts=list(facts),
            narrative=narrative,
            related_files=list(related_files),
            related_people=list(related_people),
            supersedes=list(supersedes),
            workspace=workspace or self._workspace,
            store=store,
            valid_from=valid_from,
            valid_until=valid_until,
            idle_ttl_s=idle_ttl_s,
            context=self._context,
        )

    add = _replying(
        "add",
        AddReply,
        add_request,
        """Store a memory. A repeat of live content (same type and scope) is not stored
        twice: the reply's `duplicate_of` names the memory whose `mention_count` went up.
        An observation may leave `content` out and give a `title` (with `narrative`,
        `facts`, ...): the content is then composed from them. `supersedes` names older
        memories this one replaces: reads then leave those out (reply: `superseded`,
        `missing`).

        `store` picks the trust-gated store (default: the connection's trust decides).
        `valid_from` / `valid_until` say when the fact held in the world (v3); a memory
        whose `valid_until` has passed is left out of reads unless they ask `as_of`.
        `idle_ttl_s` forgets it once no read has returned it for that long (never past
        its `ttl_s`).
        Through JetStream instead: `mem.durable.add(...)` (see `DurableWrites`).""",
    )

    def update_request(
        self,
        id: str,
        *,
        content: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        ttl_s: int | None = None,
        valid_from: datetime | msgspec.UnsetType | None = msgspec.UNSET,
        valid_until: datetime | msgspec.UnsetType | None = msgspec.UNSET,
    ) -> UpdateRequest:
        """The request of `update` (see it), with this handle's identity."""
        return _build(
            UpdateRequest,
            id=id,
            content=content,
            tags=_opt_list(tags),
            importance=importance,
            ttl_s=ttl_s,
            valid_from=valid_from,
            valid_until=valid_until,
            agent_id=self._agent_id,
            context=self._context,
        )

    update = _replying(
        "update",
        UpdateReply,
        update_request,
        """Change one memory; `ttl_s=0` makes it permanent; `valid_until=None` (or
        `valid_from=None`) opens that validity bound. Unknown id: `NotFound`.
        Through JetStream: `mem.durable.update(...)` (an unknown id then comes back as a
        `rejected` event).""",
    )

    async def search(
        self,
        query: str | None = None,
        *,
        limit: int = 10,
        min_score: float | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        embedding: Sequence[float] | None = None,
        mode: Literal["vector", "text", "hybrid"] | None = None,
        fusion: Literal["linear", "rrf"] | None = None,
        max_tokens: int | None = None,
        diversify: float | None = None,
        **filters: Unpack[Filters],
    ) -> SearchReply:
        """Memories ranked by relevance, importance and recency (`Filters` narrow them)."""
        req = _build(
            SearchRequest,
            query=query,
            limit=limit,
            min_score=min_score,
            since=since,
            until=until,
            embedding=_opt_list(embedding),
            mode=mode,
            fusion=fusion,
            max_tokens=max_tokens,
            diversify=diversify,
            **self._scoped(filters),
        )
        return await self._bus.request("search", req, SearchReply)

    async def describe(
        self,
        *,
        scope: Literal["both", "workflow", "general"] = "both",
        workspace: str | None = None,
    ) -> DescribeReply:
        req = _build(
            DescribeRequest,
            workflow_id=self._workflow_id,
            scope=scope,
            workspace=workspace or self._workspace,
            context=self._context,
        )
        return await self._bus.request("describe", req, DescribeReply)

    @overload
    async def list(
        self,
        *,
        mode: Literal["full"] = "full",
        limit: int = 20,
        offset: int = 0,
        max_tokens: int | None = None,
        **filters: Unpack[Filters],
    ) -> ListReply: ...

    @overload
    async def list(
        self,
        *,
        mode: Literal["compact"],
        limit: int = 20,
        offset: int = 0,
        max_tokens: int | None = None,
        **filters: Unpack[Filters],
    ) -> CompactListReply: ...

    async def list(
        self,
        *,
        mode: Literal["full", "compact"] = "full",
        limit: int = 20,
        offset: int = 0,
        max_tokens: int | None = None,
        **filters: Unpack[Filters],
    ) -> ListReply | CompactListReply:
        """Memories newest first, a page at a time (`Filters` narrow them)."""
        req = _build(
            ListRequest,
            mode=mode,
            limit=limit,
            offset=offset,
            max_tokens=max_tokens,
            **self._scoped(filters),
        )
        reply_type = CompactListReply if mode == "compact" else ListReply
        return await self._bus.request("list", req, reply_type)

    async def get(self, ids: Sequence[str]) -> GetReply:
        req = GetRequest(ids=list(ids), context=self._context)
        return await self._bus.request("get", req, GetReply)

    async def recall(
        self,
        message: str | Sequence[str],
        *,
        session_id: str | None = None,
        scope: Literal["both", "workflow", "general"] = "both",
        types: Sequence[str] | None = None,
        people: Sequence[str] | None = None,
        source: str = "user",
        turn: int | None = None,
        limit: int = 20,
        recent_s: int = 21600,
        min_importance: float = 0.8,
        dedup_threshold: float = 0.85,
        reinject_after: int = 10,
        max_tokens: int | None = None,
        include_superseded: bool = False,
        workspace: str | None = None,
        as_of: datetime | None = None,
    ) -> RecallReply:
        """Before a model turn: the memories to put in the prompt (`reply.block` is ready
        text), leaving out what this session was given in its last `reinject_after` turns.
        `message` is the turn's text, or a burst of short messages. The session is this
        handle's unless `session_id` is given."""
        sid = session_id or self.session_id
        if sid is None:
            raise InvalidRequest(
                "recall needs a session: bus.agent(..., session_id=...) or recall(session_id=...)"
            )
        req = _build(
            RecallRequest,
            message=message if isinstance(message, str) else None,
            messages=[] if isinstance(message, str) else list(message),
            session_id=sid,
            workflow_id=self._workflow_id,
            scope=scope,
            types=_opt_list(types),
            people=_opt_list(people),
            source=source,
            turn=turn,
            limit=limit,
            recent_s=recent_s,
            min_importance=min_importance,
            dedup_threshold=dedup_threshold,
            reinject_after=reinject_after,
            max_tokens=max_tokens,
            include_superseded=include_superseded,
            workspace=workspace or self._workspace,
            as_of=as_of,
            context=self._context,
        )
        return await self._bus.request("recall", req, RecallReply)

    @overload
    async def timeline(
        self,
        anchor: str,
        *,
        before: int = 5,
        after: int = 5,
        scope: Literal["both", "workflow", "general"] = "both",
        types: Sequence[str] | None = None,
        mode: Literal["compact"] = "compact",
        include_superseded: bool = False,
        as_of: datetime | None = None,
        workspace: str | None = None,
    ) -> CompactTimelineReply: ...

    @overload
    async def timeline(
        self,
        anchor: str,
        *,
        before: int = 5,
        after: int = 5,
        scope: Literal["both", "workflow", "general"] = "both",
        types: Sequence[str] | None = None,
        mode: Literal["full"],
        include_superseded: bool = False,
        as_of: datetime | None = None,
        workspace: str | None = None,
    ) -> TimelineReply: ...

    async def timeline(
        self,
        anchor: str,
        *,
        before: int = 5,
        after: int = 5,
        scope: Literal["both", "workflow", "general"] = "both",
        types: Sequence[str] | None = None,
        mode: Literal["compact", "full"] = "compact",
        include_superseded: bool = False,
        as_of: datetime | None = None,
        workspace: str | None = None,
    ) -> TimelineReply | CompactTimelineReply:
        """The memories just before and after `anchor` (an id) in this agent's scope (and
        workspace: the handle's unless given), oldest first;
        `reply.memories[reply.anchor_index]` is the anchor."""
        req = _build(
            TimelineRequest,
            anchor=anchor,
            before=before,
            after=after,
            workflow_id=self._workflow_id,
            scope=scope,
            types=_opt_list(types),
            mode=mode,
            include_superseded=include_superseded,
            as_of=as_of,
            workspace=workspace or self._workspace,
            context=self._context,
        )
        reply_type = TimelineReply if mode == "full" else CompactTimelineReply
        return await self._bus.request("timeline", req, reply_type)

    async def reconcile(
        self,
        facts: Sequence[str | ReconcileFact],
        *,
        limit: int = 3,
    ) -> ReconcileReply:
        """For facts an extractor (an LLM) proposes, the nearest current memories in this
        handle's workflow and workspace and a suggested action each: `noop` (known already),
        `supersede` (`target` says something else about it), `add`. Writes nothing."""
        req = _build(
            ReconcileRequest,
            facts=[ReconcileFact(content=f) if isinstance(f, str) else f for f in facts],
            workflow_id=self._workflow_id,
            workspace=self._workspace,
            limit=limit,
            context=self._context,
        )
        return await self._bus.request("reconcile", req, ReconcileReply)

    async def apply(self, actions: Sequence[ApplyAction | Mapping[str, Any]]) -> ApplyReply:
        """Write what an extractor decided (see `reconcile`) in one atomic step, in this
        handle's workflow, workspace and agent: all of `actions`, or, when any one is
        refused, none (the error names its index). Each is a contract struct (`ApplyAdd`,
        `ApplyUpdate`, `ApplySupersede`, `ApplyDelete`) or its JSON form, e.g.
        `{"action": "supersede", "id": old_id, "type": "fact", "content": "..."}`."""
        try:
            listed = [
                a if isinstance(a, msgspec.Struct) else msgspec.convert(a, ApplyAction)
                for a in actions
            ]
        except msgspec.ValidationError as exc:
            raise InvalidRequest(str(exc)) from None
        req = _build(
            ApplyRequest,
            actions=listed,
            workflow_id=self._workflow_id,
            workspace=self._workspace,
            agent_id=self._agent_id,
            context=self._context,
        )
        return await self._bus.request("apply", req, ApplyReply)

    async def people(
        self,
        query: str | None = None,
        *,
        scope: Literal["both", "workflow", "general"] = "both",
        limit: int = 20,
    ) -> PeopleReply:
        """Who the memories in scope name, most recently mentioned first; `query` matches
        part of a name, case-insensitively."""
        req = _build(
            PeopleRequest,
            query=query,
            workflow_id=self._workflow_id,
            scope=scope,
            limit=limit,
            context=self._context,
        )
        return await self._bus.request("people", req, PeopleReply)

    async def history(self, id: str) -> HistoryReply:
        """What happened to one memory, oldest first (readable for a while after a delete).
        Unknown id: `NotFound`."""
        req = _build(HistoryRequest, id=id, context=self._context)
        return await self._bus.request("history", req, HistoryReply)

    def delete_request(self, ids: Sequence[str]) -> DeleteRequest:
        """The request of `delete` (see it)."""
        return _build(DeleteRequest, ids=list(ids), context=self._context)

    delete = _replying(
        "delete",
        DeleteReply,
        delete_request,
        """Delete memories; ids not found come back in `missing`. Through JetStream:
        `mem.durable.delete(...)`.""",
    )

    async def clear_by_type(
        self, type: str, *, scope: Literal["workflow", "general"] = "workflow"
    ) -> ClearByTypeReply:
        req = _build(
            ClearByTypeRequest,
            type=type,
            workflow_id=self._workflow_id,
            scope=scope,
            context=self._context,
        )
        # Each call does a bounded share of the work; repeat until nothing remains.
        reply = await self._bus.request("clear_by_type", req, ClearByTypeReply)
        deleted = reply.deleted
        while reply.remaining:
            reply = await self._bus.request("clear_by_type", req, ClearByTypeReply)
            deleted += reply.deleted
        return ClearByTypeReply(deleted=deleted)

    async def compact(
        self,
        type: str,
        *,
        keep: int,
        by: Literal["importance", "recency", "accesses"],
        general: bool = False,
    ) -> ClearByTypeReply:
        """Keep the `keep` best current memories of `type` (by importance, newest, or most
        read) in this handle's workflow (or the general ones with `general`, or its
        workspace's when it has one and no workflow) and delete the rest; each deletion is
        announced and in the memory's history with reason "compacted"."""
        req = _build(
            CompactRequest,
            type=type,
            keep=keep,
            by=by,
            workflow_id=None if general else self._workflow_id,
            workspace=self._workspace,
            context=self._context,
        )
        reply = await self._bus.request("compact", req, ClearByTypeReply)
        deleted = reply.deleted
        while reply.remaining:  # each call does a bounded share of the work
            reply = await self._bus.request("compact", req, ClearByTypeReply)
            deleted += reply.deleted
        return ClearByTypeReply(deleted=deleted)

    # ------------------------------------------------------------------- states

    async def create_state(
        self,
        name: str,
        *,
        conversation_context: str,
        active_task: str,
        active_files: Sequence[str],
        next_steps: Sequence[str],
        description: str | None = None,
        tags: Sequence[str] = (),
        workspace: str | None = None,
    ) -> None:
        """Save an immutable, named save point in the workspace (this handle's unless
        given). Its name is unique in the workspace forever: a repeat is `Conflict`."""
        req = _build(
            CreateStateRequest,
            workspace=self._in_workspace(workspace),
            name=name,
            conversation_context=conversation_context,
            active_task=active_task,
            active_files=list(active_files),
            next_steps=list(next_steps),
            description=description,
            tags=list(tags),
            agent_id=self._agent_id,
            context=self._context,
        )
        await self._bus.request("create_state", req, OkReply)

    async def list_states(
        self, *, include_archived: bool = False, workspace: str | None = None
    ) -> ListDataReply:
        """`reply.data`: `{name, description}` of each state, oldest first."""
        req = ListStatesRequest(
            workspace=self._in_workspace(workspace),
            include_archived=include_archived,
            context=self._context,
        )
        return await self._bus.request("list_states", req, ListDataReply)

    async def load_state(self, name: str, *, workspace: str | None = None) -> State:
        req = _build(
            LoadStateRequest,
            workspace=self._in_workspace(workspace),
            name=name,
            context=self._context,
        )
        return (await self._bus.request("load_state", req, StateReply)).data

    async def archive_state(self, name: str, *, workspace: str | None = None) -> None:
        """Hide a state from `list_states`; it stays loadable, and its name stays taken."""
        req = _build(
            ArchiveStateRequest,
            workspace=self._in_workspace(workspace),
            name=name,
            context=self._context,
        )
        await self._bus.request("archive_state", req, OkReply)

    # ------------------------------------------------------------------- tool runs

    def capture_request(
        self,
        tool: str,
        *,
        args: dict[str, Any] | None = None,
        output: str = "",
        error: bool = False,
        duration_ms: float | None = None,
    ) -> CaptureRequest:
        """The `capture` body of one tool run, with this handle's identity."""
        return _build(
            CaptureRequest,
            tool=tool,
            args=args or {},
            output=output,
            error=error,
            duration_ms=duration_ms,
            agent_id=self._agent_id,
            workflow_id=self._workflow_id,
            workspace=self._workspace,
            context=self._context,
        )

    capture = _replying(
        "capture",
        AddReply,
        capture_request,
        """Store one tool run as a `trace` and wait for the reply (through JetStream:
        `mem.durable.capture(...)`). To record runs without ever waiting or failing, wrap
        the tool with `bus.capture.captured` instead.""",
    )

    @property
    def durable(self) -> DurableWrites:
        """This handle's writes through JetStream: `await mem.durable.add(...)` returns
        JetStream's `Accepted` once the write is stored (never lost, applied at most once).
        `mem.durable(request_id="...")` names the next write, so a retry is applied once."""
        return DurableWrites(self)

    async def subscribe(self, *, type: str | None = None, action: str | None = None) -> EventStream:
        """Follow this agent's workflow (or general memories, for an agent without one)."""
        return await self._bus.subscribe(
            self._workflow_id, general=self._workflow_id is None, type=type, action=action
        )


class DurableWrites:
    """An agent's writes through the JetStream stream MEMBUS_WRITES (`mem.durable`): each
    returns JetStream's `Accepted` once the write is stored, so it is not lost through
    handler, NATS or Redis restarts, and it is applied at most once; its outcome is the
    write's event, which carries `accepted.request_id` (a refused one: a `rejected` event).
    The parameters are those of the same method of `AgentMemory`."""

    __slots__ = ("memory", "request_id")

    def __init__(self, memory: AgentMemory, request_id: str | None = None) -> None:
        self.memory = memory
        # The Nats-Msg-Id of the next write; None: a new one each write.
        self.request_id = request_id

    def __call__(self, request_id: str) -> DurableWrites:
        """Name the write (JetStream's Nats-Msg-Id): a retry with the same id is stored
        once, within the stream's duplicate window."""
        return DurableWrites(self.memory, request_id)

    add = _durably("add", AgentMemory.add_request)
    update = _durably("update", AgentMemory.update_request)
    delete = _durably("delete", AgentMemory.delete_request)
    capture = _durably("capture", AgentMemory.capture_request)
