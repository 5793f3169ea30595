"""Export and import of a whole namespace (PROTOCOL v2 "Export and import", this project's
extension): a SCAN over the namespace's record keys, and a script that writes an exported
memory back exactly, once."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import numpy as np
import redis.asyncio as aioredis

from handlers.store import cluster, keys
from handlers.store.background import Added
from handlers.store.failures import Guard, WriteWithSetup
from handlers.store.lua import lua
from handlers.store.placement import POOLED, tier_key
from handlers.store.record import Entry, Record
from handlers.store.resp import text
from handlers.store.schema import new_hash
from handlers.store.tallies import tally_prefix
from handlers.store.tallies.scripts import TALLY
from handlers.store.writes import FOLLOW

# Write an exported memory back as it was (`import`), unless its id exists: then nothing
# changes, so an import run twice is the same as once. KEYS: record, access, history, dedup
# key (ending in ':' for none), the namespace's tally prefix, its tier. ARGV: expiry (ms,
# '0' permanent), access count, last access (ms or ''), the history entry (written only into
# an empty history), then the record's field/value pairs. The dedup key is set only where no other
# memory holds it. Returns 1 when written, 0 when the id exists, 2 (nothing written) when the
# namespace has no tier (see ADD_LUA). KEYS[7] (v4): the index of the memory's key (ending
# in ':' for none): taken when no current memory holds it, else the memory is written
# without its key.
IMPORT_LUA = lua(
    FOLLOW,
    POOLED,
    TALLY,
    """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[6]) == 0 then return 2 end
local pairs = {}
for j = 5, #ARGV do pairs[#pairs + 1] = ARGV[j] end
pooled(KEYS[6], pairs)
redis.call('HSET', KEYS[1], unpack(pairs))
if ARGV[1] ~= '0' then redis.call('PEXPIREAT', KEYS[1], ARGV[1]) end
retally(KEYS[5], redis.call('HGET', KEYS[1], '$id'), KEYS[1], 0)
if tonumber(ARGV[2]) > 0 or ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], 'access_count', ARGV[2])
  if ARGV[3] ~= '' then redis.call('HSET', KEYS[2], 'last_accessed_at', ARGV[3]) end
  if ARGV[1] ~= '0' then redis.call('PEXPIREAT', KEYS[2], ARGV[1]) end
end
if redis.call('EXISTS', KEYS[3]) == 0 then redis.call('RPUSH', KEYS[3], ARGV[4]) end
follow(KEYS[3], KEYS[1])
if string.sub(KEYS[4], -1) ~= ':' and redis.call('EXISTS', KEYS[4]) == 0 then
  redis.call('SET', KEYS[4], redis.call('HGET', KEYS[1], '$id'))
  if ARGV[1] ~= '0' then redis.call('PEXPIREAT', KEYS[4], ARGV[1]) end
end
if string.sub(KEYS[7], -1) ~= ':' then
  local holder = redis.call('GET', KEYS[7])
  local f = {}
  if holder then
    f = redis.call('HMGET', string.sub(KEYS[1], 1, -1 - #redis.call('HGET', KEYS[1], '$id'))
      .. holder, '$expires_at', 'superseded')
  end
  local t = redis.call('TIME')
  if f[1] and tonumber(f[1]) > t[1] * 1000 + math.floor(t[2] / 1000) and f[2] ~= '1' then
    redis.call('HDEL', KEYS[1], '$key')
  else
    redis.call('SET', KEYS[7], redis.call('HGET', KEYS[1], '$id'))
  end
end
return 1
""",
)

# One SCAN call looks at this many keys (of every namespace: SCAN's MATCH filters after).
SCAN_COUNT = 1000
# An export page stops scanning after this long, with what it found: a namespace among
# millions of other keys costs a few pages instead of one long call.
SCAN_BUDGET_S = 0.2
_UNSET = 2


class Transfer:
    def __init__(
        self, client: aioredis.Redis, guard: Guard, write_with_setup: WriteWithSetup, added: Added
    ) -> None:
        self._client = client
        self._guard = guard
        self._write_set_up = write_with_setup
        self._added = added
        self._import = client.register_script(IMPORT_LUA)

    async def scan(self, ns: str, cursor: int, limit: int) -> tuple[list[str], int]:
        """Up to about `limit` memory ids from `cursor` on, and the cursor after them (0:
        done). SCAN may return a key twice across calls, never miss one that lives
        throughout."""
        pattern = keys.record_prefix(ns) + "*"
        found: list[str] = []
        started = time.monotonic()
        async with self._guard():
            while True:
                cursor, batch = await cluster.scan(self._client, ns, cursor, pattern, SCAN_COUNT)
                found += [keys.id_of(ns, text(k)) for k in batch]
                if cursor == 0 or len(found) >= limit:
                    break
                if time.monotonic() - started > SCAN_BUDGET_S:
                    break
        return found, int(cursor)

    async def existing(self, ns: str, ids: list[str]) -> set[str]:
        """Which of these memories exist (live or not yet reaped)."""
        async with self._guard():
            pipe = self._client.pipeline(transaction=False)
            for mid in ids:
                pipe.exists(keys.record_key(ns, mid))
            found = await pipe.execute()
        return {mid for mid, n in zip(ids, found, strict=True) if n}

    async def write(
        self,
        ns: str,
        rec: Record,
        vector: np.ndarray,
        access_count: int,
        last_accessed_ms: int | None,
        accessed_ms: int,
        entry: Entry,
    ) -> bool:
        """Write `rec` as it is (its id, times and expiry); False when its id exists. An idle
        memory expires that long after `accessed_ms`, its last access or write."""
        fields, expires = new_hash(rec, vector, accessed_ms)
        script_keys = [
            keys.record_key(ns, rec.id),
            keys.access_key(ns, rec.id),
            keys.history_key(ns, rec.id),
            keys.dedup_key(ns, rec.content_hash),
            tally_prefix(ns),
            tier_key(ns),
            keys.key_index(ns, rec.store, rec.key),
        ]
        args: list[Any] = [
            expires,
            access_count,
            last_accessed_ms or "",
            msgspec.json.encode(entry),
        ]
        for name, value in fields.items():
            args += [name, value]
        out = await self._write_set_up(
            ns, lambda: self._import(keys=script_keys, args=args), _UNSET
        )
        if out:
            # Words counted; a pooled namespace that an import outgrows is promoted.
            self._added(ns, [rec])
        return bool(out)
