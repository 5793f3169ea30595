"""Locks shared by every handler, held in Redis.

Waiters in one process queue on a local asyncio lock first, so each process has at most one
waiter polling Redis for a key, and that one backs off (2 ms doubling to 50 ms). Polling
every 2 ms from each of hundreds of waiters starved the holder itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import redis.exceptions

from handlers.errors import Unavailable
from handlers.store import keys
from handlers.store.failures import Guard


def lock_key(ns: str, name: str) -> str:
    return keys.ns_prefix(ns) + f"lock:{name}"


FIRST_POLL_S = 0.002
LAST_POLL_S = 0.05


class _Local:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class Locks:
    def __init__(self, client: Any, guard: Guard) -> None:
        self._client = client
        self._guard = guard
        self._local: dict[str, _Local] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str, hold_s: float) -> AsyncIterator[None]:
        """Hold the lock `key`. It expires after `hold_s` should its holder die; waiting
        longer than that (here and in Redis together) is `unavailable`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + hold_s
        local = self._local.get(key)
        if local is None:
            local = self._local[key] = _Local()
        local.users += 1
        try:
            try:
                async with asyncio.timeout(hold_s):
                    await local.lock.acquire()
            except TimeoutError:
                raise _busy() from None
            try:
                lock = self._client.lock(key, timeout=hold_s)
                await self._acquire(lock, deadline)
                try:
                    yield
                finally:
                    with contextlib.suppress(redis.exceptions.RedisError):  # expired: nothing
                        await lock.release()
            finally:
                local.lock.release()
        finally:
            local.users -= 1
            if local.users == 0:
                del self._local[key]

    async def _acquire(self, lock: Any, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        pause = FIRST_POLL_S
        while True:
            async with self._guard():
                if await lock.acquire(blocking=False):
                    return
            left = deadline - loop.time()
            if left <= 0:
                raise _busy()
            # Jitter: two processes' pollers do not fall into step.
            await asyncio.sleep(min(left, pause * random.uniform(0.5, 1.0)))
            pause = min(pause * 2, LAST_POLL_S)


def _busy() -> Unavailable:
    return Unavailable("Another write holds this memory scope; retry shortly.")
