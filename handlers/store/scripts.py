"""Lua scripts that make multi-key reads and writes of a memory atomic in Redis.

The scripts name record fields as `$field` (the protocol's name), replaced by the field's
storage name from `record.Record`, so a renamed field changes in one place. Where a script
returns a record, the caller says which fields, `expires_at` first. Each change also appends
its entry (JSON, made by the caller; `mentioned` completed here) to the memory's history list,
in the same atomic step.
"""

from __future__ import annotations

from string import Template

import msgspec

from handlers.store.record import OPEN_UNTIL_MS, PERMANENT_MS, Record

_NAMES = {f.name: f.encode_name for f in msgspec.structs.fields(Record)}
# The most expired memories one read settles (see `settled` in _TALLY): about 20 ms of Redis.
SETTLE_MAX = 1000
# The most ended validities one read flags: each flag re-indexes its memory (its vector
# too), about 1 ms of Redis at 100k memories.
ENDS_MAX = 100
# The most memories a `list` with `as_of` walks in the tallies before it reads the index.
AS_OF_SCAN_MAX = 2000


# A memory's history list expires when the memory does (PEXPIRETIME -1: never).
_FOLLOW = """
local function follow(hist, rec)
  local t = redis.call('PEXPIRETIME', rec)
  if t > 0 then redis.call('PEXPIREAT', hist, t) elseif t == -1 then redis.call('PERSIST', hist) end
end
"""


# Where a new memory is indexed (keys.tier_key): a pooled namespace's memories carry its pool
# number in the `pool` field, read here so that a write follows a promotion at once. Nil when
# the namespace is not set up (Redis lost it): the write is refused, see `Store.add`.
_POOLED = """
local function pooled(tierkey, pairs)
  local tier = redis.call('GET', tierkey)
  if tier and tonumber(tier) then
    pairs[#pairs + 1] = 'pool'
    pairs[#pairs + 1] = tier
  end
  return tier
end
"""


# What `describe` counts of each memory, kept by every write (docs/protocol.md, "describe"):
# the namespace's tallies, under the prefix p (keys.tally_prefix). p..'d' holds, per memory
# id, the description it is counted under (JSON: type, store, workspace tag, workflow,
# general flag, tags, created, expires, superseded flag, validity from and until, idle flag);
# p..'h:'..side a hash of counts per side (g: general; w:<workflow>; s:<workspace tag>, every
# memory of a workspace), keyed by JSON ['n', store, wsh, type, superseded, general],
# ['t', store, wsh, tag] and ['i', store, wsh] (those with `idle_ttl_s`); p..'o:'..sha1
# of (side, store, wsh, superseded) those memories by created_at (oldest, newest, and `list`'s
# pages); p..'x' the
# expiring ones by expires_at, settled once their time has passed (`settle`); p..'n' the
# namespace's live count. `retally` makes them agree with a memory's record as it is now, so
# calling it again changes nothing, and a write that calls it after its change is counted
# exactly once, whatever ran before.
_TALLY = """
local function tally_desc(rec, now)
  local f = redis.call('HMGET', rec, '$type', '$store', 'wsh', '$workflow_id', 'general',
    '$tags', '$created_at', '$expires_at', 'superseded', 'vf', 'vu', '$idle_ttl_s')
  if not f[1] or not f[8] or tonumber(f[8]) <= now then return false end
  local idle = (tonumber(f[12] or '') or 0) > 0 and '1' or ''
  return {f[1], f[2] or '', f[3] or '', f[4] or '', f[5] == '1' and '1' or '0', f[6] or '',
    f[7] or '0', f[8], f[9] == '1' and '1' or '', f[10] or '', f[11] or '', idle}
end
-- v3: a side's memories of one store and workspace tag by the start (kind 'f') and the end
-- ('u', ended ones only) of their validity, for `as_of` counts (AS_OF_NEWEST_LUA).
local function by_validity(p, kind, side, store, wsh)
  return p .. kind .. ':' .. redis.sha1hex(cjson.encode({side, store, wsh}))
end
-- The sorted set of a side's memories of one store, workspace tag and superseded flag.
local function by_time(p, side, store, wsh, sup)
  return p .. 'o:' .. redis.sha1hex(cjson.encode({side, store, wsh, sup}))
end
-- A side's counts (HGETALL, as stored), and each of its sorted sets once, with the store,
-- workspace tag and superseded flag it holds.
local function side_sets(p, side)
  local counts = redis.call('HGETALL', p .. 'h:' .. side)
  local sets, seen = {}, {}
  for i = 1, #counts, 2 do
    local f = cjson.decode(counts[i])
    local o = f[1] == 'n' and by_time(p, side, f[2], f[3], f[5])
    if o and not seen[o] then
      seen[o] = true
      sets[#sets + 1] = {o, f[2], f[3], f[5]}
    end
  end
  return counts, sets
end
local function tally_apply(p, id, d, sign)
  local store, wsh, g = d[2], d[3], d[5]
  local sides = {g == '1' and 'g' or ('w:' .. d[4])}
  if wsh ~= '' then sides[2] = 's:' .. wsh end
  redis.call('INCRBY', p .. 'n', sign)
  for _, side in ipairs(sides) do
    local h = p .. 'h:' .. side
    local fields = {cjson.encode({'n', store, wsh, d[1], d[9], g})}
    for tag in string.gmatch(d[6], '[^,]+') do
      fields[#fields + 1] = cjson.encode({'t', store, wsh, tag})
    end
    if d[12] == '1' then fields[#fields + 1] = cjson.encode({'i', store, wsh}) end
    for _, field in ipairs(fields) do
      if redis.call('HINCRBY', h, field, sign) <= 0 then redis.call('HDEL', h, field) end
    end
    local o = by_time(p, side, store, wsh, d[9])
    if sign > 0 then redis.call('ZADD', o, d[7], id) else redis.call('ZREM', o, id) end
    local vf, vu = by_validity(p, 'f', side, store, wsh), by_validity(p, 'u', side, store, wsh)
    if sign < 0 then
      redis.call('ZREM', vf, id)
      redis.call('ZREM', vu, id)
    else
      if d[10] and d[10] ~= '' then redis.call('ZADD', vf, d[10], id) end
      if d[11] and d[11] ~= '' and tonumber(d[11]) < $open_until then
        redis.call('ZADD', vu, d[11], id)
      end
    end
  end
end
local function retally(p, id, rec, now)
  if not id then return end  -- its record is gone already (written with an expiry past)
  local new = tally_desc(rec, now)
  -- v3 validity: p..'v' holds the live, current memories whose validity ends, by `vu`
  -- (new[11]); a read that finds one due flags it like a superseded one (`end_validity`),
  -- so current reads keep one negation whatever the time.
  if new and new[9] ~= '1' and new[11] ~= '' and tonumber(new[11]) < $open_until then
    redis.call('ZADD', p .. 'v', new[11], id)
  else
    redis.call('ZREM', p .. 'v', id)
  end
  local enc = new and cjson.encode(new) or false
  local old = redis.call('HGET', p .. 'd', id)
  if old == enc then return end
  if old then tally_apply(p, id, cjson.decode(old), -1) end
  if new then
    tally_apply(p, id, new, 1)
    redis.call('HSET', p .. 'd', id, enc)
    -- By the key's own expiry: an idle memory's runs ahead of its `expires_at` (keep_alive).
    local t = redis.call('PEXPIRETIME', rec)
    if t > 0 then
      redis.call('ZADD', p .. 'x', t, id)
    else
      redis.call('ZREM', p .. 'x', id)
    end
  else
    redis.call('HDEL', p .. 'd', id)
    redis.call('ZREM', p .. 'x', id)
  end
end
-- Uncount up to `limit` memories whose expiry has passed (`recs`: the record key prefix);
-- how many there were.
local function settle(p, recs, now, limit)
  local due = redis.call('ZRANGEBYSCORE', p .. 'x', '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do retally(p, id, recs .. id, now) end
  return #due
end
-- The stores a scope's read sees, named in ARGV from `from` on; false for all (flag not '1').
local function stores_seen(flag, from)
  if flag ~= '1' then return false end
  local seen = {}
  for j = from, #ARGV do seen[ARGV[j]] = true end
  return seen
end
-- Flag up to `limit` memories whose validity has ended by `now` (see retally), and
-- count them as such; how many there were.
local function end_validity(p, recs, now, limit)
  local due = redis.call('ZRANGEBYSCORE', p .. 'v', '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    local rec = recs .. id
    local vu = redis.call('HGET', rec, 'vu')
    if vu and tonumber(vu) <= now then redis.call('HSET', rec, 'superseded', '1') end
    retally(p, id, rec, now)
  end
  return #due
end
-- Uncount every memory whose expiry has passed, up to $settle_max of them (a script holds
-- Redis while it runs), after flagging those whose validity ended; whether none is left.
local function settled(p, recs, now)
  if end_validity(p, recs, now, $ends_max) == $ends_max then return false end
  local left = $settle_max
  while left > 0 do
    local step = math.min(left, 1000)
    local n = settle(p, recs, now, step)
    if n < step then return true end
    left = left - n
  end
  return #redis.call('ZRANGEBYSCORE', p .. 'x', '-inf', now, 'LIMIT', 0, 1) == 0
end
"""


# v3 idleness: push the expiry of a memory with `idle_ttl_s` to that long after now (never
# past `ttl_until`) on every key it has, and in the tallies' expiry set; its indexed
# `expires_at` only when the expiry would pass it (record.idle_expiry). `p`: the tally
# prefix; `hists`, `dedups`: the history and dedup key prefixes.
_KEEP = """
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


def _script(
    source: str,
    follow: bool = False,
    pooled: bool = False,
    tally: bool = False,
    keep: bool = False,
) -> str:
    """The script with record field names filled in (and `follow`, `pooled` and `tally`,
    where they are used)."""
    helpers = (_FOLLOW if follow else "") + (_POOLED if pooled else "")
    helpers += (_TALLY if tally or keep else "") + (_KEEP if keep else "")
    return Template(helpers + source).substitute(
        _NAMES,
        permanent=PERMANENT_MS,
        settle_max=SETTLE_MAX,
        open_until=OPEN_UNTIL_MS,
        ends_max=ENDS_MAX,
        as_of_scan_max=AS_OF_SCAN_MAX,
    )


# Read live memories and (when ARGV[2] is '1') count this access, in one round trip; with
# '1' or '2' (an access not counted: `list`), push an idle memory's expiry (keep_alive).
# ARGV[1] is now (ms), ARGV[3..5] the history, dedup and tally prefixes, ARGV[6..] the record
# fields to return, `expires_at` first. Each result is
# false (missing or expired) or the field values followed by the access counters as they were
# before this access. The access hash inherits the record's expiry; checking the record first
# keeps a bump from resurrecting a deleted memory as a stray key.
FETCH_LUA = _script(
    """
local out = {}
local now = tonumber(ARGV[1])
local fields = {}
for j = 6, #ARGV do fields[#fields + 1] = ARGV[j] end
for i = 1, #KEYS, 2 do
  local rec, acc = KEYS[i], KEYS[i + 1]
  local vals = redis.call('HMGET', rec, unpack(fields))
  if vals[1] and tonumber(vals[1]) > now then
    local old = redis.call('HMGET', acc, 'access_count', 'last_accessed_at')
    if ARGV[2] ~= '0' then keep_alive(rec, acc, now, ARGV[3], ARGV[4], ARGV[5]) end
    if ARGV[2] == '1' then
      redis.call('HINCRBY', acc, 'access_count', 1)
      redis.call('HSET', acc, 'last_accessed_at', ARGV[1])
      local t = redis.call('PEXPIRETIME', rec)
      if t > 0 then redis.call('PEXPIREAT', acc, t) end
    end
    vals[#fields + 1] = old[1]
    vals[#fields + 2] = old[2]
    out[#out + 1] = vals
  else
    out[#out + 1] = false
  end
end
return out
""",
    keep=True,
)

# One hash field of many keys in one command (a pipeline of HGETs costs the client more
# than Redis): the embeddings of candidates. ARGV[1] is the field; false where missing.
FIELD_LUA = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGET', KEYS[i], ARGV[1]) end
return out
"""

# Delete live memories (record, access and dedup keys) and return each one's fields,
# atomically, so that two concurrent deletes report (and publish) each memory once. The
# history gets a `deleted` entry and outlives the memory by ARGV[4] ms. Memories of the
# immutable type ARGV[5] (states) are never deleted: if one is among them, nothing is, and
# the result is {'immutable', its id}.
# KEYS: record, access and history key of each memory, then the namespace's tally prefix
# (keys.tally_prefix: each deleted memory is uncounted). ARGV[1] is now (ms), ARGV[2] the
# namespace's dedup key prefix, ARGV[3] the history entry, ARGV[4] how long history stays,
# ARGV[5] the immutable type, ARGV[6..] the fields to return, `expires_at` first. Each result
# is false (missing or expired) or the field values.
_DELETE = """
local out = {}
local now = tonumber(ARGV[1])
local fields = {}
for j = 6, #ARGV do fields[#fields + 1] = ARGV[j] end
local last = #KEYS - 1
for i = 1, last, 3 do
  local f = redis.call('HMGET', KEYS[i], '$id', '$type', '$expires_at')
  if f[1] and f[2] == ARGV[5] and tonumber(f[3] or '0') > now then return {'immutable', f[1]} end
end
for i = 1, last, 3 do
  local rec, acc, hist = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  local f = redis.call('HMGET', rec, '$id', '$content_hash')
  if f[2] and redis.call('GET', ARGV[2] .. f[2]) == f[1] then
    redis.call('DEL', ARGV[2] .. f[2])
  end
  local vals = redis.call('HMGET', rec, unpack(fields))
  if f[1] and tonumber(vals[1] or '0') > now then
    redis.call('DEL', rec, acc)
    retally(KEYS[#KEYS], f[1], rec, now)
    redis.call('RPUSH', hist, ARGV[3])
    redis.call('PEXPIRE', hist, ARGV[4])
    out[#out + 1] = vals
  else
    if f[1] then
      redis.call('DEL', rec, acc)
      retally(KEYS[#KEYS], f[1], rec, now)
    end
    out[#out + 1] = false
  end
end
return out
"""
DELETE_LUA = _script(
    _DELETE,
    tally=True,
)

# Add a memory unless its exact content (same type and scope) is already live: then count a
# mention of that memory (mention_count, updated_at, a `mentioned` history entry) instead and
# return it. Check and write are one atomic step, so two handlers adding the same content at
# the same moment leave one record. KEYS: dedup key ('' when the add opted out of dedup), new
# record key. ARGV: now, expires (ms, or 0 for permanent), record key prefix, history key
# prefix, the history entry, n, the n fields to return of a repeated memory, then the new
# record's field/value pairs. Returns false when it wrote the new memory, else the repeated
# memory's field values; 1 when the new record's key exists already: a durable write applied
# again (its id derives from its request id), which must change nothing. KEYS[3]: the
# namespace's tally prefix (keys.tally_prefix): the new memory is counted, and up to 10
# expired ones uncounted; KEYS[4]: its tier (keys.tier_key). Returns 2, writing nothing,
# when the namespace has no tier: Redis lost it, and the caller sets the namespace up again.
_ADD = """
local dkey, rec = KEYS[1], KEYS[2]
if string.sub(dkey, -1) == ':' then dkey = '' end
if redis.call('EXISTS', rec) == 1 then return 1 end
if redis.call('EXISTS', KEYS[4]) == 0 then return 2 end
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[6])
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
    local entry = cjson.decode(ARGV[5])
    entry['event'] = 'mentioned'
    entry['changes'] = {mention_count = {old = count - 1, new = count}}
    redis.call('RPUSH', ARGV[4] .. existing, cjson.encode(entry))
    follow(ARGV[4] .. existing, old)
    local fields = {}
    for j = 7, 6 + n do fields[#fields + 1] = ARGV[j] end
    return redis.call('HMGET', old, unpack(fields))
  end
end
local pairs = {}
for j = 7 + n, #ARGV do pairs[#pairs + 1] = ARGV[j] end
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
return false
"""
ADD_LUA = _script(
    _ADD,
    follow=True,
    pooled=True,
    tally=True,
)

# Count one more mention of a live memory (a near-duplicate add) in the given workspace.
# KEYS: record, history. ARGV: now, the history entry, the workspace ('' for none), then the
# fields to return. Returns false when the memory is gone or in another workspace, else its
# field values after the mention.
MENTION_LUA = _script(
    """
local f = redis.call('HMGET', KEYS[1], '$expires_at', '$id', '$workspace')
if not f[2] or tonumber(f[1]) <= tonumber(ARGV[1]) then return false end
if (f[3] or '') ~= ARGV[3] then return false end
local count = redis.call('HINCRBY', KEYS[1], '$mention_count', 1)
redis.call('HSET', KEYS[1], '$updated_at', ARGV[1])
local entry = cjson.decode(ARGV[2])
entry['event'] = 'mentioned'
entry['changes'] = {mention_count = {old = count - 1, new = count}}
redis.call('RPUSH', KEYS[2], cjson.encode(entry))
follow(KEYS[2], KEYS[1])
local fields = {}
for j = 4, #ARGV do fields[#fields + 1] = ARGV[j] end
return redis.call('HMGET', KEYS[1], unpack(fields))
""",
    follow=True,
)

# Update a live memory: set fields, move its dedup key, append the history entry, and
# re-apply expiry to every key. KEYS: record, access, old dedup key, new dedup key, history,
# the namespace's tally prefix (the memory is counted as it is after the update).
# ARGV: now, expiry ('keep', 'persist' or ms), the history entry, then field/value pairs.
# Returns false when the memory is missing or expired.
_UPDATE = """
local rec, acc, olddk, newdk, hist = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if string.sub(olddk, -1) == ':' then olddk = '' end
if string.sub(newdk, -1) == ':' then newdk = '' end
local now = tonumber(ARGV[1])
local f = redis.call('HMGET', rec, '$id', '$expires_at')
if not f[1] or tonumber(f[2]) <= now then return false end
local pairs = {}
for j = 4, #ARGV do pairs[#pairs + 1] = ARGV[j] end
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
return 1
"""
UPDATE_LUA = _script(
    _UPDATE,
    tally=True,
)

# Mark live memories as superseded by a newer one: set its id (and the index flag), append a
# `superseded` history entry with the old and new `superseded_by`, drop its exact-dedup key
# (the same content added again is a new, current memory), and return each one's fields.
# v3: its validity is closed at the newer memory's start (`valid_until`, and `vu` for the
# index), unless it ended earlier; never before its own start.
# KEYS: record and history key of each memory, then the namespace's tally prefix. ARGV: now,
# the newer id, the history entry, the dedup key prefix, the newer memory's start (ms), n,
# the n field/value pairs to set (2n values), then the fields to return, `expires_at` first.
# Each result is false (missing or expired) or the values.
_SUPERSEDE = """
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
  if f[1] and tonumber(f[2]) > now then
    redis.call('HSET', rec, unpack(pairs))
    redis.call('HSET', rec, '$updated_at', ARGV[1])
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
SUPERSEDE_LUA = _script(
    _SUPERSEDE,
    follow=True,
    tally=True,
)

# Create a workspace unless its name is taken (check and write in one step, so two handlers
# creating one name at once leave one workspace). KEYS: the workspace, the namespace's index.
# ARGV: name, created (ms), the most workspaces a namespace may hold, then field/value pairs.
# Returns 1 (created), 0 (name taken) or -1 (the namespace is full).
CREATE_WORKSPACE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return -1 end
local pairs = {}
for j = 4, #ARGV do pairs[#pairs + 1] = ARGV[j] end
redis.call('HSET', KEYS[1], unpack(pairs))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
"""

# Set fields of an existing workspace, and its `updated_at` when one of them changed.
# KEYS: the workspace. ARGV: updated_at, then field/value pairs (values JSON, as stored).
# Returns 0 (no such workspace), 1 (changed) or 2 (every field had that value already).
UPDATE_WORKSPACE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local changed = {}
for j = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[j]) ~= ARGV[j + 1] then
    changed[#changed + 1] = ARGV[j]
    changed[#changed + 1] = ARGV[j + 1]
  end
end
if #changed == 0 then return 2 end
changed[#changed + 1] = 'updated_at'
changed[#changed + 1] = ARGV[1]
redis.call('HSET', KEYS[1], unpack(changed))
return 1
"""

# Create a state: its workspace must exist and its name be new there, forever; the name's
# claim and the state's memory are written in one step. KEYS: the workspace, its states,
# the new record, its history, the namespace's tally prefix, its tier. ARGV: name, the states
# entry (JSON), expires (ms, or 0 for permanent), the history entry, the most states a
# workspace may hold, then the record's field/value pairs. Returns 'ok', 'no_workspace',
# 'exists', 'full', or 'unset' (the namespace has no tier: see ADD_LUA).
CREATE_STATE_LUA = _script(
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'no_workspace' end
if redis.call('EXISTS', KEYS[6]) == 0 then return 'unset' end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 'exists' end
if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[5]) then return 'full' end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local pairs = {}
for j = 6, #ARGV do pairs[#pairs + 1] = ARGV[j] end
pooled(KEYS[6], pairs)
redis.call('HSET', KEYS[3], unpack(pairs))
if ARGV[3] ~= '0' then redis.call('PEXPIREAT', KEYS[3], ARGV[3]) end
-- A new memory: counted whatever the time (0), its expiry was checked by the caller.
retally(KEYS[5], redis.call('HGET', KEYS[3], '$id'), KEYS[3], 0)
redis.call('RPUSH', KEYS[4], ARGV[4])
follow(KEYS[4], KEYS[3])
return 'ok'
""",
    follow=True,
    pooled=True,
    tally=True,
)

# Archive a state: add its name to the archived set and note it in its memory's history.
# KEYS: the workspace, its states, its archived set. ARGV: name, history key prefix, the
# history entry. Returns 'no_workspace', 'missing', 'already', or the state's memory id.
ARCHIVE_STATE_LUA = _script(
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'no_workspace' end
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw then return 'missing' end
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then return 'already' end
local id = cjson.decode(raw)['id']
local hist = ARGV[2] .. id
if redis.call('EXISTS', hist) == 1 then
  redis.call('RPUSH', hist, ARGV[3])
end
return id
"""
)

# Write an exported memory back as it was (`import`), unless its id exists: then nothing
# changes, so an import run twice is the same as once. KEYS: record, access, history, dedup
# key (ending in ':' for none), the namespace's tally prefix, its tier. ARGV: expiry (ms,
# '0' permanent), access count, last access (ms or ''), the history entry (written only into
# an empty history), then the record's field/value pairs. The dedup key is set only where no other
# memory holds it. Returns 1 when written, 0 when the id exists, 2 (nothing written) when the
# namespace has no tier (see ADD_LUA).
IMPORT_LUA = _script(
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
return 1
""",
    follow=True,
    pooled=True,
    tally=True,
)

# Make the tallies agree with each memory's record (see _TALLY): counts a namespace's
# memories written before tallies existed, a batch at a time. KEYS: the tally prefix, then
# record keys. ARGV: now, then each record's memory id.
RETALLY_LUA = _script(
    """
for i = 2, #KEYS do retally(KEYS[1], ARGV[i], KEYS[i], tonumber(ARGV[1])) end
return #KEYS - 1
""",
    tally=True,
)

# What `describe` reads of a namespace: nothing (false) until its tallies are complete
# (p..'ready'), 'behind' when more than SETTLE_MAX memories' expiry has passed since they
# were last settled (the caller aggregates while the next calls catch up), else, after
# uncounting every memory whose expiry has passed, for each side
# asked for: its counts (HGETALL) and, per store, workspace tag and superseded flag in it,
# the created_at of its oldest and newest memory. KEYS: the tally prefix. ARGV: now, the
# record key prefix, then the sides.
TALLY_READ_LUA = _script(
    """
local p, now = KEYS[1], tonumber(ARGV[1])
if redis.call('EXISTS', p .. 'ready') == 0 then return false end
if not settled(p, ARGV[2], now) then return 'behind' end
local out = {}
for j = 3, #ARGV do
  local counts, sets = side_sets(p, ARGV[j])
  local bounds = {}
  for _, set in ipairs(sets) do
    local first = redis.call('ZRANGE', set[1], 0, 0, 'WITHSCORES')
    local last = redis.call('ZRANGE', set[1], -1, -1, 'WITHSCORES')
    bounds[#bounds + 1] = {set[2], set[3], first[2] or '', last[2] or ''}
  end
  out[#out + 1] = {counts, bounds}
end
return out
""",
    tally=True,
)

# `list`'s page when it filters by scope alone: the newest memories of the scope, from the
# sorted sets the tallies keep (see _TALLY), after uncounting those whose expiry has passed.
# Nothing (false) until the namespace's tallies are complete; 'behind' as in TALLY_READ_LUA.
# KEYS: the tally prefix. ARGV: now, the record key prefix, how many of the newest to return,
# '1' to include superseded memories, the workspace tag ('' for any), '1' when only some
# stores are seen, the number of sides, the sides, then the stores seen. Returns how many
# memories are in the scope, then the newest ones' ids and created_at (up to that many per
# sorted set: the caller merges).
NEWEST_LUA = _script(
    """
local p, now, want = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[3])
if redis.call('EXISTS', p .. 'ready') == 0 then return false end
if not settled(p, ARGV[2], now) then return 'behind' end
local nsides = tonumber(ARGV[7])
local stores = stores_seen(ARGV[6], 8 + nsides)
local total, out = 0, {}
for j = 8, 7 + nsides do
  local _, sets = side_sets(p, ARGV[j])
  for _, set in ipairs(sets) do
    local o, store, wsh, sup = set[1], set[2], set[3], set[4]
    if (ARGV[5] == '' or wsh == ARGV[5]) and (not stores or stores[store])
        and (ARGV[4] == '1' or sup == '') then
      total = total + redis.call('ZCARD', o)
      local newest = redis.call('ZREVRANGE', o, 0, want - 1, 'WITHSCORES')
      for _, v in ipairs(newest) do out[#out + 1] = v end
    end
  end
end
table.insert(out, 1, total)
return out
""",
    tally=True,
)

# Before a current read: flag (and count as such) the memories whose validity has ended by
# now (see end_validity), up to ENDS_MAX of them. KEYS: the tally prefix. ARGV: now, the
# record key prefix. Returns how many were flagged.
ENDED_LUA = _script(
    """
return end_validity(KEYS[1], ARGV[2], tonumber(ARGV[1]), $ends_max)
""",
    tally=True,
)

# Give memories written before v3 their validity window for `as_of` reads (`vf`, `vu`): from
# `created_at`, and, for a superseded one, until the newer memory's start (or, when that one
# is gone, the moment of the supersede, its `updated_at`). A memory with `vf` already is left
# as it is; each is counted again, with its window (tally_desc). KEYS: the tally prefix,
# then record keys. ARGV: the record key prefix, now (ms), then each record's memory id
# (from ARGV[3]). Returns how many were given one.
VALIDITY_BACKFILL_LUA = _script(
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
    tally=True,
)


# `apply` (v3): several writes of one namespace in one atomic step, all or none. Each step
# is one of the scripts above (add, update, supersede, delete) with its own keys and
# arguments, run as a function; before any runs, every step's precondition is checked, so a
# batch refused writes nothing. KEYS: each step's keys, in order. ARGV: now, the number of
# steps, the immutable type (states), then per step its op, the index of its action, its
# check ('new': its record must not exist and the namespace must be set up; 'live': its
# record must be live and not immutable), the record's `updated_at` as the caller read it
# ('' for any), its number of keys and of arguments; then each step's arguments, in order.
# Returns {'refused', action index, why} (why: exists, unset, missing, immutable, changed),
# or each step's result, as its own script returns it.
APPLY_LUA = _script(
    "local ops = {}\n"
    + "".join(
        f"ops['{name}'] = function(KEYS, ARGV)\n{body}\nend\n"
        for name, body in (
            ("add", _ADD),
            ("update", _UPDATE),
            ("supersede", _SUPERSEDE),
            ("delete", _DELETE),
        )
    )
    + """
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local steps, k, a = {}, 1, 4 + 6 * n
for s = 1, n do
  local h = 3 + 6 * (s - 1)
  local st = {op = ARGV[h + 1], action = tonumber(ARGV[h + 2]), check = ARGV[h + 3],
    updated = ARGV[h + 4]}
  local nk, na = tonumber(ARGV[h + 5]), tonumber(ARGV[h + 6])
  st.keys, st.args = {}, {}
  for i = k, k + nk - 1 do st.keys[#st.keys + 1] = KEYS[i] end
  for i = a, a + na - 1 do st.args[#st.args + 1] = ARGV[i] end
  k, a = k + nk, a + na
  steps[s] = st
end
for _, st in ipairs(steps) do
  if st.check == 'new' then
    if redis.call('EXISTS', st.keys[2]) == 1 then return {'refused', st.action, 'exists'} end
    if redis.call('EXISTS', st.keys[4]) == 0 then return {'refused', st.action, 'unset'} end
  else
    local f = redis.call('HMGET', st.keys[1], '$id', '$expires_at', '$type', '$updated_at')
    if not f[1] or tonumber(f[2]) <= now then return {'refused', st.action, 'missing'} end
    if f[3] == ARGV[3] then return {'refused', st.action, 'immutable'} end
    if st.updated ~= '' and f[4] ~= st.updated then return {'refused', st.action, 'changed'} end
  end
end
local out = {}
for s, st in ipairs(steps) do out[s] = ops[st.op](st.keys, st.args) end
return out
""",
    follow=True,
    pooled=True,
    tally=True,
)


# `list` with `as_of` (v3) by scope alone, from the tallies: how many memories of the scope
# were valid at that instant (per store and workspace of each side: those whose validity
# started by then less those whose validity had ended by then), and the newest of them,
# superseded or not: each sorted set walked newest first, each memory's window checked,
# at most AS_OF_SCAN_MAX memories in all. Nothing (false) until the namespace's tallies
# count windows (p..'vready'); 'behind' as in TALLY_READ_LUA, or when the walk would pass
# its bound (the caller reads the index then). KEYS: the tally prefix. ARGV: now, the record
# key prefix, how many of the newest to return, the instant, the workspace tag ('' for
# any), '1' when only some stores are seen, the number of sides, the sides, then the stores
# seen. Returns the count, then the newest ones' ids and created_at.
AS_OF_NEWEST_LUA = _script(
    """
local p, now, want, at = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('EXISTS', p .. 'ready') == 0 or redis.call('EXISTS', p .. 'vready') == 0 then
  return false
end
if not settled(p, ARGV[2], now) then return 'behind' end
local nsides = tonumber(ARGV[7])
local stores = stores_seen(ARGV[6], 8 + nsides)
local total, out, scanned, counted = 0, {}, 0, {}
for j = 8, 7 + nsides do
  local side = ARGV[j]
  local _, sets = side_sets(p, side)
  for _, set in ipairs(sets) do
    local o, store, wsh = set[1], set[2], set[3]
    if (ARGV[5] == '' or wsh == ARGV[5]) and (not stores or stores[store]) then
      local part = cjson.encode({side, store, wsh})
      if not counted[part] then
        counted[part] = true
        total = total + redis.call('ZCOUNT', by_validity(p, 'f', side, store, wsh), '-inf', at)
          - redis.call('ZCOUNT', by_validity(p, 'u', side, store, wsh), '-inf', at)
      end
      local found, from = 0, 0
      while found < want do
        local batch = redis.call('ZREVRANGE', o, from, from + 63, 'WITHSCORES')
        if #batch == 0 then break end
        from = from + 64
        for i = 1, #batch, 2 do
          local w = redis.call('HMGET', ARGV[2] .. batch[i], 'vf', 'vu')
          if w[1] and tonumber(w[1]) <= at and tonumber(w[2]) > at and found < want then
            out[#out + 1] = batch[i]
            out[#out + 1] = batch[i + 1]
            found = found + 1
          end
        end
        scanned = scanned + #batch / 2
        if scanned > $as_of_scan_max then return 'behind' end
      end
    end
  end
end
table.insert(out, 1, total)
return out
""",
    tally=True,
)
