"""The handler's HTTP port (MEMBUS_METRICS_PORT): `GET /metrics` for Prometheus, `/healthz`
(liveness) and `/readyz` (readiness) for Kubernetes.

A tiny HTTP/1.1 responder on the handler's own event loop, not a thread or a web framework:
that `/healthz` answers at all proves the loop that serves requests is alive. Each answer
closes its connection, which scrapers and probes handle as a matter of course.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = structlog.get_logger("membus.probes")

# None when the handler can serve, else why not (shown in the 503's body).
Readiness = Callable[[], Awaitable[str | None]]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS |= {503: "Service Unavailable"}
_MAX_HEADER_LINES = 100
_READ_TIMEOUT_S = 5.0
_TEXT = "text/plain; charset=utf-8"


class ProbeServer:
    def __init__(self, registry: CollectorRegistry, ready: Readiness) -> None:
        self.registry = registry
        self.ready = ready
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._client, host, port)
        log.info("probes.listening", host=host, port=port)

    @property
    def port(self) -> int:
        """The bound port (useful when started on port 0)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                status, ctype, body, head = await self._answer(reader)
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
            )
            if not head:
                writer.write(body)
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError):
            pass  # a client that went away, stalled or sent garbage: nothing to answer
        except Exception:
            log.exception("probes.failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, str, bytes, bool]:
        """(status, content type, body, HEAD?) for the request on `reader`."""
        parts = (await reader.readline()).decode("latin-1").split()
        accept = ""
        for _ in range(_MAX_HEADER_LINES):
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "accept":
                accept = value.strip()
        if len(parts) != 3:
            return 400, _TEXT, b"bad request\n", False
        method, target = parts[0], parts[1]
        head = method == "HEAD"
        if method not in ("GET", "HEAD"):
            return 405, _TEXT, b"GET only\n", False
        path = target.split("?", 1)[0]
        if path == "/metrics":
            # Prometheus text, or OpenMetrics when the scraper asks for it.
            encoder, ctype = choose_encoder(accept)
            return 200, ctype, encoder(self.registry), head
        if path == "/healthz":
            return 200, _TEXT, b"ok\n", head
        if path == "/readyz":
            reason = await self.ready()
            if reason is None:
                return 200, _TEXT, b"ok\n", head
            return 503, _TEXT, f"not ready: {reason}\n".encode(), head
        return 404, _TEXT, b"not found: /metrics, /healthz, /readyz\n", head
