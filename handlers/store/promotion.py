"""Promotion: a pooled namespace that outgrew its pool moves to an index of its own, for
good (see `placement`). Checked now and then as new memories are written, run by one
handler at a time under the namespace's lock."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import msgspec
import redis.asyncio as aioredis
import redis.exceptions
import structlog

from handlers.store import keys
from handlers.store.background import Background
from handlers.store.cluster import batches, scan_iter
from handlers.store.failures import Guard
from handlers.store.indexes import Indexes
from handlers.store.lock import Locks, lock_key
from handlers.store.placement import (
    OWN_BUILDING,
    OWN_INDEX,
    index_name,
    passing_index_name,
    tier_key,
)
from handlers.store.resp import text
from handlers.store.schema import POOL_FIELD, NamespaceMeta

log = structlog.get_logger("membus.store")
_meta_decoder = msgspec.json.Decoder(NamespaceMeta)
# A namespace keeps to a shared pool index until it holds that many memories
# (MEMBUS_POOL_MAX, 0: no pools); every POOL_CHECK_EVERY new memories a handler writes
# there, it counts them.
POOL_MAX = 100
POOL_CHECK_EVERY = 32


class Promotions:
    def __init__(
        self,
        client: aioredis.Redis,
        guard: Guard,
        indexes: Indexes,
        locks: Locks,
        background: Background,
        live_total: Callable[[str], Awaitable[int]],
    ) -> None:
        self.client = client
        self._guard = guard
        self._indexes = indexes
        self._locks = locks
        self._background = background
        self._live_total = live_total
        # New memories written into each pooled namespace since its size was last checked.
        self._pooled_adds: dict[str, int] = {}

    def count_add(self, ns: str) -> None:
        """Check a pooled namespace's size at its first new memory here and every
        POOL_CHECK_EVERY after, and promote it in the background once it has outgrown
        the pool (a few more adds may land in the pool meanwhile: they move with it)."""
        n = self._pooled_adds.get(ns, 0)
        self._pooled_adds[ns] = n + 1
        if n % POOL_CHECK_EVERY:
            return
        if len(self._pooled_adds) > 4096:
            self._pooled_adds.clear()
        self._background.run(self._promote_if_grown(ns), "store.promote_failed")

    async def _promote_if_grown(self, ns: str) -> None:
        if (await self._live_total(ns)) < self._indexes.pool_max:
            return
        async with self._locks.hold(lock_key(ns, "promote"), 120.0):
            if await self.promote(ns):
                self._pooled_adds.pop(ns, None)

    async def promote(self, ns: str, wait_s: float = 60.0) -> bool:
        """Move a pooled namespace to an index of its own; False if it was not pooled, or
        an index it needs had not indexed its memories within `wait_s` (try again later:
        a promotion that stopped half-way goes on from where it was).

        In order: a passing index (which indexes the namespace's memories, pool field or
        not), then the tier says so (from here on writes leave the pool out, and readers of
        the pool retry, on the passing index), then the pool field comes off every memory
        so the pool drops them. A reader of the pool that checks the tier after its query
        and still sees the pool number thus saw every memory.

        Taking the field off re-indexes each memory in the passing index, which keeps the
        replaced entries and their lengths in its BM25 statistics (garbage collection
        takes the entries out, not the lengths): word scores came out at half an index's
        built at once. So the namespace's own index is then built from the memories as
        they now are; readers move to it when the tier says so and the passing index is
        dropped (a reader that had it finds it missing and reads the tier again). Building
        the index again under its one name instead left readers with a half-built index:
        RediSearch builds one by scanning the whole keyspace, and answers meanwhile with
        what it has scanned. Run it under the namespace's lock."""
        async with self._guard():
            tier = await self.client.get(tier_key(ns))
            if tier is None or text(tier) == OWN_INDEX:
                return False
            meta = _meta_decoder.decode(await self.client.get(keys.meta_key(ns)) or b"")
            if text(tier) != OWN_BUILDING:
                passing = await self._indexes.own(
                    ns, meta.dimension, wait_s, name=passing_index_name(ns)
                )
                if not await self._indexes.wait_indexed(passing, 0):
                    return False
                await self.client.set(tier_key(ns), OWN_BUILDING)
            moved = 0
            async for batch in batches(scan_iter(self.client, ns, f"{keys.record_prefix(ns)}*")):
                pipe = self.client.pipeline(transaction=False)
                for key in batch:
                    pipe.hdel(key, POOL_FIELD)
                moved += sum(await pipe.execute())
            # Nobody reads the namespace's own index yet: one left by a promotion that
            # stopped half-way may hold memories indexed with the field.
            with contextlib.suppress(redis.exceptions.ResponseError):
                await self.client.execute_command("FT.DROPINDEX", index_name(ns))
            final = await self._indexes.own(ns, meta.dimension, wait_s)
            if not await self._indexes.wait_indexed(final, 0):
                return False
            await self.client.set(tier_key(ns), OWN_INDEX)
            with contextlib.suppress(redis.exceptions.ResponseError):
                await self.client.execute_command("FT.DROPINDEX", passing_index_name(ns))
        self._indexes.forget(ns)
        log.info("index.promoted", namespace=ns, index=index_name(ns), memories=moved)
        return True
