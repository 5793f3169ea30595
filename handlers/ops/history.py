"""A memory's history (PROTOCOL v2, `history`): what each change appends, and the read.

Entries are appended by the store's scripts in the same atomic step as the change itself, so
the history never misses or invents a change. It expires with the memory and outlives a
delete by `MEMBUS_HISTORY_AFTER_DELETE_S` (30 days by default).
"""

from __future__ import annotations

from typing import Any

from contracts.messages import Change, HistoryEntry, HistoryReply, HistoryRequest, Request
from handlers.errors import NotFound
from handlers.ops.clock import expiry_dt, ms_to_dt, opt_dt
from handlers.ops.deps import Deps
from handlers.ops.registry import handles
from handlers.store.record import PERMANENT_MS, Entry, Record

# Entries a history read returns at most (a memory mentioned ever so often has more).
MAX_ENTRIES = 1000


def entry(
    event: str,
    at_ms: int,
    req: Request,
    agent_id: str | None = None,
    changes: dict[str, dict[str, Any]] | None = None,
) -> Entry:
    """The entry a change by this request appends."""
    session_id = req.context.session_id if req.context else None
    return Entry(
        event=event, at=at_ms, agent_id=agent_id, session_id=session_id, changes=changes or {}
    )


def _shown(rec: Record) -> dict[str, Any]:
    """The fields an update may change, as replies show them."""
    return {
        "content": rec.content,
        "tags": list(rec.tags),
        "importance": rec.importance,
        # An idle memory's TTL (its indexed expiry moves with every access).
        "expires_at": expiry_dt(
            rec.expires_at if rec.idle_ttl_s is None else rec.ttl_until or PERMANENT_MS
        ),
        "valid_from": opt_dt(rec.valid_from),
        "valid_until": opt_dt(rec.valid_until),
    }


def _change(name: str, change: dict[str, Any]) -> Change:
    """A stored change as replies show it: the supersede script records a closed validity
    in epoch ms (Lua formats no dates)."""
    old, new = change.get("old"), change.get("new")
    if name in _TIMES:
        old = ms_to_dt(old) if isinstance(old, int) else old
        new = ms_to_dt(new) if isinstance(new, int) else new
    return Change(old=old, new=new)


_TIMES = ("valid_from", "valid_until")


def update_changes(old: Record, new: Record) -> dict[str, dict[str, Any]]:
    """Old and new values of each field an update changed."""
    before, after = _shown(old), _shown(new)
    changes: dict[str, dict[str, Any]] = {}
    for name, value in after.items():
        if value != before[name]:
            changes[name] = {"old": before[name], "new": value}
    return changes


@handles(HistoryRequest)
async def history(ns: str, req: HistoryRequest, deps: Deps) -> HistoryReply:
    if deps.access.stores is not None:
        # Below full trust only a live memory in a visible store has a history to read (a
        # deleted one's store is gone with it); others are not found, so no id leaks.
        rec = await deps.store.reads.read(ns, req.id, deps.clock())
        visible = rec is not None and deps.access.sees(rec.store)
    else:
        visible = True
    entries, total = await deps.store.reads.history(ns, req.id, MAX_ENTRIES) if visible else ([], 0)
    if not entries:
        raise NotFound(
            f'No history for memory "{req.id}": no such id, it expired, or it was deleted'
            f" more than {deps.settings.history_after_delete_s // 86400} days ago."
            f" Use mem.{ns}.list or mem.{ns}.search to find current ids."
        )
    return HistoryReply(
        id=req.id,
        entries=[
            HistoryEntry(
                event=e.event,
                at=ms_to_dt(e.at),
                agent_id=e.agent_id,
                session_id=e.session_id,
                changes={k: _change(k, v) for k, v in e.changes.items()},
                reason=e.reason,
            )
            for e in entries
        ],
        truncated=total > len(entries),
    )
