"""Reading memories as a conversation, beside `history`: `timeline`, the memories around one, and
`people`, who the memories in scope name. Both read only live memories the scope sees."""

from __future__ import annotations

from redisvl.query.filter import Num

from contracts.messages import (
    CompactTimelineReply,
    PeopleReply,
    PeopleRequest,
    Person,
    TimelineReply,
    TimelineRequest,
)
from handlers.errors import NotFound
from handlers.ops.checks import check_types
from handlers.ops.clock import ms_to_dt
from handlers.ops.deps import Deps
from handlers.ops.registry import handles
from handlers.ops.replies import to_compact, to_memory
from handlers.ops.scoping import read_scope, read_time
from handlers.store.filters import ReadScope, Tag, read_filter
from handlers.store.record import Mentions, Record, expiry, person_tag

# Memories of the anchor's millisecond that a side reads beyond its count, to order them.
TIES = 16
# `people` counts the newest this many memories in scope that name someone.
PEOPLE_SCAN = 10_000
NEWEST_IDS = 5


def _sees(scope: ReadScope, rec: Record) -> bool:
    if scope.workspace is not None:
        if rec.workspace != scope.workspace:
            return False
        if scope.workflow_id is None and not scope.general:
            return True  # a workspace alone: all of its memories (`read_scope`)
    if rec.workflow_id is None:
        return scope.general
    return rec.workflow_id == scope.workflow_id


def _order(rec: Record) -> tuple[int, str]:
    # Within one millisecond, ids (ULIDs) order the memories.
    return rec.created_at, rec.id


@handles(TimelineRequest)
async def timeline(
    ns: str, req: TimelineRequest, deps: Deps
) -> TimelineReply | CompactTimelineReply:
    check_types(deps.settings.types, req.types)
    now = deps.clock()
    scope = read_scope(req.scope, req.workflow_id, req.workspace, deps.access.stores)
    anchor = await deps.store.reads.read(ns, req.anchor, now)
    if anchor is None or not deps.access.sees(anchor.store) or not _sees(scope, anchor):
        raise NotFound(
            f'Memory "{req.anchor}" is not in this scope (no such id, expired, or stored in'
            f" another workflow). Use mem.{ns}.list or mem.{ns}.search to find an anchor."
        )
    when = read_time(req.as_of, req.include_superseded, now)
    where = read_filter(now, scope, types=req.types, current=when.current, as_of_ms=when.as_of_ms)
    at, key = anchor.created_at, _order(anchor)
    before: list[Record] = []
    after: list[Record] = []
    if req.before:
        older = await deps.store.queries.page(
            ns,
            where & (Num("created_at") <= at),
            Record,
            offset=0,
            limit=req.before + TIES,
            ended_by=when.ended_by,
        )
        before = sorted((r for r in older.items if _order(r) < key), key=_order)
        before = before[-req.before :]
    if req.after:
        newer = await deps.store.queries.page(
            ns,
            where & (Num("created_at") >= at),
            Record,
            offset=0,
            limit=req.after + TIES,
            oldest_first=True,
            ended_by=when.ended_by,
        )
        after = sorted((r for r in newer.items if _order(r) > key), key=_order)[: req.after]
    window = [*before, anchor, *after]
    deps.store.reads.keep_alive_later(ns, window, now)
    if req.mode == "full":
        # Their expiry as `keep_alive_later`, at `now`, leaves it.
        shown = [to_memory(r, expires_ms=expiry(r, now)) for r in window]
        return TimelineReply(memories=shown, anchor_index=len(before))
    return CompactTimelineReply(memories=[to_compact(r) for r in window], anchor_index=len(before))


@handles(PeopleRequest)
async def people(ns: str, req: PeopleRequest, deps: Deps) -> PeopleReply:
    now = deps.clock()
    scope = read_scope(req.scope, req.workflow_id, stores=deps.access.stores)
    where = read_filter(now, scope) & (Tag("has_people") == "1")
    found = await deps.store.queries.page(ns, where, Mentions, offset=0, limit=PEOPLE_SCAN)
    wanted = person_tag(req.query) if req.query else None
    seen: dict[str, Person] = {}
    last_ms: dict[str, int] = {}
    for m in found.items:  # newest first
        named: dict[str, str] = {}
        for name in m.related_people:
            named.setdefault(person_tag(name), name)
        for key, name in named.items():
            if wanted is not None and wanted not in key:
                continue
            person = seen.get(key)
            if person is None:
                person = seen[key] = Person(
                    name=name, mention_count=0, last_mentioned_at=ms_to_dt(m.created_at),
                    memory_ids=[],
                )  # fmt: skip
                last_ms[key] = m.created_at
            person.mention_count += 1
            if len(person.memory_ids) < NEWEST_IDS:
                person.memory_ids.append(m.id)
    ranked = sorted(seen, key=lambda k: (-last_ms[k], k))[: req.limit]
    return PeopleReply(people=[seen[k] for k in ranked])
