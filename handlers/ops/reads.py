"""Read operations: describe, list, get (search has its own module)."""

from __future__ import annotations

from typing import cast

from contracts import limits
from contracts.messages import (
    CompactListReply,
    DescribeReply,
    DescribeRequest,
    GetReply,
    GetRequest,
    ListReply,
    ListRequest,
)
from handlers.ops.budget import within
from handlers.ops.checks import check_types
from handlers.ops.clock import ms_to_dt
from handlers.ops.deps import Deps
from handlers.ops.registry import handles
from handlers.ops.replies import to_compact, to_memory, wire_scope
from handlers.ops.scoping import read_scope, read_time
from handlers.store.filters import read_filter
from handlers.store.queries import Page
from handlers.store.record import Record, Summary, expiry


@handles(DescribeRequest)
async def describe(ns: str, req: DescribeRequest, deps: Deps) -> DescribeReply:
    scope = read_scope(req.scope, req.workflow_id, req.workspace, deps.access.stores)
    meta = await deps.store.meta(ns)
    seen = await deps.store.queries.overview(ns, scope, deps.clock())
    listed = seen.tags[: limits.MAX_DESCRIBE_TAGS]
    return DescribeReply(
        total=seen.general_count + seen.workflow_count,
        by_type=dict(seen.by_type),
        tags=listed,
        tags_truncated=len(seen.tags) > len(listed),
        scope=wire_scope(scope),
        workflow_id=scope.workflow_id,
        workflow_count=seen.workflow_count,
        general_count=seen.general_count,
        superseded_count=seen.superseded_count,
        idle_count=seen.idle_count,
        oldest=ms_to_dt(seen.oldest) if seen.oldest is not None else None,
        newest=ms_to_dt(seen.newest) if seen.newest is not None else None,
        embedder=meta.embedder,
        dimension=meta.dimension,
    )


@handles(ListRequest)
async def list_(ns: str, req: ListRequest, deps: Deps) -> ListReply | CompactListReply:
    check_types(deps.settings.types, req.types)
    now = deps.clock()
    scope = read_scope(req.scope, req.workflow_id, req.workspace, deps.access.stores)
    when = read_time(req.as_of, req.include_superseded, now)
    current = when.current
    page: Page[Summary] | Page[Record] | None = None
    if not (req.types or req.tags or req.people):
        # Scope alone: the page comes from the writes' tallies, not a sort of the scope.
        page = await deps.store.queries.newest(
            ns,
            scope,
            now,
            offset=req.offset,
            limit=req.limit,
            current=current,
            as_of_ms=when.as_of_ms,
        )
    if page is None:
        where = read_filter(
            now,
            scope,
            types=req.types,
            tags=req.tags,
            people=req.people,
            current=current,
            as_of_ms=when.as_of_ms,
        )
        shape = Summary if req.mode == "compact" else Record
        page = await deps.store.queries.page(
            ns, where, shape, offset=req.offset, limit=req.limit, ended_by=when.ended_by
        )
    deps.store.reads.keep_alive_later(ns, page.items, now)
    if req.mode == "compact":
        items = within(req.max_tokens, [to_compact(s) for s in page.items], lambda c: c.preview)
        return CompactListReply(count=len(items), total=page.total, memories=items)
    records = cast(list[Record], page.items)
    # Their expiry as `keep_alive_later`, at `now`, leaves it.
    shown = [to_memory(r, expires_ms=expiry(r, now)) for r in records]
    memories = within(req.max_tokens, shown, lambda m: m.content)
    return ListReply(count=len(memories), total=page.total, memories=memories)


@handles(GetRequest)
async def get(ns: str, req: GetRequest, deps: Deps) -> GetReply:
    now = deps.clock()
    keyed = await _holders(ns, req.keys or [], deps)
    unique = list(dict.fromkeys([*(req.ids or []), *(mid for mid, _ in keyed)]))
    # Full trust sees every store, so the read counts its accesses itself; below it, only
    # the memories seen are counted: one of another store stays untouched.
    sees_all = deps.access.stores is None
    found = await deps.store.reads.fetch(ns, unique, now, count_access=sees_all)
    by_id = {
        mid: f
        for mid, f in zip(unique, found, strict=True)
        if f is not None and deps.access.sees(f.record.store)
    }
    # A key names a memory while it is current and holds it (not superseded, not ended).
    held = {
        key
        for mid, key in keyed
        if (f := by_id.get(mid)) is not None and f.record.key == key and _current(f.record, now)
    }
    asked = set(req.ids or [])
    stale = {mid for mid, key in keyed if key not in held and mid not in asked}
    by_id = {mid: f for mid, f in by_id.items() if mid not in stale}
    if not sees_all:
        # Counted now: the expiries shown are those after this access.
        touched = await deps.store.reads.touch(ns, list(by_id), now)
        by_id = {
            mid: f._replace(expires_ms=t)
            for (mid, f), t in zip(by_id.items(), touched, strict=True)
            if t is not None
        }
    return GetReply(
        # Each distinct id once, in the order first asked for.
        memories=[
            to_memory(f.record, f.access_count, f.last_accessed_ms, expires_ms=f.expires_ms)
            for mid in unique
            if (f := by_id.get(mid)) is not None
        ],
        missing=[mid for mid in dict.fromkeys(req.ids or []) if mid not in by_id],
        missing_keys=[key for key in dict.fromkeys(req.keys or []) if key not in held],
    )


async def _holders(ns: str, names: list[str], deps: Deps) -> list[tuple[str, str]]:
    """(id, key) of the memories the keys name, in the stores the caller sees."""
    named = [(st, key) for key in dict.fromkeys(names) for st in deps.access.visible]
    ids = await deps.store.reads.key_holders(ns, named)
    return [(mid, key) for (_, key), mid in zip(named, ids, strict=True) if mid is not None]


def _current(rec: Record, now: int) -> bool:
    return rec.superseded_by is None and (rec.valid_until is None or rec.valid_until > now)
