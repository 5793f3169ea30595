"""Embeddings cached in Redis by embedder and text, so a text is embedded once however many
handlers see it.

The cache never holds a text: an entry is keyed by the text's SHA-256 (`text_digest`), and
that digest is all redisvl is given as the entry's `content`, beside the vector (PROTOCOL
v4, "Erasure"). The handler's own recent texts are kept by digest too. An erasure drops a
text's entry by its key (`entry_key`).

Why a wrapper and not the `cache=` that redisvl's vectorizers take: `minilm` is not a redisvl
vectorizer (it batches concurrent requests into one forward pass), so one wrapper serves every
embedder alike, with one key (`name/dimension`, the namespace's own description of its
vectors) where redisvl would key by model name alone.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np
import structlog
from redisvl.extensions.cache.embeddings import EmbeddingsCache
from redisvl.redis.utils import hashify

from handlers.embed.base import Embedder

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = structlog.get_logger("membus.embedders")


def text_digest(text: str) -> str:
    """What the cache knows of a text: its SHA-256, never the text."""
    return hashlib.sha256(text.encode()).hexdigest()


def cache_model(name: str, dimension: int) -> str:
    """The model an entry is cached under: the namespace's own description of its vectors."""
    return f"{name}/{dimension}"


def entry_key(name: str, text: str, model: str) -> str:
    """The Redis key of a text's cached vector in the cache named `name`: redisvl's
    `EmbeddingsCache._make_cache_key` of the text's digest (a unit test holds them equal, so
    that an upgrade of redisvl that changes its keys breaks there)."""
    return f"{name}:{hashify(f'{text_digest(text)}:{model}')}"


def cached(inner: Embedder, name: str, ttl_s: int, client: aioredis.Redis) -> CachedEmbedder:
    """`inner` behind the shared Redis embeddings cache named `name` (redisvl's), entries
    kept `ttl_s`."""
    return CachedEmbedder(inner, EmbeddingsCache(name=name, ttl=ttl_s, async_redis_client=client))


class CachedEmbedder:
    def __init__(self, inner: Embedder, cache: EmbeddingsCache, recent: int = 4096) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self._cache = cache
        self._model = cache_model(inner.name, inner.dimension)
        self._pending: set[asyncio.Future[None]] = set()
        # The texts this handler embedded or read last, by digest: a repeated query or a
        # repeated add costs no round trip, and is found even before its Redis entry is
        # written.
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._recent_max = recent
        self.query_variant = inner.query_variant
        # Query vectors of another model than the stored texts' (minilm's int8) are kept
        # apart, and only here: they cost about what a Redis round trip does to fetch.
        self._recent_queries: OrderedDict[str, np.ndarray] = OrderedDict()

    def _remember(
        self, digest: str, vec: np.ndarray, recent: OrderedDict[str, np.ndarray] | None = None
    ) -> None:
        recent = self._recent if recent is None else recent
        recent[digest] = vec
        recent.move_to_end(digest)
        if len(recent) > self._recent_max:
            recent.popitem(last=False)

    def forget(self, texts: list[str]) -> None:
        """Drop texts from this handler's recent ones (an erasure; the Redis entries are
        dropped by key, whichever handler cached them)."""
        for digest in map(text_digest, texts):
            self._recent.pop(digest, None)
            self._recent_queries.pop(digest, None)

    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        if not self.query_variant:
            return await self.embed(texts)
        digests = [text_digest(t) for t in texts]
        out: list[np.ndarray | None] = [self._recent_queries.get(d) for d in digests]
        misses = [i for i, v in enumerate(out) if v is None]
        if misses:
            fresh = await self.inner.embed_queries([texts[i] for i in misses])
            for i, vec in zip(misses, fresh, strict=True):
                out[i] = vec
                self._remember(digests[i], vec, self._recent_queries)
        return [v for v in out if v is not None]

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        digests = [text_digest(t) for t in texts]
        out: list[np.ndarray | None] = [self._recent.get(d) for d in digests]
        asked = [i for i, v in enumerate(out) if v is None]
        if not asked:
            return [v for v in out if v is not None]
        try:
            hits = await self._cache.amget([digests[i] for i in asked], self._model)
        except Exception:
            log.warning("embed_cache.unavailable", exc_info=True)
            hits = [None] * len(asked)
        for i, h in zip(asked, hits, strict=True):
            if h:
                vec = np.asarray(h["embedding"], dtype=np.float32)
                out[i] = vec
                self._remember(digests[i], vec)
        misses = [i for i in asked if out[i] is None]
        if misses:
            fresh = await self.inner.embed([texts[i] for i in misses])
            for i, vec in zip(misses, fresh, strict=True):
                out[i] = vec
                self._remember(digests[i], vec)
            # Stored after the reply: no caller waits for the cache to fill.
            task = asyncio.ensure_future(
                self._store([(digests[i], vec) for i, vec in zip(misses, fresh, strict=True)])
            )
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        return [v for v in out if v is not None]

    async def _store(self, fresh: list[tuple[str, np.ndarray]]) -> None:
        try:
            await self._cache.amset(
                [
                    {"content": digest, "model_name": self._model, "embedding": vec.tolist()}
                    for digest, vec in fresh
                ]
            )
        except Exception:
            log.warning("embed_cache.store_failed", exc_info=True)

    async def close(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self.inner.close()
