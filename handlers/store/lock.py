"""A lock shared by every handler, held in Redis."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import redis.exceptions

from handlers.errors import Unavailable


@contextlib.asynccontextmanager
async def locked(
    client: Any,
    key: str,
    hold_s: float,
    guard: Callable[[], contextlib.AbstractAsyncContextManager[None]],
) -> AsyncIterator[None]:
    """Hold a Redis lock shared by every handler. It expires after `hold_s` should its holder
    die; waiting longer than that is `unavailable`."""
    lock = client.lock(key, timeout=hold_s, sleep=0.002)
    async with guard():
        got = await lock.acquire(blocking_timeout=hold_s)
    if not got:
        raise Unavailable("Another write holds this memory scope; retry shortly.")
    try:
        yield
    finally:
        with contextlib.suppress(redis.exceptions.RedisError):  # expired: nothing to free
            await lock.release()
