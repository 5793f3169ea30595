"""Embeddings cached in Redis by embedder and text, so a text is embedded once however many
handlers see it.

Why a wrapper and not the `cache=` that redisvl's vectorizers take: `minilm` is not a redisvl
vectorizer (it batches concurrent requests into one forward pass), so one wrapper serves every
embedder alike, with one key (`name/dimension`, the namespace's own description of its
vectors) where redisvl would key by model name alone.
"""

from __future__ import annotations

import numpy as np
import structlog
from redisvl.extensions.cache.embeddings import EmbeddingsCache

from handlers.embed.base import Embedder

log = structlog.get_logger("membus.embedders")


class CachedEmbedder:
    def __init__(self, inner: Embedder, cache: EmbeddingsCache) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self._cache = cache
        self._model = f"{inner.name}/{inner.dimension}"

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        try:
            hits = await self._cache.amget(texts, self._model)
        except Exception:
            log.warning("embed_cache.unavailable", exc_info=True)
            return await self.inner.embed(texts)
        out: list[np.ndarray | None] = [
            np.asarray(h["embedding"], dtype=np.float32) if h else None for h in hits
        ]
        misses = [i for i, v in enumerate(out) if v is None]
        if misses:
            fresh = await self.inner.embed([texts[i] for i in misses])
            for i, vec in zip(misses, fresh, strict=True):
                out[i] = vec
            try:
                await self._cache.amset(
                    [
                        {"content": texts[i], "model_name": self._model, "embedding": vec.tolist()}
                        for i, vec in zip(misses, fresh, strict=True)
                    ]
                )
            except Exception:
                log.warning("embed_cache.store_failed", exc_info=True)
        return [v for v in out if v is not None]

    async def close(self) -> None:
        await self.inner.close()
