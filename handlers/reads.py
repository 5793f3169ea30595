"""Read operations: describe, list, get (search has its own module)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from contracts.messages import (
    CompactListReply,
    DescribeReply,
    DescribeRequest,
    GetReply,
    GetRequest,
    ListReply,
    ListRequest,
)
from handlers.deps import Deps, check_types
from handlers.records import fits_budget, ms_to_dt, split_tags, to_compact, to_memory
from handlers.schema import GENERAL, RECORD_FIELDS, read_filter
from handlers.scoping import read_scope

T = TypeVar("T")


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
    fields = COMPACT_FIELDS if req.mode == "compact" else RECORD_FIELDS
    total, page = await deps.store.page(
        ns, where, offset=req.offset, limit=req.limit, fields=fields
    )
    if req.mode == "compact":
        items = _within(req.max_tokens, [to_compact(m) for m in page], lambda c: c.preview)
        return CompactListReply(count=len(items), total=total, memories=items)
    memories = _within(req.max_tokens, [to_memory(m) for m in page], lambda m: m.content)
    return ListReply(count=len(memories), total=total, memories=memories)


def _within(budget: int | None, items: list[T], text: Callable[[T], str]) -> list[T]:
    """The leading items whose estimated tokens fit the budget (always at least one)."""
    spent = 0
    for i, item in enumerate(items):
        fits, spent = fits_budget(text(item), spent, budget)
        if not fits and i > 0:
            return items[:i]
    return items


async def get(ns: str, req: GetRequest, deps: Deps) -> GetReply:
    unique = list(dict.fromkeys(req.ids))
    found = await deps.store.fetch(ns, unique, deps.clock())
    by_id = {mid: m for mid, m in zip(unique, found, strict=True) if m is not None}
    return GetReply(
        memories=[to_memory(by_id[mid]) for mid in req.ids if mid in by_id],
        missing=[mid for mid in unique if mid not in by_id],
    )
