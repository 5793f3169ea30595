"""v3 validity: when a fact held in the world (`valid_from`, `valid_until`), beside when it
was learnt.

Current reads leave out a memory whose validity has ended as they leave out a superseded
one, through the same `superseded` flag: the writes keep the current memories that have an
end in a sorted set (`retally` in scripts._TALLY), and a read first flags those whose end has
passed (`end`, and `describe`'s and `list`'s tally reads), so a current read costs the one
negation it always did. `as_of` reads match the `vf`/`vu` index fields instead
(`filters.valid_at`).

A namespace written before v3 has memories without `vf`/`vu`, which no `as_of` filter
matches: the first `as_of` read there gives them their window once (`backfill`), and
waits a little for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from handlers.store import keys
from handlers.store.cluster import scan_iter
from handlers.store.indexes import batches
from handlers.store.resp import text
from handlers.store.scripts import ENDED_LUA, VALIDITY_BACKFILL_LUA


class Validity:
    def __init__(
        self,
        client: aioredis.Redis,
        guard: Callable[[], contextlib.AbstractAsyncContextManager[None]],
    ) -> None:
        self.client = client
        self._guard = guard
        self._ended = client.register_script(ENDED_LUA)
        self._backfill = client.register_script(VALIDITY_BACKFILL_LUA)
        # Namespaces seen complete (a marker never goes away while Redis keeps its data).
        self._complete: set[str] = set()

    async def end(self, ns: str, now_ms: int) -> int:
        """Flag the memories whose validity has ended by `now_ms` (a bounded batch); how
        many there were."""
        prefix = keys.tally_prefix(ns)
        async with self._guard():
            return int(await self._ended(keys=[prefix], args=[now_ms, keys.record_prefix(ns)]))

    async def complete(self, ns: str) -> bool:
        """Whether every memory of the namespace has its validity window."""
        if ns in self._complete:
            return True
        async with self._guard():
            done = await self.client.exists(keys.tally_prefix(ns) + keys.VALIDITY_COMPLETE)
        if done:
            self._complete.add(ns)
        return bool(done)

    def forget(self) -> None:
        """Redis was lost: it may come back without the markers."""
        self._complete.clear()

    async def backfill(self, ns: str, now_ms: int, size: int = 200) -> int:
        """Give every memory of the namespace written before v3 its validity window, count
        each memory's window in the tallies (`as_of` lists), then mark the namespace
        complete for both; how many were given one. New writes carry theirs, and a memory
        that has one keeps it, so running it twice changes nothing."""
        prefix = keys.tally_prefix(ns)
        given = 0
        async with self._guard():
            records = scan_iter(self.client, ns, f"{keys.record_prefix(ns)}*")
            async for batch in batches(records, size):
                given += await self._fill(ns, prefix, batch, now_ms)
            await self.client.set(prefix + keys.VALIDITY_COMPLETE, 1)
            await self.client.set(prefix + keys.VALIDITY_TALLIED, 1)
        self._complete.add(ns)
        return given

    async def _fill(self, ns: str, prefix: str, records: list[Any], now_ms: int) -> int:
        ids = [keys.id_of(ns, text(key)) for key in records]
        args: list[str | int] = [keys.record_prefix(ns), now_ms, *ids]
        return int(await self._backfill(keys=[prefix, *records], args=args))
