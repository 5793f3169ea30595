"""The inspection page's Starlette app: one static page, JSON endpoints over the SDK, and a
Server-Sent Events stream of the namespace's live events.

Every endpoint is a read (GET): the page inspects, it never changes a memory. The page's
script builds its DOM with `textContent` only, and the Content-Security-Policy below refuses
inline scripts, so an untrusted memory cannot run code in it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Collection, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Literal, cast
from urllib.parse import quote, unquote

import msgspec
import structlog
from nats.errors import TimeoutError as NatsTimeoutError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bus.client import MemoryBus
from bus.errors import BusError, InvalidRequest, NotFound
from contracts.messages import CompactMemory, Event, Memory, RejectedEvent, preview
from contracts.subjects import event_filter

log = structlog.get_logger("membus.ui")

ReadScope = Literal["both", "workflow", "general"]
SearchMode = Literal["vector", "text", "hybrid"]

# A comment line this often keeps proxies from closing an idle stream, and finds a client
# that left without a clean close.
KEEPALIVE_S = 15.0
# Events a slow page may fall behind by before NATS drops them for this subscription.
PENDING_EVENTS = 10_000
# The browser's wait before it reconnects a dropped stream.
RETRY_MS = 3000

_STATUS = {
    "invalid_request": 400,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    "unavailable": 503,
    "timeout": 504,
    "internal": 500,
}
_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(Event)
_rejected_decoder = msgspec.json.Decoder(RejectedEvent)


@dataclass
class UIState:
    """What the app shares with its server: `closing` ends every event stream (uvicorn
    otherwise waits for them at shutdown), `streams` counts the open ones."""

    closing: asyncio.Event = field(default_factory=asyncio.Event)
    streams: int = 0


def json_response(data: Any, status: int = 200) -> Response:
    return Response(
        _encoder.encode(data),
        status_code=status,
        media_type="application/json",
        headers={"cache-control": "no-store"},
    )


def error_response(exc: BusError) -> Response:
    return json_response({"error": exc.message, "code": exc.code}, _STATUS.get(exc.code, 502))


# ------------------------------------------------------------------- query parameters


def _text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name, "").strip()
    return value or None


def _many(request: Request, name: str) -> list[str] | None:
    """A list filter: repeated (`?tag=a&tag=b`) or comma-separated (`?tag=a,b`)."""
    items = [
        part.strip() for value in request.query_params.getlist(name) for part in value.split(",")
    ]
    return [item for item in items if item] or None


def _int(request: Request, name: str, default: int) -> int:
    raw = _text(request, name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidRequest(f"`{name}` must be a whole number, not {raw!r}") from None


def _choice(request: Request, name: str, allowed: tuple[str, ...], default: str | None) -> Any:
    value = _text(request, name)
    if value is None:
        return default
    if value not in allowed:
        raise InvalidRequest(f"`{name}` must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _scope(request: Request) -> ReadScope:
    return cast(ReadScope, _choice(request, "scope", ("both", "workflow", "general"), "both"))


def _flag(request: Request, name: str) -> bool:
    return (_text(request, name) or "").lower() in ("1", "true", "yes", "on")


def _instant(request: Request, name: str) -> datetime | None:
    """A point in time (ISO 8601); without an offset it is UTC, as in the protocol."""
    raw = _text(request, name)
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidRequest(
            f"`{name}` must be a date and time (ISO 8601, e.g. 2025-06-01T09:00:00Z), not {raw!r}"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# ------------------------------------------------------------------- the page's own replies


class ListEntry(CompactMemory, kw_only=True):
    """A memory of the list as the page shows it: its compact form, with (v4) its
    `version` and `key` (the protocol's compact form has neither)."""

    version: int = 1
    key: str | None = None


class MemoryPage(msgspec.Struct, kw_only=True):
    """A page of the list: as `list`'s compact reply, of `ListEntry`s."""

    count: int
    total: int
    memories: list[ListEntry]
    truncated: bool = False


def list_entry(memory: Memory) -> ListEntry:
    return ListEntry(
        id=memory.id,
        type=memory.type,
        preview=preview(memory.content),
        tags=memory.tags,
        importance=memory.importance,
        workflow_id=memory.workflow_id,
        created_at=memory.created_at,
        version=memory.version,
        key=memory.key,
    )


class TimelineEntry(ListEntry, kw_only=True):
    """A memory of a timeline as the page shows it: its list form, and what says it no
    longer holds (v3): `superseded_by`, and `valid_until` once passed."""

    superseded_by: str | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None


class Timeline(msgspec.Struct, kw_only=True):
    """A timeline as the page reads it: oldest first, `memories[anchor_index]` the anchor."""

    memories: list[TimelineEntry]
    anchor_index: int
    truncated: bool = False


def timeline_entry(memory: Memory) -> TimelineEntry:
    return TimelineEntry(
        **msgspec.structs.asdict(list_entry(memory)),
        superseded_by=memory.superseded_by,
        valid_from=memory.valid_from,
        valid_until=memory.valid_until,
    )


# ------------------------------------------------------------------- endpoints

Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]


def _api(
    bus: MemoryBus, handler: Callable[[MemoryBus, Request], Coroutine[Any, Any, Any]]
) -> Endpoint:
    """A JSON endpoint: the handler's value as JSON, a `BusError` as `{error, code}` with
    the HTTP status of its code."""

    async def endpoint(request: Request) -> Response:
        try:
            return json_response(await handler(bus, request))
        except BusError as exc:
            log.info("ui.api_error", path=request.url.path, code=exc.code, error=exc.message)
            return error_response(exc)

    return endpoint


async def info(bus: MemoryBus, request: Request) -> dict[str, str]:
    return {"namespace": bus.namespace, "trust": bus.trust}


async def describe(bus: MemoryBus, request: Request) -> Any:
    mem = bus.agent(workflow_id=_text(request, "workflow"))
    return await mem.describe(scope=_scope(request), workspace=_text(request, "workspace"))


async def list_memories(bus: MemoryBus, request: Request) -> MemoryPage:
    """Read in full (a list counts no access), then cut to previews with each memory's
    version and key."""
    mem = bus.agent(workflow_id=_text(request, "workflow"))
    reply = await mem.list(
        mode="full",
        types=_many(request, "type"),
        tags=_many(request, "tag"),
        scope=_scope(request),
        limit=_int(request, "limit", 20),
        offset=_int(request, "offset", 0),
        include_superseded=_flag(request, "superseded"),
        workspace=_text(request, "workspace"),
        as_of=_instant(request, "as_of"),
    )
    return MemoryPage(
        count=reply.count,
        total=reply.total,
        memories=[list_entry(memory) for memory in reply.memories],
        truncated=reply.truncated,
    )


async def search(bus: MemoryBus, request: Request) -> Any:
    query = _text(request, "q")
    if query is None:
        raise InvalidRequest("Type something to search for (`q`).")
    mem = bus.agent(workflow_id=_text(request, "workflow"))
    mode = cast(SearchMode | None, _choice(request, "mode", ("vector", "text", "hybrid"), None))
    return await mem.search(
        query,
        scope=_scope(request),
        types=_many(request, "type"),
        tags=_many(request, "tag"),
        limit=_int(request, "limit", 20),
        mode=mode,
        include_superseded=_flag(request, "superseded"),
        workspace=_text(request, "workspace"),
        as_of=_instant(request, "as_of"),
    )


async def get_memory(bus: MemoryBus, request: Request) -> Any:
    """One memory, whole, read with `export`: inspecting it does not count an access (a
    `get` would), so the page shows the counters as the agents left them."""
    id_ = request.path_params["id"]
    reply = await bus.export_page(ids=[id_])
    if not reply.memories:
        raise NotFound(f"No memory {id_!r} (deleted, expired, or never stored).")
    memory = reply.memories[0]
    memory.content_hash = ""  # the dedup key means nothing to a reader
    return memory


async def history(bus: MemoryBus, request: Request) -> Any:
    return await bus.agent().history(request.path_params["id"])


async def timeline(bus: MemoryBus, request: Request) -> Timeline:
    """Around one memory, as `workflow` sees it (empty: the general memories), superseded
    and ended memories included and marked so. Without a `workflow` parameter, as the
    memory's own workflow does (one more read). Read in full (a compact timeline does not
    say what was superseded or ended), then cut to previews."""
    id_ = request.path_params["id"]
    if "workflow" in request.query_params:
        workflow = _text(request, "workflow")
    else:
        workflow = (await get_memory(bus, request)).workflow_id
    reply = await bus.agent(workflow_id=workflow).timeline(
        id_,
        before=_int(request, "before", 5),
        after=_int(request, "after", 5),
        scope=_scope(request),
        mode="full",
        include_superseded=True,  # the anchor itself may be superseded or ended
    )
    return Timeline(
        memories=[timeline_entry(memory) for memory in reply.memories],
        anchor_index=reply.anchor_index,
        truncated=reply.truncated,
    )


async def workspaces(bus: MemoryBus, request: Request) -> Any:
    return await bus.list_workspaces(include_archived=_flag(request, "archived"))


def _segments(request: Request, prefix: str) -> list[str]:
    """The percent-decoded segments of the path after `prefix`, split on the raw path: a
    workspace or state name may hold a `/` (sent as %2F)."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(request.url.path)
    return [unquote(part) for part in path.removeprefix(prefix).split("/")]


async def workspace(bus: MemoryBus, request: Request) -> dict[str, Any]:
    segments = _segments(request, "/api/workspaces/")
    if len(segments) != 1:
        raise InvalidRequest("Use /api/workspaces/<name>, the name URL-encoded.")
    name = segments[0]
    data = await bus.load_workspace(name)
    states = await bus.agent(workspace=name).list_states(include_archived=True)
    return {"workspace": data, "states": states.data}


async def load_state(bus: MemoryBus, request: Request) -> Any:
    segments = _segments(request, "/api/states/")
    if len(segments) != 2:
        raise InvalidRequest("Use /api/states/<workspace>/<name>, both URL-encoded.")
    return await bus.agent(workspace=segments[0]).load_state(segments[1])


# ------------------------------------------------------------------- live events


class EventStreamResponse(Response):
    """`text/event-stream` of every event of the namespace: one `data:` line of JSON per
    event (`event: rejected` for a durable write that was refused), `event: ready` once the
    subscription is in place. It ends when the client goes, when the server shuts down
    (`UIState.closing`), or when the NATS connection closes."""

    def __init__(self, bus: MemoryBus, state: UIState) -> None:
        # Not Response.__init__: it would declare a Content-Length (of an empty body).
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
        ]
        self.bus = bus
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Subscribed (and flushed, so the server has it) before `ready`: a page that saw
        # `ready` misses no later event.
        sub = await self.bus.nc.subscribe(
            event_filter(self.bus.namespace),
            pending_msgs_limit=PENDING_EVENTS,
        )
        self.state.streams += 1
        tasks: list[asyncio.Task[Any]] = []
        try:
            await self.bus.nc.flush()
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await send(_chunk(f"retry: {RETRY_MS}\nevent: ready\ndata: {{}}\n\n".encode()))
            tasks = [
                asyncio.create_task(self._pump(sub, send)),
                asyncio.create_task(_until_disconnect(receive)),
                asyncio.create_task(self.state.closing.wait()),
            ]
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if tasks[1] not in done:
                with contextlib.suppress(OSError):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.state.streams -= 1
            # The connection may be closing or closed already.
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _pump(self, sub: Any, send: Send) -> None:
        while True:
            frame: bytes | None
            try:
                msg = await sub.next_msg(timeout=KEEPALIVE_S)
            except NatsTimeoutError:
                frame = b": keepalive\n\n"
            except Exception as exc:  # the connection closed: end the stream
                log.info("ui.events_ended", reason=type(exc).__name__)
                return
            else:
                frame = _frame(msg.subject, msg.data)
                if frame is None:
                    continue
            try:
                await send(_chunk(frame))
            except OSError:  # the client went away mid-write
                return


def _frame(subject: str, data: bytes) -> bytes | None:
    """One event as an SSE frame, re-encoded from the contract's struct (never passed on
    unread); None for a message that is neither."""
    try:
        # mem.<ns>.events.<scope>.<type>.<action>: refused durable writes use scope
        # `_rejected`, which no workflow id may be.
        if subject.split(".")[3:4] == ["_rejected"]:
            rejected = _rejected_decoder.decode(data)
            return b"event: rejected\ndata: " + _encoder.encode(rejected) + b"\n\n"
        event = _event_decoder.decode(data)
    except msgspec.DecodeError:
        log.warning("ui.undecodable_event", subject=subject)
        return None
    return b"data: " + _encoder.encode(event) + b"\n\n"


def _chunk(body: bytes) -> Message:
    return {"type": "http.response.body", "body": body, "more_body": True}


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


# ------------------------------------------------------------------- the app


def _static(name: str) -> Endpoint:
    body = (resources.files("bus.ui") / "static" / name).read_bytes()
    headers = {"cache-control": "no-cache", **_SECURITY_HEADERS}

    async def endpoint(request: Request) -> Response:
        return Response(body, media_type=_STATIC[name], headers=headers)

    return endpoint


class HostCheck:
    """Refuse a request whose Host header names a host not in `allowed`: without it, a web
    page anywhere could reach a loopback-bound page through DNS rebinding and read every
    memory."""

    def __init__(self, app: ASGIApp, allowed: Collection[str]) -> None:
        self.app = app
        self.allowed = {host.lower().strip("[]") for host in allowed}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if _hostname(host) not in self.allowed:
                response = json_response(
                    {"error": f"Host {host!r} is not served here", "code": "forbidden"}, 403
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _hostname(header: str) -> str:
    if header.startswith("["):  # [::1]:8484
        return header[1:].partition("]")[0].lower()
    return header.partition(":")[0].lower()


def make_app(bus: MemoryBus, *, allowed_hosts: Collection[str] | None = None) -> Starlette:
    """The page and its API over `bus` (which the caller connects and closes).
    `allowed_hosts`: the host names the page answers to (None: any); `app.state.ui` is the
    `UIState` its server sets `closing` on."""
    ui = UIState()

    def api(handler: Callable[[MemoryBus, Request], Coroutine[Any, Any, Any]]) -> Endpoint:
        return _api(bus, handler)

    async def events(request: Request) -> Response:
        return EventStreamResponse(bus, ui)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        ui.closing.set()

    routes = [
        Route("/", _static("index.html")),
        Route("/static/app.js", _static("app.js")),
        Route("/static/style.css", _static("style.css")),
        Route("/api/info", api(info)),
        Route("/api/describe", api(describe)),
        Route("/api/list", api(list_memories)),
        Route("/api/search", api(search)),
        Route("/api/memory/{id:path}", api(get_memory)),
        Route("/api/history/{id:path}", api(history)),
        Route("/api/timeline/{id:path}", api(timeline)),
        Route("/api/workspaces", api(workspaces)),
        Route("/api/workspaces/{name:path}", api(workspace)),
        Route("/api/states/{rest:path}", api(load_state)),
        Route("/api/events", events),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    if allowed_hosts is not None:
        app.add_middleware(HostCheck, allowed=allowed_hosts)
    app.state.ui = ui
    return app
