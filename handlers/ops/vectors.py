"""The vector of a request: the caller's own (checked against the namespace) or this
handler's embedding of its text."""

from __future__ import annotations

import asyncio

import numpy as np
import structlog

from handlers.errors import InvalidRequest, Unavailable
from handlers.ops.deps import Deps
from handlers.store.schema import NamespaceMeta

log = structlog.get_logger("membus.operations")


async def request_vector(
    ns: str,
    deps: Deps,
    *,
    text: str | None,
    given: list[float] | None = None,
    query: bool = False,
) -> np.ndarray:
    """The vector of one request; `query` when it is only compared, never stored."""
    meta = await deps.store.meta(ns)
    if given is not None:
        return given_vector(ns, meta, given)
    if text is None:
        raise InvalidRequest("Send a `query` (text) or an `embedding`.")
    [vec] = await embed_texts(ns, deps, meta, [text], query=query)
    return vec


def given_vector(ns: str, meta: NamespaceMeta, given: list[float]) -> np.ndarray:
    """A caller's own vector, checked against the namespace's."""
    if len(given) != meta.dimension:
        raise InvalidRequest(
            f"`embedding` has {len(given)} dimensions, but namespace {ns!r} stores"
            f" {meta.embedder} vectors of {meta.dimension}; `describe` tells both."
        )
    vec = np.asarray(given, dtype=np.float32)
    if not np.all(np.isfinite(vec)) or not np.any(vec):
        raise InvalidRequest("`embedding` must be finite and not all zeros.")
    return vec


async def embed_texts(
    ns: str, deps: Deps, meta: NamespaceMeta, texts: list[str], *, query: bool = False
) -> list[np.ndarray]:
    """This handler's embeddings of `texts`, in one call, if its embedder is the namespace's."""
    embedder = deps.embedder
    if meta.embedder != embedder.name or meta.dimension != embedder.dimension:
        raise Unavailable(
            f"Namespace {ns!r} holds {meta.embedder} vectors ({meta.dimension} dims) but this"
            f" handler embeds with {embedder.name} ({embedder.dimension} dims)."
            f" Send your own `embedding`, or run handlers with MEMBUS_EMBEDDER={meta.embedder}."
        )
    try:
        if not query and deps.reranker is not None:
            # Stored texts get the second opinion's vectors too (cached), computed beside.
            vectors, _ = await asyncio.gather(embedder.embed(texts), deps.reranker.warm(texts))
            return vectors
        return await (embedder.embed_queries if query else embedder.embed)(texts)
    except Exception as exc:
        log.exception("embedder.failed")
        raise Unavailable(f"The {embedder.name} embedder failed; retry shortly.") from exc
