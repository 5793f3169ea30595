"""The vector of a request: the caller's own (checked against the namespace) or this
handler's embedding of its text."""

from __future__ import annotations

import numpy as np
import structlog

from handlers.errors import InvalidRequest, Unavailable
from handlers.ops.deps import Deps

log = structlog.get_logger("membus.operations")


async def request_vector(
    ns: str, deps: Deps, *, text: str | None, given: list[float] | None = None
) -> np.ndarray:
    meta = await deps.store.meta(ns)
    if given is not None:
        if len(given) != meta.dimension:
            raise InvalidRequest(
                f"`embedding` has {len(given)} dimensions, but namespace {ns!r} stores"
                f" {meta.embedder} vectors of {meta.dimension}; `describe` tells both."
            )
        vec = np.asarray(given, dtype=np.float32)
        if not np.all(np.isfinite(vec)) or not np.any(vec):
            raise InvalidRequest("`embedding` must be finite and not all zeros.")
        return vec
    if text is None:
        raise InvalidRequest("Send a `query` (text) or an `embedding`.")
    embedder = deps.embedder
    if meta.embedder != embedder.name or meta.dimension != embedder.dimension:
        raise Unavailable(
            f"Namespace {ns!r} holds {meta.embedder} vectors ({meta.dimension} dims) but this"
            f" handler embeds with {embedder.name} ({embedder.dimension} dims)."
            f" Send your own `embedding`, or run handlers with MEMBUS_EMBEDDER={meta.embedder}."
        )
    try:
        [vec] = await embedder.embed([text])
    except Exception as exc:
        log.exception("embedder.failed")
        raise Unavailable(f"The {embedder.name} embedder failed; retry shortly.") from exc
    return vec
