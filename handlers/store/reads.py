"""Reads of memories by id: records, access counts (kept in a hash beside the record, not
indexed, so a read never re-indexes the vector), stored vectors, history. A read can count
an access and push the expiry of a memory forgotten when idle, in the same script."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import redis.asyncio as aioredis

from handlers.store import keys
from handlers.store.background import Background
from handlers.store.failures import Guard
from handlers.store.lua import fragment, lua
from handlers.store.record import (
    RECORD_FIELDS,
    Entry,
    Fetched,
    Record,
    Summary,
    key_expiry,
    record_of,
)
from handlers.store.resp import text
from handlers.store.schema import VECTOR_FIELD
from handlers.store.tallies import tally_prefix
from handlers.store.tallies.scripts import TALLY
from handlers.store.trip import Queued, evalsha

# v3 idleness: push the expiry of a memory with `idle_ttl_s` to that long after now (never
# past `ttl_until`) on every key it has, and in the tallies' expiry set; its indexed
# `expires_at` only when the expiry would pass it (record.idle_expiry). `p`: the tally
# prefix; `hists`, `dedups`: the history and dedup key prefixes.
KEEP = fragment(
    """
local function keep_alive(rec, acc, now, hists, dedups, p)
  local f = redis.call('HMGET', rec, '$id', '$idle_ttl_s', '$ttl_until', '$expires_at',
    '$content_hash')
  if not f[1] or not f[2] then return end
  local idle = tonumber(f[2])
  local cap = tonumber(f[3] or '$permanent')
  local t = math.min(now + idle * 1000, cap)
  if redis.call('PEXPIRETIME', rec) >= t then return end
  redis.call('PEXPIREAT', rec, t)
  redis.call('PEXPIREAT', acc, t)
  redis.call('PEXPIREAT', hists .. f[1], t)
  if f[5] and redis.call('GET', dedups .. f[5]) == f[1] then
    redis.call('PEXPIREAT', dedups .. f[5], t)
  end
  redis.call('ZADD', p .. 'x', 'XX', t, f[1])
  if tonumber(f[4]) < t then
    redis.call('HSET', rec, '$expires_at', math.min(t + idle * 100, cap))
    retally(p, f[1], rec, now)
  end
end
"""
)


# Read a live memory and (when the flag `a[2]` is '1') count this access; with '1' or '2'
# (an access not counted: `list`), push an idle memory's expiry (keep_alive). `a` holds
# `fetch_args`: now (ms), the flag, the history, dedup and tally prefixes; `fields` the
# record fields to return, `expires_at` first (`n` of them), then `$idle_ttl_s` when the
# flag counts or pushes (`fetch_fields`). The result is false (missing or expired) or the
# field values followed by the access counters as they were before this access, and the
# record's PEXPIRETIME after it (what a reply shows). The access hash inherits the record's
# expiry; checking the record first keeps a bump from resurrecting a deleted memory as a
# stray key.
FETCH = fragment(
    """
local function fetch_fields(a, from)
  local fields = {}
  for j = from, #a do fields[#fields + 1] = a[j] end
  local n = #fields
  -- An access reads whether the memory is forgotten when idle with its fields: keep_alive's
  -- own read is then for such memories only.
  if a[2] ~= '0' then fields[n + 1] = '$idle_ttl_s' end
  return fields, n
end

local function fetch_one(rec, acc, a, fields, n)
  local now = tonumber(a[1])
  local vals = redis.call('HMGET', rec, unpack(fields))
  if not (vals[1] and tonumber(vals[1]) > now) then return false end
  local old = redis.call('HMGET', acc, 'access_count', 'last_accessed_at')
  if a[2] ~= '0' and vals[n + 1] then keep_alive(rec, acc, now, a[3], a[4], a[5]) end
  if a[2] == '1' then
    redis.call('HSET', acc, 'access_count', (tonumber(old[1]) or 0) + 1,
      'last_accessed_at', a[1])
    local t = redis.call('PEXPIRETIME', rec)
    if t > 0 then redis.call('PEXPIREAT', acc, t) end
  end
  vals[n + 1] = old[1]
  vals[n + 2] = old[2]
  vals[n + 3] = redis.call('PEXPIRETIME', rec)
  return vals
end
"""
)

# `fetch_one` of each memory: KEYS are record and access key pairs, ARGV `fetch_args` then
# the record fields to return.
FETCH_LUA = lua(
    TALLY,
    KEEP,
    FETCH,
    """
local fields, n = fetch_fields(ARGV, 6)
local out = {}
for i = 1, #KEYS, 2 do out[#out + 1] = fetch_one(KEYS[i], KEYS[i + 1], ARGV, fields, n) end
return out
""",
)

# One hash field of many keys in one command (a pipeline of HGETs costs the client more
# than Redis): the embeddings of candidates. ARGV[1] is the field; false where missing.
FIELD_LUA = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGET', KEYS[i], ARGV[1]) end
return out
"""


_entries = msgspec.json.Decoder(Entry)


def record_row(row: Any) -> Record | None:
    """A record as the scripts return it (RECORD_FIELDS' values), or None."""
    return record_of(RECORD_FIELDS, row) if row else None


def fetch_args(ns: str, now_ms: int, flag: str) -> list[Any]:
    """FETCH_LUA's first arguments."""
    return [now_ms, flag, keys.history_prefix(ns), keys.dedup_prefix(ns), tally_prefix(ns)]


def fetched_of(rows: list[Any]) -> list[Fetched | None]:
    """`fetch_one`'s results as `Fetched` (None where missing or expired)."""
    found: list[Fetched | None] = []
    for row in rows:
        if not row:
            found.append(None)
            continue
        *values, count, last, expires = row
        found.append(
            Fetched(
                record_of(RECORD_FIELDS, values),
                access_count=int(count) if count else 0,
                last_accessed_ms=int(last) if last else None,
                expires_ms=key_expiry(int(expires)),
            )
        )
    return found


def vectors_of(ids: list[str], blobs: list[Any]) -> dict[str, np.ndarray]:
    return {
        mid: np.frombuffer(blob, dtype=np.float32)
        for mid, blob in zip(ids, blobs, strict=True)
        if blob
    }


class Reads:
    def __init__(
        self,
        client: aioredis.Redis,
        guard: Guard,
        background: Background,
    ) -> None:
        self.client = client
        self._guard = guard
        self._background = background
        self._fetch = client.register_script(FETCH_LUA)
        self._field = client.register_script(FIELD_LUA)

    async def history(self, ns: str, memory_id: str, limit: int) -> tuple[list[Entry], int]:
        """The first `limit` entries of a memory's history, oldest first, and how many it
        has (0: no history, or it expired)."""
        key = keys.history_key(ns, memory_id)
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            pipe.lrange(key, 0, limit - 1)
            pipe.llen(key)
            raw, total = await pipe.execute()
        return [_entries.decode(item) for item in raw], int(total)

    async def read(self, ns: str, memory_id: str, now_ms: int) -> Record | None:
        """A live memory, without counting an access."""
        async with self._guard():
            values = await self.client.hmget(keys.record_key(ns, memory_id), RECORD_FIELDS)
        if values[RECORD_FIELDS.index("id")] is None:
            return None
        rec = record_of(RECORD_FIELDS, values)
        return rec if rec.expires_at > now_ms else None

    async def fetch(
        self, ns: str, ids: list[str], now_ms: int, count_access: bool = True
    ) -> list[Fetched | None]:
        """Live memories by id, in order (None where missing or expired), counting an access
        unless told not to (then `touch` counts it for those that are returned)."""
        if not ids:
            return []
        flag = "1" if count_access else "0"
        async with self._guard():
            rows = await self._fetch(
                keys=keys.memory_keys(ns, ids),
                args=[*fetch_args(ns, now_ms, flag), *RECORD_FIELDS],
            )
        return fetched_of(rows)

    def fetch_queued(self, ns: str, ids: list[str], now_ms: int) -> Queued[list[Fetched | None]]:
        """`fetch` without counting an access, to send with other work (`trip`)."""
        if not ids:
            return Queued([], lambda _: [])
        args = [*fetch_args(ns, now_ms, "0"), *RECORD_FIELDS]
        command = evalsha(self._fetch.sha, keys.memory_keys(ns, ids), args)
        return Queued([command], lambda out: fetched_of(out[0]), (FETCH_LUA,))

    def vectors_queued(self, ns: str, ids: list[str]) -> Queued[dict[str, np.ndarray]]:
        """`vectors`, to send with other work (`trip`)."""
        if not ids:
            return Queued([], lambda _: {})
        record_keys = [keys.record_key(ns, mid) for mid in ids]
        command = evalsha(self._field.sha, record_keys, [VECTOR_FIELD])
        return Queued([command], lambda out: vectors_of(ids, out[0]), (FIELD_LUA,))

    def touch_later(self, ns: str, ids: list[str], now_ms: int) -> None:
        """Count an access to each live memory, after the reply: access counters are
        bookkeeping that no reply waits for (a failure is logged, not raised)."""
        if ids:
            self._background.run(self.touch(ns, ids, now_ms), "store.touch_failed")

    async def touch(
        self, ns: str, ids: list[str], now_ms: int, count: bool = True
    ) -> list[int | None]:
        """Count an access to each live memory (without `count`, only push the expiry of
        those forgotten when idle, as a `list` does); each one's expiry after it (None where
        gone)."""
        if not ids:
            return []
        args = [*fetch_args(ns, now_ms, "1" if count else "2"), RECORD_FIELDS[0]]
        async with self._guard():
            rows = await self._fetch(keys=keys.memory_keys(ns, ids), args=args)
        return [key_expiry(int(row[-1])) if row else None for row in rows]

    async def expiries(self, ns: str, ids: list[str]) -> list[int | None]:
        """When each memory's keys expire (PERMANENT_MS: never; None where gone), without
        touching them."""
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            for mid in ids:
                pipe.pexpiretime(keys.record_key(ns, mid))
            raw = await pipe.execute()
        return [None if int(t) == -2 else key_expiry(int(t)) for t in raw]

    def keep_alive_later(self, ns: str, records: Sequence[Summary], now_ms: int) -> None:
        """After a read that returned memories without counting an access (`list`,
        `timeline`): push the expiry of those forgotten when idle."""
        idle = [r.id for r in records if r.idle_ttl_s is not None]
        if idle:
            self._background.run(
                self.touch(ns, idle, now_ms, count=False), "store.keep_alive_failed"
            )

    async def key_holders(self, ns: str, named: list[tuple[str, str]]) -> list[str | None]:
        """The id each (store, key) names (v4 keyed memories; None where none does). The
        memory named may have ended since: the caller checks that it is current."""
        if not named:
            return []
        async with self._guard():
            raw = await self.client.mget([keys.key_index(ns, st, key) for st, key in named])
        return [text(v) if v is not None else None for v in raw]

    async def access_counts(self, ns: str, ids: list[str]) -> list[int]:
        """How often each memory was read (0 where never, or gone)."""
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            for mid in ids:
                pipe.hget(keys.access_key(ns, mid), "access_count")
            raw = await pipe.execute()
        return [int(v) if v is not None else 0 for v in raw]

    async def types(self, ns: str, ids: list[str]) -> list[str | None]:
        """The type of each memory (None where there is no such memory)."""
        return [type_ for type_, _ in await self._type_and_store(ns, ids)]

    async def stores(self, ns: str, ids: list[str]) -> list[str | None]:
        """The store of each memory (None where there is no such memory; `private` for one
        whose hash has no store field)."""
        return [store for _, store in await self._type_and_store(ns, ids)]

    async def _type_and_store(self, ns: str, ids: list[str]) -> list[tuple[str | None, ...]]:
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            for mid in ids:
                pipe.hmget(keys.record_key(ns, mid), ["type", "store"])
            raw = await pipe.execute()
        return [
            (None, None) if t is None else (text(t), text(st) if st else "private") for t, st in raw
        ]

    async def vectors(self, ns: str, ids: list[str]) -> dict[str, np.ndarray]:
        """Stored embeddings by id (for candidates that the vector query did not return)."""
        if not ids:
            return {}
        async with self._guard():
            raw = await self._field(
                keys=[keys.record_key(ns, mid) for mid in ids], args=[VECTOR_FIELD]
            )
        return vectors_of(ids, raw)
