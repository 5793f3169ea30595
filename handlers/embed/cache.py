"""Embeddings cached in Redis by embedder and text, so a text is embedded once however many
handlers see it.

Why a wrapper and not the `cache=` that redisvl's vectorizers take: `minilm` is not a redisvl
vectorizer (it batches concurrent requests into one forward pass), so one wrapper serves every
embedder alike, with one key (`name/dimension`, the namespace's own description of its
vectors) where redisvl would key by model name alone.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import numpy as np
import structlog
from redisvl.extensions.cache.embeddings import EmbeddingsCache

from handlers.embed.base import Embedder

log = structlog.get_logger("membus.embedders")


class CachedEmbedder:
    def __init__(self, inner: Embedder, cache: EmbeddingsCache, recent: int = 4096) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self._cache = cache
        self._model = f"{inner.name}/{inner.dimension}"
        self._pending: set[asyncio.Future[None]] = set()
        # The texts this handler embedded or read last: a repeated query or a repeated add
        # costs no round trip, and is found even before its Redis entry is written.
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._recent_max = recent
        self.query_variant = inner.query_variant
        # Query vectors of another model than the stored texts' (minilm's int8) are kept
        # apart, and only here: they cost about what a Redis round trip does to fetch.
        self._recent_queries: OrderedDict[str, np.ndarray] = OrderedDict()

    def _remember(
        self, text: str, vec: np.ndarray, recent: OrderedDict[str, np.ndarray] | None = None
    ) -> None:
        recent = self._recent if recent is None else recent
        recent[text] = vec
        recent.move_to_end(text)
        if len(recent) > self._recent_max:
            recent.popitem(last=False)

    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        if not self.query_variant:
            return await self.embed(texts)
        out: list[np.ndarray | None] = [self._recent_queries.get(t) for t in texts]
        misses = [i for i, v in enumerate(out) if v is None]
        if misses:
            fresh = await self.inner.embed_queries([texts[i] for i in misses])
            for i, vec in zip(misses, fresh, strict=True):
                out[i] = vec
                self._remember(texts[i], vec, self._recent_queries)
        return [v for v in out if v is not None]

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        out: list[np.ndarray | None] = [self._recent.get(t) for t in texts]
        asked = [i for i, v in enumerate(out) if v is None]
        if not asked:
            return [v for v in out if v is not None]
        try:
            hits = await self._cache.amget([texts[i] for i in asked], self._model)
        except Exception:
            log.warning("embed_cache.unavailable", exc_info=True)
            hits = [None] * len(asked)
        for i, h in zip(asked, hits, strict=True):
            if h:
                vec = np.asarray(h["embedding"], dtype=np.float32)
                out[i] = vec
                self._remember(texts[i], vec)
        misses = [i for i in asked if out[i] is None]
        if misses:
            fresh = await self.inner.embed([texts[i] for i in misses])
            for i, vec in zip(misses, fresh, strict=True):
                out[i] = vec
                self._remember(texts[i], vec)
            # Stored after the reply: no caller waits for the cache to fill.
            task = asyncio.ensure_future(
                self._store([(texts[i], vec) for i, vec in zip(misses, fresh, strict=True)])
            )
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        return [v for v in out if v is not None]

    async def _store(self, fresh: list[tuple[str, np.ndarray]]) -> None:
        try:
            await self._cache.amset(
                [
                    {"content": text, "model_name": self._model, "embedding": vec.tolist()}
                    for text, vec in fresh
                ]
            )
        except Exception:
            log.warning("embed_cache.store_failed", exc_info=True)

    async def close(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self.inner.close()
