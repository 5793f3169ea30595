"""The tallies' Lua: what every write counts (`TALLY`, its `retally`) and the reads of
those counts. A namespace's tallies live under its tally prefix p (`tally_prefix`)."""

from __future__ import annotations

from handlers.store.lua import fragment, lua
from handlers.store.record import RECORD_FIELDS

# The most expired memories one read settles (see `settled` in TALLY): about 20 ms of Redis.
SETTLE_MAX = 1000
# The most ended validities one read flags: each flag re-indexes its memory (its vector
# too), about 1 ms of Redis at 100k memories.
ENDS_MAX = 100
# The most memories a `list` with `as_of` walks in the tallies before it reads the index.
AS_OF_SCAN_MAX = 2000


# What `describe` counts of each memory, kept by every write (docs/protocol.md, "describe"):
# the namespace's tallies, under the prefix p (`tally_prefix`). p..'d' holds, per memory
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
TALLY = fragment(
    """
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
""",
    settle_max=SETTLE_MAX,
    ends_max=ENDS_MAX,
)


# Make the tallies agree with each memory's record (see TALLY): counts a namespace's
# memories written before tallies existed, a batch at a time. KEYS: the tally prefix, then
# record keys. ARGV: now, then each record's memory id.
RETALLY_LUA = lua(
    TALLY,
    """
for i = 2, #KEYS do retally(KEYS[1], ARGV[i], KEYS[i], tonumber(ARGV[1])) end
return #KEYS - 1
""",
)


# What `describe` reads of a namespace: nothing (false) until its tallies are complete
# (p..'ready'), 'behind' when more than SETTLE_MAX memories' expiry has passed since they
# were last settled (the caller aggregates while the next calls catch up), else, after
# uncounting every memory whose expiry has passed, for each side
# asked for: its counts (HGETALL) and, per store, workspace tag and superseded flag in it,
# the created_at of its oldest and newest memory. KEYS: the tally prefix. ARGV: now, the
# record key prefix, then the sides.
TALLY_READ_LUA = lua(
    TALLY,
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
)


# A page of memories from the newest of sorted sets (`pairs`: id, created_at, ...), newest
# first and at equal times the greater id first (ids sort by creation): the records from
# `from` (0-based) on, at most `count`, each as its fields (RECORD_FIELDS, `expires_at`
# first), false where it is gone. So `list` reads its page in the same script.
PAGE = fragment(
    """
local FIELDS = {$fields}
local function page(pairs, from, count, recs, now)
  local items = {}
  for i = 1, #pairs, 2 do items[#items + 1] = {tonumber(pairs[i + 1]), pairs[i]} end
  table.sort(items, function(a, b)
    if a[1] ~= b[1] then return a[1] > b[1] end
    return a[2] > b[2]
  end)
  local rows = {}
  for i = from + 1, math.min(#items, from + count) do
    local vals = redis.call('HMGET', recs .. items[i][2], unpack(FIELDS))
    rows[#rows + 1] = (vals[1] and tonumber(vals[1]) > now) and vals or false
  end
  return rows
end
""",
    fields=", ".join(f"'{name}'" for name in RECORD_FIELDS),
)


# `list`'s page when it filters by scope alone: the newest memories of the scope, from the
# sorted sets the tallies keep (see TALLY), after uncounting those whose expiry has passed.
# Nothing (false) until the namespace's tallies are complete; 'behind' as in TALLY_READ_LUA.
# KEYS: the tally prefix. ARGV: now, the record key prefix, the page's offset and limit,
# '1' to include superseded memories, the workspace tag ('' for any), '1' when only some
# stores are seen, the number of sides, the sides, then the stores seen. Returns how many
# memories are in the scope, then the page's records (PAGE).
NEWEST_LUA = lua(
    TALLY,
    PAGE,
    """
local p, now, from = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[3])
local want = from + tonumber(ARGV[4])
if redis.call('EXISTS', p .. 'ready') == 0 then return false end
if not settled(p, ARGV[2], now) then return 'behind' end
local nsides = tonumber(ARGV[8])
local stores = stores_seen(ARGV[7], 9 + nsides)
local total, out = 0, {}
for j = 9, 8 + nsides do
  local _, sets = side_sets(p, ARGV[j])
  for _, set in ipairs(sets) do
    local o, store, wsh, sup = set[1], set[2], set[3], set[4]
    if (ARGV[6] == '' or wsh == ARGV[6]) and (not stores or stores[store])
        and (ARGV[5] == '1' or sup == '') then
      total = total + redis.call('ZCARD', o)
      local newest = redis.call('ZREVRANGE', o, 0, want - 1, 'WITHSCORES')
      for _, v in ipairs(newest) do out[#out + 1] = v end
    end
  end
end
local rows = page(out, from, tonumber(ARGV[4]), ARGV[2], now)
table.insert(rows, 1, total)
return rows
""",
)


# `list` with `as_of` (v3) by scope alone, from the tallies: how many memories of the scope
# were valid at that instant (per store and workspace of each side: those whose validity
# started by then less those whose validity had ended by then), and the newest of them,
# superseded or not: each sorted set walked newest first, each memory's window checked,
# at most AS_OF_SCAN_MAX memories in all. Nothing (false) until the namespace's tallies
# count windows (p..'vready'); 'behind' as in TALLY_READ_LUA, or when the walk would pass
# its bound (the caller reads the index then). KEYS: the tally prefix. ARGV: now, the record
# key prefix, the page's offset and limit, the instant, the workspace tag ('' for any), '1'
# when only some stores are seen, the number of sides, the sides, then the stores seen.
# Returns the count, then the page's records (PAGE).
AS_OF_NEWEST_LUA = lua(
    TALLY,
    PAGE,
    PAGE,
    fragment(
        """
local p, now, at = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[5])
local from = tonumber(ARGV[3])
local want = from + tonumber(ARGV[4])
if redis.call('EXISTS', p .. 'ready') == 0 or redis.call('EXISTS', p .. 'vready') == 0 then
  return false
end
if not settled(p, ARGV[2], now) then return 'behind' end
local nsides = tonumber(ARGV[8])
local stores = stores_seen(ARGV[7], 9 + nsides)
local total, out, scanned, counted = 0, {}, 0, {}
for j = 9, 8 + nsides do
  local side = ARGV[j]
  local _, sets = side_sets(p, side)
  for _, set in ipairs(sets) do
    local o, store, wsh = set[1], set[2], set[3]
    if (ARGV[6] == '' or wsh == ARGV[6]) and (not stores or stores[store]) then
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
local rows = page(out, from, tonumber(ARGV[4]), ARGV[2], now)
table.insert(rows, 1, total)
return rows
""",
        as_of_scan_max=AS_OF_SCAN_MAX,
    ),
)
