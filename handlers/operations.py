"""The operations of PROTOCOL.md as plain async functions: `(ns, request, deps) -> reply`.

They know nothing of NATS; `dispatch` turns bytes into requests and replies into bytes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import msgspec
import numpy as np
import structlog

from contracts import limits
from contracts.messages import (
    AddReply,
    AddRequest,
    ClearByTypeReply,
    ClearByTypeRequest,
    CompactListReply,
    DeleteReply,
    DeleteRequest,
    DescribeReply,
    DescribeRequest,
    Event,
    GetReply,
    GetRequest,
    ListReply,
    ListRequest,
    ScoredMemory,
    SearchReply,
    SearchRequest,
    preview,
)
from contracts.subjects import event_subject
from contracts.types import TypeConfig, TypeTable
from handlers import ranking
from handlers.embedders import Embedder
from handlers.errors import InvalidRequest, TooLarge, Unavailable
from handlers.ids import new_id
from handlers.ranking import RankWeights
from handlers.records import (
    dt_to_ms,
    ms_to_dt,
    now_ms,
    split_tags,
    to_compact,
    to_memory,
    to_scored,
)
from handlers.schema import GENERAL, PERMANENT_MS, NamespaceMeta, read_filter
from handlers.scoping import ReadScope, read_scope, storage_workflow
from handlers.store import Store

log = structlog.get_logger("membus.operations")

Publish = Callable[[str, bytes], Awaitable[None]]
_event_encoder = msgspec.json.Encoder()
_metadata_encoder = msgspec.json.Encoder()
CLEAR_BATCH = 500


@dataclass(frozen=True, slots=True)
class Deps:
    store: Store
    embedder: Embedder
    types: TypeTable
    weights: RankWeights
    publish: Publish
    clock: Callable[[], int] = field(default=now_ms)


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
    data = _metadata_encoder.encode(value)
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
    await deps.publish(event_subject(ns, workflow_id, type_, action), _event_encoder.encode(event))


# --------------------------------------------------------------------------- operations


async def add(ns: str, req: AddRequest, deps: Deps) -> AddReply:
    cfg = type_config(deps.types, req.type)
    check_content(req.content)
    metadata = check_metadata(req.metadata)
    _, meta = await deps.store.namespace(ns)
    vec = await query_vector(ns, meta, req.content, req.embedding, deps)

    workflow_id = storage_workflow(cfg, req.scope, req.workflow_id)
    importance = cfg.importance if req.importance is None else req.importance
    ttl_s = cfg.ttl_s if req.ttl_s is None else req.ttl_s
    now = deps.clock()
    expires = now + ttl_s * 1000 if ttl_s else PERMANENT_MS
    memory_id = new_id(now)
    fields: dict[str, str | bytes | float | int] = {
        "id": memory_id,
        "type": req.type,
        "content": req.content,
        "importance": importance,
        "general": GENERAL if workflow_id is None else "0",
        "created_at": now,
        "updated_at": now,
        "expires_at": expires,
        "embedding": vec.astype(np.float32).tobytes(),
    }
    optional = {
        "tags": ",".join(req.tags),
        "wf": workflow_id,
        "agent_id": req.agent_id,
        "source": req.source,
        "metadata": metadata,
    }
    fields.update({k: v for k, v in optional.items() if v})
    await deps.store.write(ns, fields, expires)
    await publish_event(
        deps,
        ns,
        "added",
        memory_id=memory_id,
        type_=req.type,
        workflow_id=workflow_id,
        agent_id=req.agent_id,
        content=req.content,
        at_ms=now,
    )
    return AddReply(
        id=memory_id,
        workflow_id=workflow_id,
        importance=importance,
        expires_at=None if expires == PERMANENT_MS else ms_to_dt(expires),
    )


async def search(ns: str, req: SearchRequest, deps: Deps) -> SearchReply:
    check_types(deps.types, req.types)
    _, meta = await deps.store.namespace(ns)
    vec = await query_vector(ns, meta, req.query, req.embedding, deps)
    now = deps.clock()
    # Expiry is checked on the candidates below, not in the vector query's filter.
    where = read_filter(
        None,
        read_scope(req.scope, req.workflow_id),
        types=req.types,
        tags=req.tags,
        since_ms=dt_to_ms(req.since) if req.since else None,
        until_ms=dt_to_ms(req.until) if req.until else None,
    )
    candidates = await deps.store.knn(ns, vec, where, ranking.overfetch(req.limit))
    ranked = []
    for m in candidates:
        if int(m.fields["expires_at"]) <= now:
            continue
        sim = ranking.similarity(m.distance or 0.0)
        total = ranking.score(
            sim, float(m.fields["importance"]), int(m.fields["created_at"]), now, deps.weights
        )
        if req.min_score is None or total >= req.min_score:
            ranked.append((total, sim, m.fields["created_at"], m.id))
    ranked.sort(key=lambda r: (r[0], r[1], int(r[2])), reverse=True)
    results: list[ScoredMemory] = []
    # Only the winners' records are read (and counted as accessed); one that vanished since
    # the vector query (deleted, expired) gives its place to the next candidate.
    while ranked and len(results) < req.limit:
        want = req.limit - len(results)
        batch, ranked = ranked[:want], ranked[want:]
        records = await deps.store.fetch(ns, [r[3] for r in batch], now)
        for (total, sim, _, _), rec in zip(batch, records, strict=True):
            if rec is not None:
                results.append(to_scored(rec, total, sim))
    return SearchReply(results=results)


async def describe(ns: str, req: DescribeRequest, deps: Deps) -> DescribeReply:
    scope = read_scope(req.scope, req.workflow_id)
    _, meta = await deps.store.namespace(ns)
    rows = await deps.store.aggregate(ns, read_filter(deps.clock(), scope))
    by_type: dict[str, int] = {}
    tags: set[str] = set()
    general_count = workflow_count = 0
    oldest: int | None = None
    newest: int | None = None
    for row in rows:
        n = int(row["n"])
        by_type[row["type"]] = by_type.get(row["type"], 0) + n
        if row.get("general") == GENERAL:
            general_count += n
        else:
            workflow_count += n
        for raw in row.get("tags") or []:
            tags.update(split_tags(raw))
        lo, hi = int(float(row["oldest"])), int(float(row["newest"]))
        oldest = lo if oldest is None else min(oldest, lo)
        newest = hi if newest is None else max(newest, hi)
    return DescribeReply(
        total=general_count + workflow_count,
        by_type=dict(sorted(by_type.items())),
        tags=sorted(tags),
        scope=scope.applied,  # type: ignore[arg-type]
        workflow_id=scope.workflow_id,
        workflow_count=workflow_count,
        general_count=general_count,
        oldest=ms_to_dt(oldest) if oldest is not None else None,
        newest=ms_to_dt(newest) if newest is not None else None,
        embedder=meta.embedder,
        dimension=meta.dimension,
    )


COMPACT_FIELDS = ("id", "type", "content", "tags", "importance", "wf", "created_at")


async def list_(ns: str, req: ListRequest, deps: Deps) -> ListReply | CompactListReply:
    check_types(deps.types, req.types)
    where = read_filter(
        deps.clock(), read_scope(req.scope, req.workflow_id), types=req.types, tags=req.tags
    )
    if req.mode == "compact":
        total, page = await deps.store.page(
            ns, where, offset=req.offset, limit=req.limit, fields=COMPACT_FIELDS
        )
        items = [to_compact(m) for m in page]
        return CompactListReply(count=len(items), total=total, memories=items)
    total, page = await deps.store.page(ns, where, offset=req.offset, limit=req.limit)
    memories = [to_memory(m) for m in page]
    return ListReply(count=len(memories), total=total, memories=memories)


async def get(ns: str, req: GetRequest, deps: Deps) -> GetReply:
    unique = list(dict.fromkeys(req.ids))
    found = await deps.store.fetch(ns, unique, deps.clock())
    by_id = {mid: m for mid, m in zip(unique, found, strict=True) if m is not None}
    return GetReply(
        memories=[to_memory(by_id[mid]) for mid in req.ids if mid in by_id],
        missing=[mid for mid in unique if mid not in by_id],
    )


async def _delete_and_announce(ns: str, ids: list[str], deps: Deps) -> tuple[int, list[str]]:
    now = deps.clock()
    rows = await deps.store.delete(ns, ids, now)
    missing = []
    for mid, row in zip(ids, rows, strict=True):
        if row is None:
            missing.append(mid)
            continue
        _, type_, workflow_id, agent_id, content = row
        await publish_event(
            deps,
            ns,
            "deleted",
            memory_id=mid,
            type_=type_,
            workflow_id=workflow_id,
            agent_id=agent_id,
            content=content,
            at_ms=now,
        )
    return len(ids) - len(missing), missing


async def delete(ns: str, req: DeleteRequest, deps: Deps) -> DeleteReply:
    deleted, missing = await _delete_and_announce(ns, list(dict.fromkeys(req.ids)), deps)
    return DeleteReply(deleted=deleted, missing=missing)


async def clear_by_type(ns: str, req: ClearByTypeRequest, deps: Deps) -> ClearByTypeReply:
    type_config(deps.types, req.type)
    if req.scope == "general":
        scope = ReadScope(workflow_id=None, general=True)
    else:
        scope = ReadScope(workflow_id=req.workflow_id, general=False)
    total = 0
    while True:
        where = read_filter(deps.clock(), scope, types=[req.type])
        ids = await deps.store.ids(ns, where, CLEAR_BATCH)
        if not ids:
            break
        deleted, _ = await _delete_and_announce(ns, ids, deps)
        total += deleted
        if deleted == 0:
            # Everything we saw was removed by someone else meanwhile; the index has caught up.
            break
    return ClearByTypeReply(deleted=total)


OPERATIONS: dict[str, Callable[[str, object, Deps], Awaitable[msgspec.Struct]]] = {
    "add": add,  # type: ignore[dict-item]
    "search": search,  # type: ignore[dict-item]
    "describe": describe,  # type: ignore[dict-item]
    "list": list_,  # type: ignore[dict-item]
    "get": get,  # type: ignore[dict-item]
    "delete": delete,  # type: ignore[dict-item]
    "clear_by_type": clear_by_type,  # type: ignore[dict-item]
}
