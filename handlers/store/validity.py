"""v3 validity: when a fact held in the world (`valid_from`, `valid_until`), beside when it
was learnt.

Current reads leave out a memory whose validity has ended as they leave out a superseded
one, through the same `superseded` flag: the writes keep the current memories that have an
end in a sorted set (`retally` in the tallies' Lua), and a read first flags those whose end has
passed (`end_in`, and `describe`'s and `list`'s tally reads), so a current read costs the one
negation it always did. `as_of` reads match the `vf`/`vu` index fields instead
(`filters.valid_at`).

A namespace written before v3 had memories without `vf`/`vu`, which no `as_of` filter
matches: the migration to layout 3 gave them their window (`backfill`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import redis.asyncio as aioredis
import structlog

from handlers.store import keys
from handlers.store.cluster import batches, scan_iter
from handlers.store.failures import Guard
from handlers.store.lua import fragment, lua
from handlers.store.resp import text
from handlers.store.tallies import VALIDITY_COMPLETE, VALIDITY_TALLIED, tally_prefix
from handlers.store.tallies.scripts import ENDS_MAX, TALLY

log = structlog.get_logger("membus.store")

# Before a current read: flag (and count as such) the memories whose validity has ended by
# now (see end_validity), up to ENDS_MAX of them. KEYS: the tally prefix. ARGV: now, the
# record key prefix. Returns how many were flagged.
ENDED_LUA = lua(
    TALLY,
    fragment(
        "return end_validity(KEYS[1], ARGV[2], tonumber(ARGV[1]), $ends_max)",
        ends_max=ENDS_MAX,
    ),
)


# Give memories written before v3 their validity window for `as_of` reads (`vf`, `vu`): from
# `created_at`, and, for a superseded one, until the newer memory's start (or, when that one
# is gone, the moment of the supersede, its `updated_at`). A memory with `vf` already is left
# as it is; each is counted again, with its window (tally_desc). KEYS: the tally prefix,
# then record keys. ARGV: the record key prefix, now (ms), then each record's memory id
# (from ARGV[3]). Returns how many were given one.
VALIDITY_BACKFILL_LUA = lua(
    TALLY,
    """
local n = 0
for i = 2, #KEYS do
  local rec, id = KEYS[i], ARGV[i + 1]
  local f = redis.call('HMGET', rec, '$id', 'vf', '$created_at', '$valid_from', '$valid_until',
    '$superseded_by', '$updated_at')
  if f[1] and not f[2] then
    local vf = f[4] or f[3] or '0'
    local vu = f[5]
    if not vu and f[6] then
      local newer = redis.call('HMGET', ARGV[1] .. f[6], '$valid_from', '$created_at')
      vu = newer[1] or newer[2] or f[7] or f[3]
      if tonumber(vu) < tonumber(vf) then vu = vf end
      redis.call('HSET', rec, '$valid_until', vu)
    end
    redis.call('HSET', rec, 'vf', vf, 'vu', vu or '$open_until')
    n = n + 1
  end
  if f[1] then retally(KEYS[1], id, rec, tonumber(ARGV[2])) end
end
return n
""",
)


class ReadTime(NamedTuple):
    """Which memories a read sees in time: the current ones (`current`), those valid at
    `as_of_ms` (v3), or, with `include_superseded` and no `as_of`, all of them. A current
    read's queries flag the memories whose validity ended by `ended_by` first (its time)."""

    current: bool
    as_of_ms: int | None
    ended_by: int | None = None


def read_time(as_of_ms: int | None, include_superseded: bool, now_ms: int) -> ReadTime:
    """A read's time rule (every memory has its validity window: layout 3)."""
    if as_of_ms is not None:
        return ReadTime(current=False, as_of_ms=as_of_ms)
    if include_superseded:
        return ReadTime(current=False, as_of_ms=None)
    return ReadTime(current=True, as_of_ms=None, ended_by=now_ms)


class Validity:
    def __init__(self, client: aioredis.Redis, guard: Guard) -> None:
        self.client = client
        self._guard = guard
        self._ended = client.register_script(ENDED_LUA)
        self._backfill = client.register_script(VALIDITY_BACKFILL_LUA)

    def end_in(self, pipe: Any, ns: str, now_ms: int) -> None:
        """Queue into a pipeline, before the current read it prepares (`Queries`), the flag
        of the memories whose validity has ended by `now_ms` (a bounded batch)."""
        args = [now_ms, keys.record_prefix(ns)]
        pipe.execute_command("EVALSHA", self._ended.sha, 1, tally_prefix(ns), *args)

    async def backfill(self, ns: str, now_ms: int, size: int = 200) -> int:
        """Give every memory of the namespace written before v3 its validity window, count
        each memory's window in the tallies (`as_of` lists), then mark the namespace
        complete for both; how many were given one. New writes carry theirs, and a memory
        that has one keeps it, so running it twice changes nothing."""
        prefix = tally_prefix(ns)
        given = 0
        async with self._guard():
            records = scan_iter(self.client, ns, f"{keys.record_prefix(ns)}*")
            async for batch in batches(records, size):
                given += await self._fill(ns, prefix, batch, now_ms)
            await self.client.set(prefix + VALIDITY_COMPLETE, 1)
            await self.client.set(prefix + VALIDITY_TALLIED, 1)
        return given

    async def _fill(self, ns: str, prefix: str, records: list[Any], now_ms: int) -> int:
        ids = [keys.id_of(ns, text(key)) for key in records]
        args: list[str | int] = [keys.record_prefix(ns), now_ms, *ids]
        return int(await self._backfill(keys=[prefix, *records], args=args))
