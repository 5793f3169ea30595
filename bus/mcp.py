"""The memory bus as an MCP server: the 21 tools of `bus.tools`, over stdio (default) or
streamable HTTP (`--http PORT`), on the official MCP Python SDK (`pip install '.[mcp]'`).

    python -m bus.mcp            # or: membus-mcp

Configuration comes from the environment: `MEMBUS_NATS_URL` (default
nats://127.0.0.1:4222), `MEMBUS_NAMESPACE` (default `default`), and the identity the server
puts on every request so that a model never passes it: `MEMBUS_WORKFLOW_ID`,
`MEMBUS_WORKSPACE`, `MEMBUS_AGENT_ID`, `MEMBUS_SESSION_ID`; `MEMBUS_TIMEOUT` (seconds per
request, default 5). Behind per-agent NATS users (deploy/nats): the user and password go in
the URL (`nats://user:password@host:4222`), `MEMBUS_TRUST` is the agent's trust level
(default full) and `MEMBUS_INBOX_PREFIX` its private inbox prefix. The server talks to the
handlers over NATS only. Logs go to stderr: on stdio, stdout is the MCP channel.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import structlog
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError

from bus.client import MemoryBus
from bus.errors import Unavailable
from bus.logs import configure_logging
from bus.tools import (
    ToolCallError,
    ToolExecutor,
    ToolResult,
    check_identity,
    system_prompt,
    tool_specs,
)
from contracts.subjects import DEFAULT_NAMESPACE, FULL_TRUST, TRUST_LEVELS, is_valid_namespace

log = structlog.get_logger("membus.mcp")

SERVER_NAME = "memory-bus"
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
# How long a tool call waits for NATS when the server is not connected yet.
CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class McpSettings:
    nats_url: str = DEFAULT_NATS_URL
    namespace: str = DEFAULT_NAMESPACE
    workflow_id: str | None = None
    workspace: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    timeout: float = 5.0
    trust: str = FULL_TRUST
    inbox_prefix: str | None = None


def settings_from_env(env: Mapping[str, str] | None = None) -> McpSettings:
    """Read `MEMBUS_*`; an empty variable counts as unset. A bad value raises `ValueError`
    naming the variable."""
    env = os.environ if env is None else env

    def get(name: str) -> str | None:
        value = env.get(name, "").strip()
        return value or None

    namespace = get("MEMBUS_NAMESPACE") or DEFAULT_NAMESPACE
    if not is_valid_namespace(namespace):
        raise ValueError(f"MEMBUS_NAMESPACE={namespace!r} must match [A-Za-z0-9_-]{{1,64}}")
    timeout = 5.0
    if raw := get("MEMBUS_TIMEOUT"):
        try:
            timeout = float(raw)
        except ValueError:
            raise ValueError(f"MEMBUS_TIMEOUT={raw!r} is not a number of seconds") from None
        if not timeout > 0:
            raise ValueError(f"MEMBUS_TIMEOUT={raw!r} must be more than 0")
    trust = get("MEMBUS_TRUST") or FULL_TRUST
    if trust not in TRUST_LEVELS:
        raise ValueError(f"MEMBUS_TRUST={trust!r} must be one of: {', '.join(TRUST_LEVELS)}")
    settings = McpSettings(
        nats_url=get("MEMBUS_NATS_URL") or DEFAULT_NATS_URL,
        namespace=namespace,
        workflow_id=get("MEMBUS_WORKFLOW_ID"),
        workspace=get("MEMBUS_WORKSPACE"),
        agent_id=get("MEMBUS_AGENT_ID"),
        session_id=get("MEMBUS_SESSION_ID"),
        timeout=timeout,
        trust=trust,
        inbox_prefix=get("MEMBUS_INBOX_PREFIX"),
    )
    _check_identity(settings)
    return settings


def _check_identity(settings: McpSettings) -> None:
    names = {
        "workflow_id": "MEMBUS_WORKFLOW_ID",
        "workspace": "MEMBUS_WORKSPACE",
        "agent_id": "MEMBUS_AGENT_ID",
        "session_id": "MEMBUS_SESSION_ID",
    }
    for field, var in names.items():
        value = getattr(settings, field)
        if value is not None:
            try:
                check_identity(field, value)
            except ValueError as exc:
                raise ValueError(f"{var}: {exc}") from None


class Connection:
    """The server's one NATS connection and executor, made on first need: the server starts
    (and lists its tools) even while NATS is down, and a tool call then says to retry."""

    def __init__(self, settings: McpSettings) -> None:
        self.settings = settings
        self._identity: dict[str, Any] = {
            "workflow_id": settings.workflow_id,
            "workspace": settings.workspace,
            "agent_id": settings.agent_id,
            "session_id": settings.session_id,
        }
        # Checks a model's call while NATS is down, so that its own mistakes come first.
        offline = MemoryBus(NatsClient(), settings.namespace, settings.timeout, owns=False)
        self._offline = ToolExecutor(offline, **self._identity)
        self._bus: MemoryBus | None = None
        self._executor: ToolExecutor | None = None
        self._lock = asyncio.Lock()
        self._closing = False

    async def executor(self) -> ToolExecutor | None:
        if self._executor is not None:
            return self._executor
        async with self._lock:
            if self._executor is None:
                await self._connect()
        return self._executor

    async def _connect(self) -> None:
        s = self.settings
        options: dict[str, Any] = {}
        if s.inbox_prefix:
            options["inbox_prefix"] = s.inbox_prefix
        try:
            bus = await MemoryBus.connect(
                s.nats_url,
                namespace=s.namespace,
                timeout=s.timeout,
                trust=s.trust,
                connect_within=CONNECT_TIMEOUT_S,
                name=f"membus-mcp:{s.agent_id or 'agent'}",
                connect_timeout=2,
                error_cb=_nats_error,
                disconnected_cb=self._disconnected,
                reconnected_cb=_nats_reconnected,
                **options,
            )
        except (Unavailable, OSError, NatsError) as exc:
            log.warning("nats.unreachable", url=s.nats_url, error=type(exc).__name__)
            return
        self._bus = bus
        self._executor = ToolExecutor(bus, **self._identity)
        log.info("nats.connected", url=s.nats_url, ns=s.namespace)

    async def run(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        executor = await self.executor()
        if executor is not None:
            return await executor.run(name, arguments)
        try:
            self._offline.prepare(name, arguments)
        except ToolCallError as exc:
            return ToolResult(tool=name, data=exc.reply())
        return ToolResult(
            tool=name,
            data={
                "success": False,
                "code": "unavailable",
                "error": "The memory bus (NATS) cannot be reached. Retry in a moment;"
                " if it keeps failing, go on without memory.",
            },
        )

    async def _disconnected(self) -> None:
        if not self._closing:  # our own close is no news
            log.warning("nats.disconnected")

    async def close(self) -> None:
        self._closing = True
        if self._bus is not None:
            await self._bus.close()
            self._bus = self._executor = None


async def _nats_error(exc: Exception) -> None:
    log.warning("nats.error", error=f"{type(exc).__name__}: {exc}")


async def _nats_reconnected() -> None:
    log.info("nats.reconnected")


def build_server(settings: McpSettings) -> Server[Connection]:
    """The low-level MCP server, so that each tool's inputSchema is exactly `bus.tools`'."""
    tools = [
        types.Tool(name=spec.name, description=spec.description, input_schema=spec.parameters)
        for spec in tool_specs()
    ]

    @asynccontextmanager
    async def lifespan(_: Server[Connection]) -> AsyncIterator[Connection]:
        conn = Connection(settings)
        # Connect in the background: the MCP handshake need not wait for NATS.
        connecting = asyncio.create_task(conn.executor())
        try:
            yield conn
        finally:
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connecting
            await conn.close()

    async def list_tools(
        ctx: ServerRequestContext[Connection], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Connection], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        started = time.monotonic()
        result = await ctx.lifespan_context.run(params.name, params.arguments)
        log.info(
            "tool.call",
            tool=params.name,
            ms=round((time.monotonic() - started) * 1000, 1),
            success=result.ok,
            code=result.code,
        )
        return types.CallToolResult(
            content=[types.TextContent(text=result.text)], is_error=not result.ok
        )

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=system_prompt(workspace=settings.workspace),
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memory-bus")
    except PackageNotFoundError:
        return "0"


async def serve_stdio(settings: McpSettings) -> None:
    server = build_server(settings)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(settings: McpSettings, host: str, port: int) -> None:
    """Streamable HTTP on `http://<host>:<port>/mcp`."""
    import uvicorn

    server = build_server(settings)
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    await uvicorn.Server(config).serve()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="membus-mcp", description="The memory bus as an MCP server (stdio by default)."
    )
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP instead")
    parser.add_argument("--host", default="127.0.0.1", help="with --http (default 127.0.0.1)")
    parser.add_argument("--log-level", default=os.environ.get("MEMBUS_LOG_LEVEL", "info"))
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        settings = settings_from_env()
    except ValueError as exc:
        print(f"membus-mcp: {exc}", file=sys.stderr)
        return 2
    log.info(
        "mcp.start",
        transport="http" if args.http else "stdio",
        ns=settings.namespace,
        workflow_id=settings.workflow_id,
        workspace=settings.workspace,
        agent_id=settings.agent_id,
    )
    try:
        if args.http:
            asyncio.run(serve_http(settings, args.host, args.http))
        else:
            asyncio.run(serve_stdio(settings))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
