"""Serving the inspection page: uvicorn in this process's event loop."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import structlog
import uvicorn
from starlette.applications import Starlette

from bus.client import MemoryBus
from bus.ui.app import UIState, make_app

log = structlog.get_logger("membus.ui")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8484
# The host names a loopback-bound page answers to (see `HostCheck`).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# Open event streams end as soon as shutdown starts; this only bounds a stuck request.
GRACEFUL_S = 5.0


class UIServer(uvicorn.Server):
    """uvicorn that ends the page's event streams when it starts shutting down: uvicorn
    waits for open responses before its lifespan shutdown, so an endless stream would hold
    it until the graceful timeout."""

    def __init__(self, config: uvicorn.Config, ui: UIState) -> None:
        super().__init__(config)
        self.ui = ui

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.ui.closing.set()
        await super().shutdown(sockets)


def make_server(app: Starlette, **options: Any) -> UIServer:
    """A server for `make_app`'s app; `options` go to `uvicorn.Config` (e.g.
    `log_config=None` to leave the process's logging alone). Run it with `await
    server.serve(sockets=[bind(host, port)])`; set `server.should_exit = True` to stop it."""
    config = uvicorn.Config(
        app,
        # No websockets (the page has none) and no per-request access log.
        ws="none",
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=int(GRACEFUL_S),
        **options,
    )
    return UIServer(config, app.state.ui)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one, `getsockname()[1]`). Bound
    here rather than by uvicorn, which exits the process when the port is taken."""
    infos = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    family, type_, proto, _, address = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def serve(
    nats_url: str,
    namespace: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    **uvicorn_options: Any,
) -> None:
    """Connect to the bus and serve the page at http://host:port/ until cancelled or
    interrupted (Ctrl-C, SIGTERM: uvicorn catches them and shuts down cleanly). On a
    loopback host the page answers only to loopback host names; anyone who can reach a
    non-loopback host reads every memory of the namespace (there is no login). A port in
    use raises `OSError`; NATS not answering, `bus.errors.Unavailable`. `uvicorn_options`
    go to `uvicorn.Config` (default `log_level="info"`)."""
    sock = bind(host, port)
    try:
        bus = await MemoryBus.connect(nats_url, namespace=namespace)
    except BaseException:
        sock.close()
        raise
    try:
        allowed = LOOPBACK_NAMES if is_loopback(host) else None
        uvicorn_options.setdefault("log_level", "info")
        server = make_server(make_app(bus, allowed_hosts=allowed), **uvicorn_options)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{sock.getsockname()[1]}/"
        log.info("ui.serving", url=url, namespace=namespace, nats=nats_url)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            # Cancelled from outside: let uvicorn shut down its own way (streams end, the
            # port is released) before passing the cancellation on.
            server.should_exit = True
            await task
            raise
    finally:
        sock.close()
        await bus.close()
