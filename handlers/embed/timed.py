"""An embedder that reports how many texts each call embedded and how long it took: the one
place the handler's embedding metrics are taken, whichever embedder and whichever operation."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import numpy as np

from handlers.embed.base import Embedder

# (texts, seconds) of one successful call.
Report = Callable[[int, float], None]


class TimedEmbedder:
    def __init__(self, inner: Embedder, report: Report) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.query_variant = inner.query_variant
        self._report = report

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        return await self._timed(self.inner.embed, texts)

    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        return await self._timed(self.inner.embed_queries, texts)

    async def _timed(
        self, embed: Callable[[list[str]], Awaitable[list[np.ndarray]]], texts: list[str]
    ) -> list[np.ndarray]:
        started = time.perf_counter()
        vectors = await embed(texts)
        # A failed call is seen in the requests' `unavailable` codes, not here.
        self._report(len(texts), time.perf_counter() - started)
        return vectors

    async def close(self) -> None:
        await self.inner.close()
