"""What every operation shares: `Deps`, request checks, query vectors and events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import msgspec
import numpy as np
import structlog

from contracts import limits
from contracts.messages import Event, preview
from contracts.subjects import event_subject
from contracts.types import TypeConfig, TypeTable
from handlers.embedders import Embedder
from handlers.errors import InvalidRequest, TooLarge, Unavailable
from handlers.ranking import RankWeights
from handlers.records import ms_to_dt, now_ms
from handlers.schema import NamespaceMeta
from handlers.store import Store

log = structlog.get_logger("membus.operations")

Publish = Callable[[str, bytes], Awaitable[None]]
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Deps:
    store: Store
    embedder: Embedder
    types: TypeTable
    weights: RankWeights
    publish: Publish
    clock: Callable[[], int] = field(default=now_ms)
    # Near-duplicate threshold (cosine) for `add` with `dedup: "semantic"`.
    dedup_threshold: float = 0.95
    # The search mode used when a request names none, and how hybrid fuses its two signals.
    default_mode: str = "hybrid"
    fusion: str = "linear"
    hybrid_alpha: float = 0.8


# --------------------------------------------------------------------------- checks


def type_config(types: TypeTable, name: str) -> TypeConfig:
    cfg = types.get(name)
    if cfg is None:
        raise InvalidRequest(f'Unknown memory type "{name}". Known types: {", ".join(types)}.')
    return cfg


def check_types(types: TypeTable, names: Iterable[str] | None) -> None:
    for name in names or ():
        type_config(types, name)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def check_metadata(value: dict[str, object] | None) -> bytes | None:
    """The metadata as the JSON we store, once it is known to be small and shallow."""
    if value is None:
        return None
    data = _encoder.encode(value)
    if len(data) > limits.MAX_METADATA_BYTES:
        raise TooLarge(
            f"`metadata` is {len(data)} bytes of JSON; the limit is {limits.MAX_METADATA_BYTES}."
            " Keep metadata small and put long text in `content`."
        )
    if _depth(value) > 8:
        raise InvalidRequest("`metadata` nests more than 8 levels deep; flatten it.")
    return data


def check_content(content: str) -> None:
    size = len(content.encode())
    if size > limits.MAX_CONTENT_BYTES:
        raise TooLarge(
            f"`content` is {size} bytes; the limit is {limits.MAX_CONTENT_BYTES} (32 KiB)."
            " Split it into several memories or store a summary."
        )


async def query_vector(
    ns: str, meta: NamespaceMeta, text: str | None, given: list[float] | None, deps: Deps
) -> np.ndarray:
    """The caller's vector (checked against the namespace) or this handler's embedding."""
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
    if meta.embedder != deps.embedder.name or meta.dimension != deps.embedder.dimension:
        raise Unavailable(
            f"Namespace {ns!r} holds {meta.embedder} vectors ({meta.dimension} dims) but this"
            f" handler embeds with {deps.embedder.name} ({deps.embedder.dimension} dims)."
            f" Send your own `embedding`, or run handlers with MEMBUS_EMBEDDER={meta.embedder}."
        )
    assert text is not None
    try:
        [vec] = await deps.embedder.embed([text])
    except Exception as exc:
        log.exception("embedder.failed")
        raise Unavailable(f"The {deps.embedder.name} embedder failed; retry shortly.") from exc
    return vec


async def publish_event(
    deps: Deps,
    ns: str,
    action: str,
    *,
    memory_id: str,
    type_: str,
    workflow_id: str | None,
    agent_id: str | None,
    content: str,
    at_ms: int,
) -> None:
    event = Event(
        action=action,
        id=memory_id,
        type=type_,
        workflow_id=workflow_id,
        agent_id=agent_id,
        at=ms_to_dt(at_ms),
        preview=preview(content),
    )
    await deps.publish(event_subject(ns, workflow_id, type_, action), _encoder.encode(event))
