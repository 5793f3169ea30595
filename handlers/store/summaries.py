"""`describe`'s summary of a namespace, cached in each handler while it is exact.

Aggregating every memory costs time in proportion to the namespace (about 1 ms per 1,000
memories), so a summary is kept and served again while two things hold:

- the namespace's generation (`keys.generation_key`) has not moved: every add, update and
  delete counts it up in the same Lua step as the write, and it is read before aggregating,
  so a write that lands during an aggregation makes the next call aggregate again;
- no memory it counted has reached its expiry yet: the summary is good until the earliest
  `expires_at` among them (Redis drops expired keys on its own, without a write of ours).

A generation counted up from a missing key (a new namespace, or a Redis that lost its data)
is first moved to a large random value, so that it never matches a summary cached before.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import redis.asyncio as aioredis

from handlers.store.failures import Guard
from handlers.store.keys import generation_key
from handlers.store.record import TypeGroup

# Generations below this were counted up from a missing key (see the module docstring).
_FRESH = 1 << 32


class Overview(NamedTuple):
    """What `describe` reports of the memories in a scope, folded from the aggregation's
    groups once (a cached overview is served without touching them again)."""

    by_type: dict[str, int]
    tags: list[str]  # sorted
    general_count: int
    workflow_count: int
    # Of the memories counted, those a newer one superseded (lists and searches leave them out).
    superseded_count: int
    oldest: int | None
    newest: int | None
    # The earliest expiry among them: until then, without a write, this stays exact.
    until_ms: float

    @classmethod
    def of(cls, groups: list[TypeGroup]) -> Overview:
        by_type: dict[str, int] = {}
        tags: set[str] = set()
        general = workflow = superseded = 0
        for g in groups:
            if g.superseded == "1":
                superseded += g.n
            by_type[g.type] = by_type.get(g.type, 0) + g.n
            if g.general:
                general += g.n
            else:
                workflow += g.n
            tags |= g.tag_set()
        return cls(
            by_type=dict(sorted(by_type.items())),
            tags=sorted(tags),
            general_count=general,
            workflow_count=workflow,
            superseded_count=superseded,
            oldest=min((int(g.oldest) for g in groups), default=None),
            newest=max((int(g.newest) for g in groups), default=None),
            until_ms=min((g.expiry for g in groups), default=float("inf")),
        )


class _Cached(NamedTuple):
    generation: int
    overview: Overview


class Summaries:
    def __init__(self, client: aioredis.Redis, guard: Guard, max_entries: int = 1024) -> None:
        self.client = client
        self._guard = guard
        self.max_entries = max_entries
        self._cache: OrderedDict[tuple[str, str], _Cached] = OrderedDict()

    async def overview(
        self,
        ns: str,
        scope_key: str,
        now_ms: int,
        aggregate: Callable[[], Awaitable[list[TypeGroup]]],
    ) -> Overview:
        """The overview of the memories live at `now_ms` in a scope (`scope_key`: its filter
        without the time), from the cache while exact, else from `aggregate()`."""
        generation = await self._generation(ns)
        key = (ns, scope_key)
        cached = self._cache.get(key)
        if (
            cached is not None
            and cached.generation == generation
            and now_ms < cached.overview.until_ms
        ):
            self._cache.move_to_end(key)
            return cached.overview
        overview = Overview.of(await aggregate())
        self._cache[key] = _Cached(generation, overview)
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return overview

    async def _generation(self, ns: str) -> int:
        async with self._guard():
            raw = await self.client.get(generation_key(ns))
            generation = int(raw) if raw is not None else 0
            if generation < _FRESH:
                # INCRBY, not SET: a write that counts up meanwhile still moves it.
                key = generation_key(ns)
                generation = int(await self.client.incrby(key, random.randrange(_FRESH, 1 << 52)))
        return generation

    def forget(self, ns: str | None = None) -> None:
        """Drop the summaries of a namespace (all, with None): its index was made again."""
        if ns is None:
            self._cache.clear()
            return
        for key in [k for k in self._cache if k[0] == ns]:
            del self._cache[key]
