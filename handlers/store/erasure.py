"""Erasure (PROTOCOL v4, "Erasure"): a memory's text taken out of every key the store keeps.

`erase` is `Writes.delete` with the history scrubbed, in one atomic script: the record, its
access and dedup keys are deleted, every earlier history entry keeps its event, time, agent
and session but loses the changes that carry text (only `SAFE_CHANGES` stay: numbers, dates
and ids), and an `erased` entry is appended; the history then outlives the memory as a
delete's does. An id whose memory is gone but whose history outlived an earlier delete has
that history scrubbed the same way. The script returns each history as it was, so that the
caller knows the texts it held (past contents, to drop from the embedding cache).

The other keys an erasure touches: recall sessions (the ids, by a SCAN of the namespace's
sessions), and the embedding cache's entries of the memory's texts (by key; the cache holds
only vectors, keyed by a hash of the text). Word counts hold hashes of words only
(`text.word_field`) and stay: they are estimates of writes, deleted memories included.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
import redis.asyncio as aioredis

from handlers.store import keys
from handlers.store.cluster import batches, scan_iter
from handlers.store.failures import Guard
from handlers.store.lua import lua
from handlers.store.reads import record_row
from handlers.store.record import RECORD_FIELDS, Entry, Record
from handlers.store.resp import text
from handlers.store.sessions import session_key
from handlers.store.tallies import tally_prefix
from handlers.store.tallies.scripts import TALLY
from handlers.store.writes import GOING, Immutable, entry_json

# The changes an erased memory's history keeps: none of them holds its text.
SAFE_CHANGES = (
    "importance",
    "expires_at",
    "valid_from",
    "valid_until",
    "mention_count",
    "superseded_by",
)

# Erase memories: as DELETE (their dedup key and key index go too), and their history
# scrubbed of texts (only `safe` changes kept) with an `erased` entry.
# KEYS: record, access and history key of each memory, then the namespace's tally prefix.
# ARGV[1] now (ms), ARGV[2] the dedup key prefix, ARGV[3] the `erased` entry, ARGV[4] how
# long the history stays, ARGV[5] the immutable type (as DELETE: a state among them erases
# nothing, {'immutable', its id}), ARGV[6] the safe changes (space-separated), ARGV[7..] the
# fields to return, `expires_at` first. Each result is {fields or false, the history as it
# was}: false where the memory was missing or expired.
ERASE = """
local now = tonumber(ARGV[1])
local safe = {}
for name in string.gmatch(ARGV[6], '%S+') do safe[name] = true end
local fields = {}
for j = 7, #ARGV do fields[#fields + 1] = ARGV[j] end
local state = immutable_among(KEYS, now, ARGV[5])
if state then return {'immutable', state} end
local function scrubbed(raw)
  local ok, e = pcall(cjson.decode, raw)
  if not ok or type(e) ~= 'table' then return nil end
  local kept = {}
  if type(e['changes']) == 'table' then
    for name, change in pairs(e['changes']) do
      if safe[name] then kept[name] = change end
    end
  end
  return cjson.encode({event = e['event'], at = e['at'], agent_id = e['agent_id'],
    session_id = e['session_id'], reason = e['reason'], changes = kept})
end
local out = {}
for i = 1, #KEYS - 1, 3 do
  local rec, acc, hist = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  local id = drop_lookups(rec, ARGV[2])
  local vals = redis.call('HMGET', rec, unpack(fields))
  local live = id and tonumber(vals[1] or '0') > now
  if id then
    redis.call('DEL', rec, acc)
    retally(KEYS[#KEYS], id, rec, now)
  end
  local old = redis.call('LRANGE', hist, 0, -1)
  if live or #old > 0 then
    redis.call('DEL', hist)
    for _, raw in ipairs(old) do
      local entry = scrubbed(raw)
      if entry then redis.call('RPUSH', hist, entry) end
    end
    redis.call('RPUSH', hist, ARGV[3])
    redis.call('PEXPIRE', hist, ARGV[4])
  end
  out[#out + 1] = {live and vals or false, old}
end
return out
"""
ERASE_LUA = lua(TALLY, GOING, ERASE)

_entry = msgspec.json.Decoder(Entry)


class Erased(NamedTuple):
    """One id's erasure: its live memory as it was (None when missing or expired), and its
    history as it was before the scrub (empty when it had none)."""

    record: Record | None
    history: list[Entry]

    @property
    def erased(self) -> bool:
        """Whether the id had anything to erase (a live memory, or a history left)."""
        return self.record is not None or bool(self.history)


def _entries(raw: list[Any]) -> list[Entry]:
    out = []
    for item in raw:
        try:
            out.append(_entry.decode(item))
        except msgspec.DecodeError:
            continue  # not ours to read; the script dropped it too
    return out


class Erasure:
    """Every Redis write of an erasure."""

    def __init__(self, client: aioredis.Redis, guard: Guard) -> None:
        self.client = client
        self._guard = guard
        self._erase = client.register_script(ERASE_LUA)

    async def erase(
        self,
        ns: str,
        ids: list[str],
        now_ms: int,
        entry: Entry,
        history_ms: int,
        immutable_type: str,
    ) -> list[Erased]:
        """Delete the live memories among `ids` and scrub every id's history, appending
        `entry` (kept `history_ms`). A live memory of `immutable_type` among them erases
        nothing and raises `Immutable`."""
        if not ids:
            return []
        erase_keys = [*keys.memory_keys(ns, ids, history=True), tally_prefix(ns)]
        args: list[Any] = [now_ms, keys.dedup_prefix(ns), entry_json(entry), history_ms]
        args += [immutable_type, " ".join(SAFE_CHANGES), *RECORD_FIELDS]
        async with self._guard():
            rows = await self._erase(keys=erase_keys, args=args)
        if rows and not isinstance(rows[0], list):
            raise Immutable(text(rows[1]))
        return [Erased(record_row(row[0]), _entries(row[1])) for row in rows]

    async def forget_in_sessions(self, ns: str, ids: list[str]) -> int:
        """Take the ids out of every recall session of the namespace (one SCAN of its
        sessions); how many entries went."""
        if not ids:
            return 0
        removed = 0
        async with self._guard():
            found = scan_iter(self.client, ns, session_key(ns, "*"))
            async for batch in batches(found):
                pipe = self.client.pipeline(transaction=False)
                for key in batch:
                    pipe.hdel(key, *ids)
                removed += sum(await pipe.execute())
        return removed

    async def drop(self, cache_keys: list[str]) -> int:
        """Delete keys of no namespace (the embedding cache's), one by one (on a cluster
        they lie in any slot); how many there were."""
        if not cache_keys:
            return 0
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            for key in dict.fromkeys(cache_keys):
                pipe.delete(key)
            return int(sum(await pipe.execute()))
