"""Private embedded stacks for tests that stop servers or change the embedder."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from deploy.embedded import EmbeddedStack, wait_for_handlers


@contextlib.asynccontextmanager
async def private_stack(
    embedder: str, wait_s: float = 60, env: dict[str, str] | None = None
) -> AsyncIterator[EmbeddedStack]:
    """Servers and one handler of their own, for tests that stop servers or change embedder."""
    stack = EmbeddedStack.temporary()
    try:
        stack.start_servers()
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": embedder, **(env or {})})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=wait_s)
        yield stack
    finally:
        stack.stop()
