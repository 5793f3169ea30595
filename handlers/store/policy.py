"""Which RediSearch hybrid policy a filtered vector query should run with.

RediSearch's own choice picks brute force over every filtered vector for broad filters,
where batches are several times faster, while batches crawl for narrow filters (a small
workflow), where brute force is (figures: docs/benchmarks.md). So the choice follows the
filter's size, counted at most every few seconds per filter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

BATCHES_MIN_MATCHES = 1500
BATCHES_MIN_SHARE = 0.05
COUNT_TTL_S = 5.0
MAX_ENTRIES = 4096


class HybridPolicy:
    def __init__(self) -> None:
        # An estimate, so a few seconds stale is fine; a cache only, never shared state.
        self._counts: dict[tuple[str, str], tuple[float, int]] = {}

    async def choose(self, ns: str, where: str, count: Callable[[str], Awaitable[int]]) -> str:
        matches = await self._count(ns, where, count)
        total = await self._count(ns, "*", count)
        return "BATCHES" if broad(matches, total) else "ADHOC_BF"

    async def total(self, ns: str, count: Callable[[str], Awaitable[int]]) -> int:
        """How many memories the namespace holds (the count of `*`), cached likewise."""
        return await self._count(ns, "*", count)

    async def _count(self, ns: str, where: str, count: Callable[[str], Awaitable[int]]) -> int:
        now = asyncio.get_running_loop().time()
        hit = self._counts.get((ns, where))
        if hit is not None and hit[0] > now:
            return hit[1]
        if len(self._counts) > MAX_ENTRIES:
            self._counts.clear()
        n = await count(where)
        self._counts[(ns, where)] = (now + COUNT_TTL_S, n)
        return n


def broad(matches: int, total: int) -> bool:
    """Whether a filter passes enough memories for batched HNSW search to win."""
    return matches >= BATCHES_MIN_MATCHES and matches >= BATCHES_MIN_SHARE * total
