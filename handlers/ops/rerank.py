"""The second opinion (`MEMBUS_RERANK=e5`): the first stage's best `rerank_depth`
candidates re-ordered by the sum of two z-scores over them, the first stage's final score
and a second model's cosine between the query and each candidate's content, weighted by
`rerank_weight`.

The second model's vectors of stored contents come from the embedding cache (keyed by the
content's digest, under the model `e5/384`, the key a namespace embedded by e5 uses too):
computed when the memory is written (`warm`, beside the first embedder's vector), and at
read time for a candidate whose entry is missing (written before the stage was turned on,
or expired from the cache), then cached. Erasure drops them with the first embedder's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import structlog

from handlers.embed.base import Embedder
from handlers.embed.cache import CachedEmbedder, cache_model, cached
from handlers.errors import Unavailable
from handlers.settings import Settings
from handlers.store.keys import EMBED_CACHE
from handlers.store.record import Fetched

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from handlers.ops.search import Ranked

log = structlog.get_logger("membus.operations")

# The cache model of e5's passage vectors: that of a namespace embedded by e5.
E5_CACHE_MODEL = cache_model("e5", 384)


def zscores(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """(x - mean) / std; all zeros when the values do not differ."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return x
    std = float(x.std())
    return (x - x.mean()) / std if std > 1e-12 else np.zeros_like(x)


def fused_order(first: Sequence[float], second: Sequence[float], weight: float) -> list[int]:
    """Indices best first by z(first) + weight * z(second); equals keep the first order."""
    fused = zscores(first) + weight * zscores(second)
    return sorted(range(len(fused)), key=lambda i: (-fused[i], i))


class SecondOpinion:
    """The second model, embedding stored contents (through the cache) and queries."""

    def __init__(self, model: Embedder, depth: int, weight: float) -> None:
        self.model = model
        self.depth = depth
        self.weight = weight

    def forget(self, texts: list[str]) -> None:
        """Drop erased texts from this handler's recent vectors."""
        if isinstance(self.model, CachedEmbedder):
            self.model.forget(texts)

    async def close(self) -> None:
        await self.model.close()

    async def warm(self, texts: list[str]) -> None:
        """Compute (and cache) the second vectors of contents being written. A failure
        fails no write: a search computes what is missing."""
        try:
            await self.model.embed(texts)
        except Exception:
            log.warning("rerank.warm_failed", exc_info=True)

    async def rerank(
        self, query: str, ranked: list[Ranked], records: dict[str, Fetched | None]
    ) -> list[Ranked]:
        """`ranked` with its best `depth` re-ordered; those whose record was not read
        (vanished) keep a z-score of 0 from the second model."""
        head, tail = ranked[: self.depth], ranked[self.depth :]
        if len(head) < 2:
            return ranked
        texts = {r.id: f.record.content for r in head if (f := records.get(r.id)) is not None}
        ids = list(texts)
        try:
            q, stored = await asyncio.gather(
                self.model.embed_queries([query]), self.model.embed([texts[i] for i in ids])
            )
        except Exception as exc:
            log.exception("rerank.failed")
            raise Unavailable("The e5 second opinion failed; retry shortly.") from exc
        cos = {mid: float(np.dot(v, q[0])) for mid, v in zip(ids, stored, strict=True)}
        known = list(cos.values())
        mean = float(np.mean(known)) if known else 0.0
        second = [cos.get(r.id, mean) for r in head]
        order = fused_order([r.score for r in head], second, self.weight)
        return [head[i] for i in order] + tail


def make_reranker(settings: Settings, client: aioredis.Redis) -> SecondOpinion | None:
    """The second opinion the settings ask for; None when off, or (said in the log, and the
    handler serves searches without it) when its extra is not installed."""
    if settings.rerank == "off":
        return None
    from handlers.embed.e5 import E5Embedder, e5_missing

    if (lacks := e5_missing()) is not None:
        log.error("rerank.unavailable", rerank=settings.rerank, needs=lacks)
        return None
    model: Embedder = E5Embedder()
    if settings.embed_cache:
        model = cached(model, EMBED_CACHE, settings.embed_cache_ttl_s, client)
    else:
        # Nowhere to keep the contents' vectors: each search embeds its 30 candidates.
        log.warning("rerank.uncached", cost="an e5 passage per candidate per search")
    return SecondOpinion(model, settings.rerank_depth, settings.rerank_weight)
