"""Writes of memories, each one atomic script: add (or a mention of the same live content),
update, supersede, delete. Each change appends its history entry (JSON, made by the
caller; `mentioned` completed here) and counts the memory in the tallies (`retally`) in
the same step. `batch` runs several of them as one."""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
import numpy as np
import redis.asyncio as aioredis

from handlers.store import keys
from handlers.store.background import Added
from handlers.store.failures import Guard, WriteWithSetup
from handlers.store.indexes import Indexes
from handlers.store.lua import fragment, lua
from handlers.store.placement import POOLED, tier_key
from handlers.store.reads import record_row
from handlers.store.record import (
    PERMANENT_MS,
    RECORD_FIELDS,
    Entry,
    Record,
    changed_fields,
    mark_field,
    record_of,
    supersede_fields,
)
from handlers.store.record import (
    expiry as record_expiry,
)
from handlers.store.resp import text
from handlers.store.schema import VECTOR_FIELD, new_hash
from handlers.store.tallies import tally_prefix
from handlers.store.tallies.scripts import TALLY

_UNSET = 2  # what ADD_LUA returns for a namespace that Redis lost

# A memory's history list expires when the memory does (PEXPIRETIME -1: never).
FOLLOW = fragment(
    """
local function follow(hist, rec)
  local t = redis.call('PEXPIRETIME', rec)
  if t > 0 then redis.call('PEXPIREAT', hist, t) elseif t == -1 then redis.call('PERSIST', hist) end
end
"""
)


# v4 versions: a hash without the field (written before v4) is at version 1; every write
# that changes a record bumps it.
VERSION = fragment(
    """
local function version_of(rec)
  return tonumber(redis.call('HGET', rec, '$version') or '1')
end
local function bump(rec)
  local v = version_of(rec) + 1
  redis.call('HSET', rec, '$version', v)
  return v
end
"""
)


# What goes with a memory leaving (a delete, an erasure). `immutable_among`: the id of the
# first live memory of the immutable type `kind` among the records ks[1], ks[4], ... (a
# script's KEYS: record, access and history key of each memory, then one more), or nil.
# `drop_lookups`: remove the memory's exact-dedup key and its key index (v4 keyed
# memories) where they still name it, and give its id (nil: no record); `dedups` is the
# namespace's dedup key prefix, beside which the key index lies (`keys.key_prefix`).
GOING = fragment(
    """
local function immutable_among(ks, now, kind)
  for i = 1, #ks - 1, 3 do
    local f = redis.call('HMGET', ks[i], '$id', '$type', '$expires_at')
    if f[1] and f[2] == kind and tonumber(f[3] or '0') > now then return f[1] end
  end
  return nil
end

local function drop_lookups(rec, dedups)
  local f = redis.call('HMGET', rec, '$id', '$content_hash', '$key', '$store')
  if not f[1] then return nil end
  if f[2] and redis.call('GET', dedups .. f[2]) == f[1] then
    redis.call('DEL', dedups .. f[2])
  end
  if f[3] then
    local kkey = string.sub(dedups, 1, -3) .. 'k:'
      .. redis.sha1hex((f[4] or 'private') .. '\\0' .. f[3])
    if redis.call('GET', kkey) == f[1] then redis.call('DEL', kkey) end
  end
  return f[1]
end
"""
)


# Delete live memories (record, access, dedup and key index keys) and return each one's
# fields, atomically, so that two concurrent deletes report (and publish) each memory once.
# The history gets a `deleted` entry and outlives the memory by ARGV[4] ms. Memories of the
# immutable type ARGV[5] (states) are never deleted: if one is among them, nothing is, and
# the result is {'immutable', its id}.
# KEYS: record, access and history key of each memory, then the namespace's tally prefix
# (keys.tally_prefix: each deleted memory is uncounted). ARGV[1] is now (ms), ARGV[2] the
# namespace's dedup key prefix, ARGV[3] the history entry, ARGV[4] how long history stays,
# ARGV[5] the immutable type, ARGV[6..] the fields to return, `expires_at` first. Each result
# is false (missing or expired) or the field values.
DELETE = """
local out = {}
local now = tonumber(ARGV[1])
local fields = {}
for j = 6, #ARGV do fields[#fields + 1] = ARGV[j] end
local state = immutable_among(KEYS, now, ARGV[5])
if state then return {'immutable', state} end
for i = 1, #KEYS - 1, 3 do
  local rec, acc, hist = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  local id = drop_lookups(rec, ARGV[2])
  local vals = redis.call('HMGET', rec, unpack(fields))
  if id and tonumber(vals[1] or '0') > now then
    redis.call('DEL', rec, acc)
    retally(KEYS[#KEYS], id, rec, now)
    redis.call('RPUSH', hist, ARGV[3])
    redis.call('PEXPIRE', hist, ARGV[4])
    out[#out + 1] = vals
  else
    if id then
      redis.call('DEL', rec, acc)
      retally(KEYS[#KEYS], id, rec, now)
    end
    out[#out + 1] = false
  end
end
return out
"""
DELETE_LUA = lua(TALLY, GOING, DELETE)


# Add a memory unless its exact content (same type and scope) is already live: then count a
# mention of that memory (mention_count, updated_at, a `mentioned` history entry) instead and
# return it. Check and write are one atomic step, so two handlers adding the same content at
# the same moment leave one record. KEYS: dedup key ('' when the add opted out of dedup), new
# record key. ARGV: now, expires (ms, or 0 for permanent), record key prefix, history key
# prefix, the history entry, the version expected of the keyed memory ('' for any), n, the n
# fields to return of a repeated or replaced memory, then the new record's field/value pairs.
# Returns false when it wrote the new memory, else the repeated memory's field values; 1
# when the new record's key exists already: a durable write applied again (its id derives
# from its request id), which must change nothing. KEYS[3]: the namespace's tally prefix
# (keys.tally_prefix): the new memory is counted, and up to 10 expired ones uncounted;
# KEYS[4]: its tier (keys.tier_key). Returns 2, writing nothing, when the namespace has no
# tier: Redis lost it, and the caller sets the namespace up again. KEYS[5] (v4): the key
# index of the add's `key` (keys.key_index; '' for none): a current memory holding the key is
# replaced in place ({'replaced', its values}: same id, the new fields, version + 1, an
# `updated` history entry) instead, or, at another version than expected (0: none),
# {'conflict', version, id} is returned and nothing written.
ADD = """
local dkey, rec, kkey = KEYS[1], KEYS[2], KEYS[5]
if string.sub(dkey, -1) == ':' then dkey = '' end
if string.sub(kkey, -1) == ':' then kkey = '' end
if redis.call('EXISTS', rec) == 1 then return 1 end
if redis.call('EXISTS', KEYS[4]) == 0 then return 2 end
local now = tonumber(ARGV[1])
local expected = ARGV[6]
local n = tonumber(ARGV[7])
local fields = {}
for j = 8, 7 + n do fields[#fields + 1] = ARGV[j] end
local pairs = {}
for j = 8 + n, #ARGV do pairs[#pairs + 1] = ARGV[j] end
-- The pool's fields (`pooled`, a read of the tier) only for what writes them: a repeat's
-- mention does not.
if kkey ~= '' then
  local holder = redis.call('GET', kkey)
  local old = holder and (ARGV[3] .. holder)
  local f = {}
  if old then f = redis.call('HMGET', old, '$expires_at', 'superseded', '$content') end
  if f[1] and tonumber(f[1]) > now and f[2] ~= '1' then
    local v = version_of(old)
    if expected ~= '' and tonumber(expected) ~= v then return {'conflict', v, holder} end
    pooled(KEYS[4], pairs)
    -- Replace in place: the new fields, but the memory's id, creation and mentions.
    local kept = {['$id'] = true, ['$created_at'] = true, ['$mention_count'] = true}
    local new, out = {}, {}
    for j = 1, #pairs, 2 do
      new[pairs[j]] = true
      if not kept[pairs[j]] then
        out[#out + 1] = pairs[j]
        out[#out + 1] = pairs[j + 1]
      end
    end
    for _, name in ipairs(redis.call('HKEYS', old)) do
      if not new[name] and not kept[name] then redis.call('HDEL', old, name) end
    end
    redis.call('HSET', old, unpack(out))
    redis.call('HSET', old, '$version', v + 1)
    local acc = string.sub(ARGV[3], 1, -3) .. 'a:' .. holder
    local hist = ARGV[4] .. holder
    for _, k in ipairs({old, acc, hist}) do
      if ARGV[2] ~= '0' then redis.call('PEXPIREAT', k, ARGV[2]) else redis.call('PERSIST', k) end
    end
    local entry = cjson.decode(ARGV[5])
    entry['event'] = 'updated'
    local content = redis.call('HGET', old, '$content')
    if content ~= f[3] then
      entry['changes'] = {content = {old = f[3] or cjson.null, new = content}}
    end
    redis.call('RPUSH', hist, cjson.encode(entry))
    follow(hist, old)
    retally(KEYS[3], holder, old, now)
    return {'replaced', redis.call('HMGET', old, unpack(fields))}
  elseif expected ~= '' and expected ~= '0' then
    return {'conflict', 0, ''}
  end
end
local existing = false
if dkey ~= '' then existing = redis.call('GET', dkey) end
if existing then
  local old = ARGV[3] .. existing
  local f = redis.call('HMGET', old, '$expires_at', 'vu', 'superseded')
  -- Not a memory that no longer holds (v3): the same content again is a current one.
  local held = f[3] ~= '1' and not (f[2] and tonumber(f[2]) <= now)
  if f[1] and tonumber(f[1]) > now and held then
    local count = redis.call('HINCRBY', old, '$mention_count', 1)
    redis.call('HSET', old, '$updated_at', ARGV[1])
    bump(old)
    local entry = cjson.decode(ARGV[5])
    entry['event'] = 'mentioned'
    entry['changes'] = {mention_count = {old = count - 1, new = count}}
    redis.call('RPUSH', ARGV[4] .. existing, cjson.encode(entry))
    follow(ARGV[4] .. existing, old)
    return redis.call('HMGET', old, unpack(fields))
  end
end
pooled(KEYS[4], pairs)
redis.call('HSET', rec, unpack(pairs))
local id = redis.call('HGET', rec, '$id')
if ARGV[2] ~= '0' then redis.call('PEXPIREAT', rec, ARGV[2]) end
retally(KEYS[3], id, rec, now)
settle(KEYS[3], ARGV[3], now, 10)
redis.call('RPUSH', ARGV[4] .. id, ARGV[5])
follow(ARGV[4] .. id, rec)
if dkey ~= '' then
  redis.call('SET', dkey, id)
  if ARGV[2] ~= '0' then redis.call('PEXPIREAT', dkey, ARGV[2]) end
end
-- The key's index never expires (an idle memory's expiry moves with reads): a lookup checks
-- that the memory it names is current.
if kkey ~= '' then redis.call('SET', kkey, id) end
return false
"""
ADD_LUA = lua(
    FOLLOW,
    VERSION,
    POOLED,
    TALLY,
    ADD,
)


# Count one more mention of a live memory (a near-duplicate add) in the given workspace.
# KEYS: record, history. ARGV: now, the history entry, the workspace ('' for none), then the
# fields to return. Returns false when the memory is gone or in another workspace, else its
# field values after the mention.
MENTION_LUA = lua(
    FOLLOW,
    VERSION,
    """
local f = redis.call('HMGET', KEYS[1], '$expires_at', '$id', '$workspace')
if not f[2] or tonumber(f[1]) <= tonumber(ARGV[1]) then return false end
if (f[3] or '') ~= ARGV[3] then return false end
local count = redis.call('HINCRBY', KEYS[1], '$mention_count', 1)
redis.call('HSET', KEYS[1], '$updated_at', ARGV[1])
bump(KEYS[1])
local entry = cjson.decode(ARGV[2])
entry['event'] = 'mentioned'
entry['changes'] = {mention_count = {old = count - 1, new = count}}
redis.call('RPUSH', KEYS[2], cjson.encode(entry))
follow(KEYS[2], KEYS[1])
local fields = {}
for j = 4, #ARGV do fields[#fields + 1] = ARGV[j] end
return redis.call('HMGET', KEYS[1], unpack(fields))
""",
)


# Update a live memory: set fields, move its dedup key, append the history entry, and
# re-apply expiry to every key. KEYS: record, access, old dedup key, new dedup key, history,
# the namespace's tally prefix (the memory is counted as it is after the update).
# ARGV: now, expiry ('keep', 'persist' or ms), the history entry, the version expected ('' for
# any), then field/value pairs. Returns false when the memory is missing or expired,
# {'conflict', version} when it is at another version than expected (nothing written), else
# its new version.
UPDATE = """
local rec, acc, olddk, newdk, hist = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if string.sub(olddk, -1) == ':' then olddk = '' end
if string.sub(newdk, -1) == ':' then newdk = '' end
local now = tonumber(ARGV[1])
local f = redis.call('HMGET', rec, '$id', '$expires_at')
if not f[1] or tonumber(f[2]) <= now then return false end
local v = version_of(rec)
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= v then return {'conflict', v} end
local pairs = {}
for j = 5, #ARGV do pairs[#pairs + 1] = ARGV[j] end
if #pairs > 0 then redis.call('HSET', rec, unpack(pairs)) end
if olddk ~= newdk and newdk ~= '' then
  if olddk ~= '' and redis.call('GET', olddk) == f[1] then redis.call('DEL', olddk) end
  redis.call('SET', newdk, f[1], 'NX')
end
redis.call('RPUSH', hist, ARGV[3])
local keys = {rec, acc, hist}
if newdk ~= '' and redis.call('GET', newdk) == f[1] then keys[#keys + 1] = newdk end
local t
if ARGV[2] == 'keep' then t = redis.call('PEXPIRETIME', rec) else t = ARGV[2] end
for _, k in ipairs(keys) do
  if t == 'persist' or t == -1 then redis.call('PERSIST', k)
  elseif tonumber(t) > 0 then redis.call('PEXPIREAT', k, t) end
end
retally(KEYS[6], f[1], rec, now)
redis.call('HSET', rec, '$version', v + 1)
return v + 1
"""
UPDATE_LUA = lua(
    VERSION,
    TALLY,
    UPDATE,
)


# Mark live memories as superseded by a newer one: set its id (and the index flag), append a
# `superseded` history entry with the old and new `superseded_by`, drop its exact-dedup key
# (the same content added again is a new, current memory), and return each one's fields.
# v3: its validity is closed at the newer memory's start (`valid_until`, and `vu` for the
# index), unless it ended earlier; never before its own start.
# KEYS: record and history key of each memory, then the namespace's tally prefix. ARGV: now,
# the newer id, the history entry, the dedup key prefix, the newer memory's start (ms), n,
# the n field/value pairs to set (2n values), then the fields to return, `expires_at` first.
# Each result is false (missing or expired), {'conflict', version} when it is superseded
# already (nothing written to it), or the values.
SUPERSEDE = """
local out = {}
local now = tonumber(ARGV[1])
local start = tonumber(ARGV[5])
local n = tonumber(ARGV[6])
local pairs, fields = {}, {}
for j = 7, 6 + 2 * n do pairs[#pairs + 1] = ARGV[j] end
for j = 7 + 2 * n, #ARGV do fields[#fields + 1] = ARGV[j] end
for i = 1, #KEYS - 1, 2 do
  local rec, hist = KEYS[i], KEYS[i + 1]
  local f = redis.call('HMGET', rec, '$id', '$expires_at', '$superseded_by', '$content_hash',
    'vf', 'vu', '$valid_until')
  if f[1] and tonumber(f[2]) > now and f[3] and f[3] ~= '' then
    out[#out + 1] = {'conflict', version_of(rec)}
  elseif f[1] and tonumber(f[2]) > now then
    redis.call('HSET', rec, unpack(pairs))
    redis.call('HSET', rec, '$updated_at', ARGV[1], '$superseded_by', ARGV[2])
    bump(rec)
    if f[4] and redis.call('GET', ARGV[4] .. f[4]) == f[1] then
      redis.call('DEL', ARGV[4] .. f[4])
    end
    local entry = cjson.decode(ARGV[3])
    entry['changes'] = {superseded_by = {old = f[3] or cjson.null, new = ARGV[2]}}
    local close = math.max(start, tonumber(f[5] or '0'))
    if not f[6] or tonumber(f[6]) > close then
      redis.call('HSET', rec, 'vu', close, '$valid_until', close)
      entry['changes']['valid_until'] = {old = f[7] and tonumber(f[7]) or cjson.null, new = close}
    end
    redis.call('RPUSH', hist, cjson.encode(entry))
    follow(hist, rec)
    retally(KEYS[#KEYS], f[1], rec, now)
    out[#out + 1] = redis.call('HMGET', rec, unpack(fields))
  else
    out[#out + 1] = false
  end
end
return out
"""
SUPERSEDE_LUA = lua(
    FOLLOW,
    VERSION,
    TALLY,
    SUPERSEDE,
)


def entry_json(entry: Entry) -> bytes:
    return msgspec.json.encode(entry)


def flat(fields: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for name, value in fields.items():
        out += [name, value]
    return out


class Immutable(Exception):
    """A delete named a memory of the immutable type (a state): nothing was deleted."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(memory_id)
        self.memory_id = memory_id


class AddOutcome(NamedTuple):
    """What an add did: wrote `record` new, counted a mention of it (`repeated`), or
    replaced it in place under its key (`replaced`, v4)."""

    record: Record
    repeated: bool = False
    replaced: bool = False


class Stale(Exception):
    """v4: a conditional write found the memory at another version than expected, or a
    supersede found it superseded already: nothing was written to it."""

    def __init__(self, memory_id: str, version: int) -> None:
        super().__init__(memory_id, version)
        self.memory_id = memory_id
        self.version = version


_TAGS = (b"conflict", b"replaced", "conflict", "replaced")


def tagged(out: Any) -> tuple[str, list[Any]]:
    """A script's result led by a tag ({'conflict', ...}, {'replaced', ...}) as the tag and
    the rest; any other result as ('', itself)."""
    if isinstance(out, list) and out and out[0] in _TAGS:
        return text(out[0]), out[1:]
    return "", out


def conflict_of(row: Any) -> int | None:
    """The version in a script's {'conflict', version} result; None for any other result."""
    if isinstance(row, list) and len(row) == 2 and row[0] in (b"conflict", "conflict"):
        return int(row[1])
    return None


class AlreadyApplied(Exception):
    """The memory an add would create exists already: the same durable write, again."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(memory_id)
        self.memory_id = memory_id


def add_call(
    ns: str,
    rec: Record,
    vector: np.ndarray,
    now_ms: int,
    entry: Entry,
    expected: int | None = None,
) -> tuple[list[str], list[Any]]:
    """ADD_LUA's keys and arguments (`expected`: the version a keyed add replaces)."""
    fields, expires = new_hash(rec, vector)
    args: list[Any] = [now_ms, expires, keys.record_prefix(ns), keys.history_prefix(ns)]
    args += [entry_json(entry), "" if expected is None else expected]
    args += [len(RECORD_FIELDS), *RECORD_FIELDS, *flat(fields)]
    dedup = keys.dedup_key(ns, rec.content_hash)
    record = keys.record_key(ns, rec.id)
    key = keys.key_index(ns, rec.store, rec.key)
    return [dedup, record, tally_prefix(ns), tier_key(ns), key], args


def update_call(
    ns: str,
    old: Record,
    new: Record,
    vector: np.ndarray | None,
    now_ms: int,
    entry: Entry,
    marks: dict[str, str] | None = None,
    expected: int | None = None,
) -> tuple[list[str], list[Any]]:
    """UPDATE_LUA's keys and arguments (`expected`: the version it must be at)."""
    fields = changed_fields(old, new)
    fields.pop("version", None)  # the script bumps what it finds (VERSION)
    fields.update({mark_field(name): mark for name, mark in (marks or {}).items()})
    if vector is not None:
        fields[VECTOR_FIELD] = vector.astype(np.float32).tobytes()
    if new.idle_ttl_s is not None:
        expiry = str(record_expiry(new, now_ms))  # an update is an access
    elif new.expires_at == old.expires_at:
        expiry = "keep"
    else:
        expiry = "persist" if new.expires_at == PERMANENT_MS else str(new.expires_at)
    memory_keys = [
        keys.record_key(ns, old.id),
        keys.access_key(ns, old.id),
        keys.dedup_key(ns, old.content_hash),
        keys.dedup_key(ns, new.content_hash),
        keys.history_key(ns, old.id),
        tally_prefix(ns),
    ]
    at = "" if expected is None else expected
    return memory_keys, [now_ms, expiry, entry_json(entry), at, *flat(fields)]


def supersede_call(
    ns: str, ids: list[str], by: str, start_ms: int, now_ms: int, entry: Entry
) -> tuple[list[str], list[Any]]:
    """SUPERSEDE_LUA's keys and arguments."""
    memory_keys: list[str] = []
    for mid in ids:
        memory_keys += [keys.record_key(ns, mid), keys.history_key(ns, mid)]
    memory_keys.append(tally_prefix(ns))
    pairs = flat(supersede_fields(by))
    args: list[Any] = [now_ms, by, entry_json(entry), keys.dedup_prefix(ns), start_ms]
    args += [len(pairs) // 2, *pairs, *RECORD_FIELDS]
    return memory_keys, args


def delete_call(
    ns: str, ids: list[str], now_ms: int, entry: Entry, history_ms: int, immutable_type: str
) -> tuple[list[str], list[Any]]:
    """DELETE_LUA's keys and arguments."""
    args: list[Any] = [now_ms, keys.dedup_prefix(ns), entry_json(entry), history_ms]
    args += [immutable_type, *RECORD_FIELDS]
    return [*keys.memory_keys(ns, ids, history=True), tally_prefix(ns)], args


class Writes:
    def __init__(
        self,
        client: aioredis.Redis,
        guard: Guard,
        indexes: Indexes,
        setup: WriteWithSetup,
        added: Added,
    ) -> None:
        self.client = client
        self._guard = guard
        self._indexes = indexes
        self._setup = setup
        self._added = added
        self._delete = client.register_script(DELETE_LUA)
        self._add = client.register_script(ADD_LUA)
        self._mention = client.register_script(MENTION_LUA)
        self._update = client.register_script(UPDATE_LUA)
        self._supersede = client.register_script(SUPERSEDE_LUA)

    async def add(
        self,
        ns: str,
        rec: Record,
        vector: np.ndarray,
        now_ms: int,
        entry: Entry,
        expected: int | None = None,
    ) -> AddOutcome:
        """Write a new memory, or, when its content hash is live already, count a mention of
        that memory instead (one atomic script). `entry` goes to the history of whichever
        it was (as `mentioned` for a repeat). v4: a memory with a `key` replaces the
        current memory of its store holding that key instead, in place (`expected`: only at
        that version; 0: only when none holds it, else `Stale`)."""
        add_keys, args = add_call(ns, rec, vector, now_ms, entry, expected)
        await self._indexes.get(ns)
        out = await self._setup(ns, lambda: self._add(keys=add_keys, args=args), _UNSET)
        if out == 1:
            raise AlreadyApplied(rec.id)
        tag, rest = tagged(out)
        if tag == "conflict":
            raise Stale(text(rest[1]), int(rest[0]))
        if tag == "replaced":
            replaced = record_of(RECORD_FIELDS, rest[0])
            self._added(ns, [replaced], new=False)  # its new words
            return AddOutcome(replaced, replaced=True)
        if out:
            return AddOutcome(record_of(RECORD_FIELDS, out), repeated=True)
        self._added(ns, [rec])
        return AddOutcome(rec)

    async def mention(
        self, ns: str, memory_id: str, now_ms: int, entry: Entry, workspace: str | None
    ) -> Record | None:
        """Count one more mention of a live memory in `workspace` (None: in none); the memory
        after it, or None if it is gone or in another workspace."""
        memory_keys = [keys.record_key(ns, memory_id), keys.history_key(ns, memory_id)]
        args: list[Any] = [now_ms, entry_json(entry), workspace or "", *RECORD_FIELDS]
        async with self._guard():
            out = await self._mention(keys=memory_keys, args=args)
        return record_row(out)

    async def update(
        self,
        ns: str,
        old: Record,
        new: Record,
        vector: np.ndarray | None,
        now_ms: int,
        entry: Entry,
        marks: dict[str, str] | None = None,
        expected: int | None = None,
    ) -> int | None:
        """Turn a live memory `old` into `new` (its dedup key and expiry follow, on every key
        of the memory), and set the write `marks` (`write_marks`): its new version, or None
        when it is gone. `Stale` when it is not at version `expected` (None: any)."""
        memory_keys, args = update_call(ns, old, new, vector, now_ms, entry, marks, expected)
        async with self._guard():
            out = await self._update(keys=memory_keys, args=args)
        if (at := conflict_of(out)) is not None:
            raise Stale(old.id, at)
        if out and (new.content != old.content or new.tags != old.tags):
            self._added(ns, [new], new=False)  # its new words (counts are of writes)
        return int(out) if out else None

    async def write_marks(self, ns: str, memory_id: str, names: tuple[str, ...]) -> list[str]:
        """For each request field in `names`, the stream position of the durable write that
        last set it on the memory, as `update` stored it ("" where none has)."""
        async with self._guard():
            key = keys.record_key(ns, memory_id)
            raw = await self.client.hmget(key, [mark_field(name) for name in names])
        return [text(v) if v is not None else "" for v in raw]

    async def delete(
        self,
        ns: str,
        ids: list[str],
        now_ms: int,
        entry: Entry,
        history_ms: int,
        immutable_type: str,
    ) -> list[Record | None]:
        """Delete live memories; each one's record as it was, or None where missing. Their
        history gets `entry` and stays readable for `history_ms`. If one of them is of
        `immutable_type`, nothing is deleted and `Immutable` names it."""
        if not ids:
            return []
        delete_keys, args = delete_call(ns, ids, now_ms, entry, history_ms, immutable_type)
        async with self._guard():
            rows = await self._delete(keys=delete_keys, args=args)
        if rows and not isinstance(rows[0], list | None):
            raise Immutable(text(rows[1]))
        return [record_row(row) for row in rows]

    async def supersede(
        self, ns: str, ids: list[str], by: str, start_ms: int, now_ms: int, entry: Entry
    ) -> list[Record | int | None]:
        """Mark live memories as superseded by memory `by`, which holds from `start_ms`
        (their validity is closed there); each one's record after it, None where missing,
        or its version where it was superseded already (left as it was). Their history gets
        `entry` with the change."""
        if not ids:
            return []
        memory_keys, args = supersede_call(ns, ids, by, start_ms, now_ms, entry)
        async with self._guard():
            rows = await self._supersede(keys=memory_keys, args=args)
        return [at if (at := conflict_of(row)) is not None else record_row(row) for row in rows]
