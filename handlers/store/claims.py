"""Durable writes applied at most once: a handler claims a write's request id before applying
it, and marks it done (or rejected) after, so a redelivery is recognised by any handler."""

from __future__ import annotations

import hashlib

import redis.asyncio as aioredis

from handlers.store import keys
from handlers.store.failures import Guard
from handlers.store.resp import text


def applied_key(ns: str, request_id: str) -> str:
    """A durable write's outcome, by its request id (the Nats-Msg-Id), kept 24 h so that a
    redelivered write is applied at most once. A long id is hashed to bound the key."""
    if len(request_id) > 128:
        request_id = "sha256:" + hashlib.sha256(request_id.encode()).hexdigest()
    return keys.ns_prefix(ns) + f"applied:{request_id}"


class Claims:
    """One key per durable write: `pending` while a handler applies it, then its outcome."""

    def __init__(self, client: aioredis.Redis, guard: Guard) -> None:
        self.client = client
        self._guard = guard

    async def claim(self, ns: str, request_id: str, hold_ms: int) -> str | None:
        """Claim a durable write for applying it: None when claimed now, else its state
        (`pending`: another handler is applying it; `done` or `rejected`: it was)."""
        key = applied_key(ns, request_id)
        async with self._guard():
            if await self.client.set(key, "pending", nx=True, px=hold_ms):
                return None
            state = await self.client.get(key)
        return text(state) if state is not None else "pending"

    async def finish(self, ns: str, request_id: str, state: str, keep_s: int) -> bool:
        """Mark a claimed write done or rejected; False where the claim is not there (it
        lapsed, or a failover gave its slot to a node that never had it): the write is
        then not taken as applied (see `replicas.Replicas.reached`)."""
        async with self._guard():
            marked = await self.client.set(applied_key(ns, request_id), state, ex=keep_s, xx=True)
        return bool(marked)

    async def release(self, ns: str, request_id: str) -> None:
        """Give a claim back (the write failed and will be redelivered)."""
        async with self._guard():
            await self.client.delete(applied_key(ns, request_id))
