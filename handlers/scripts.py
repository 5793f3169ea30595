"""Lua scripts that make multi-key reads and writes of a memory atomic in Redis."""

# Read live memories and (when ARGV[2] is '1') count this access, in one round trip. ARGV[1]
# is now (ms), ARGV[3..] the record fields to return, `expires_at` first. Each result is
# false (missing or expired) or the field values followed by the access counters as they were
# before this access. The access hash inherits the record's expiry; checking the record first
# keeps a bump from resurrecting a deleted memory as a stray key.
FETCH_LUA = """
local out = {}
local now = tonumber(ARGV[1])
local fields = {}
for j = 3, #ARGV do fields[#fields + 1] = ARGV[j] end
for i = 1, #KEYS, 2 do
  local rec, acc = KEYS[i], KEYS[i + 1]
  local vals = redis.call('HMGET', rec, unpack(fields))
  if vals[1] and tonumber(vals[1]) > now then
    local old = redis.call('HMGET', acc, 'access_count', 'last_accessed_at')
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
"""

# Delete live memories (record, access and dedup keys) and return (id, type, wf, agent_id,
# content) of each, atomically, so that two concurrent deletes report (and publish) each
# memory once. ARGV[1] is now (ms), ARGV[2] the namespace's dedup key prefix.
DELETE_LUA = """
local out = {}
local now = tonumber(ARGV[1])
for i = 1, #KEYS, 2 do
  local rec, acc = KEYS[i], KEYS[i + 1]
  local f = redis.call('HMGET', rec, 'id', 'type', 'wf', 'agent_id', 'content', 'expires_at',
                       'chash')
  if f[7] and redis.call('GET', ARGV[2] .. f[7]) == f[1] then
    redis.call('DEL', ARGV[2] .. f[7])
  end
  if f[1] and tonumber(f[6] or '0') > now then
    redis.call('DEL', rec, acc)
    out[#out + 1] = {f[1], f[2], f[3] or false, f[4] or false, f[5] or ''}
  else
    if f[1] then redis.call('DEL', rec, acc) end
    out[#out + 1] = false
  end
end
return out
"""

# Add a memory unless its exact content (same type and scope) is already live: then bump that
# memory's mention_count and updated_at instead. Check and write are one atomic step, so two
# handlers adding the same content at the same moment leave one record.
# KEYS: dedup key ('' when the add opted out of dedup), new record key. ARGV: now, expires
# (ms, or 0 for permanent), record key prefix, then field/value pairs. Returns {new id}, or
# {existing id, mention_count, wf, importance, expires_at, agent_id, content, type} for a
# repeat.
ADD_LUA = """
local dkey, rec = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
local existing = false
if dkey ~= '' then existing = redis.call('GET', dkey) end
if existing then
  local old = ARGV[3] .. existing
  local f = redis.call('HMGET', old, 'expires_at', 'wf', 'importance', 'agent_id', 'content',
                       'type')
  if f[1] and tonumber(f[1]) > now then
    local n = redis.call('HINCRBY', old, 'mention_count', 1)
    redis.call('HSET', old, 'updated_at', ARGV[1])
    return {existing, n, f[2] or false, f[3], f[1], f[4] or false, f[5], f[6]}
  end
end
local pairs = {}
for j = 4, #ARGV do pairs[#pairs + 1] = ARGV[j] end
redis.call('HSET', rec, unpack(pairs))
local id = redis.call('HGET', rec, 'id')
if ARGV[2] ~= '0' then redis.call('PEXPIREAT', rec, ARGV[2]) end
if dkey ~= '' then
  redis.call('SET', dkey, id)
  if ARGV[2] ~= '0' then redis.call('PEXPIREAT', dkey, ARGV[2]) end
end
return {id}
"""

# Count one more mention of a live memory (a near-duplicate add). KEYS: record. ARGV: now.
MENTION_LUA = """
local f = redis.call('HMGET', KEYS[1], 'expires_at', 'id')
if not f[2] or tonumber(f[1]) <= tonumber(ARGV[1]) then return false end
local n = redis.call('HINCRBY', KEYS[1], 'mention_count', 1)
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1])
return n
"""

# Update a live memory: set fields, move its dedup key, and re-apply expiry to every key.
# KEYS: record, access, old dedup key, new dedup key. ARGV: now, expiry ('keep', 'persist' or
# ms), then field/value pairs. Returns false when the memory is missing or expired.
UPDATE_LUA = """
local rec, acc, olddk, newdk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = tonumber(ARGV[1])
local f = redis.call('HMGET', rec, 'id', 'expires_at')
if not f[1] or tonumber(f[2]) <= now then return false end
local pairs = {}
for j = 3, #ARGV do pairs[#pairs + 1] = ARGV[j] end
redis.call('HSET', rec, unpack(pairs))
if olddk ~= newdk and newdk ~= '' then
  if redis.call('GET', olddk) == f[1] then redis.call('DEL', olddk) end
  redis.call('SET', newdk, f[1], 'NX')
end
local keys = {rec, acc}
if newdk ~= '' and redis.call('GET', newdk) == f[1] then keys[#keys + 1] = newdk end
local t
if ARGV[2] == 'keep' then t = redis.call('PEXPIRETIME', rec) else t = ARGV[2] end
for _, k in ipairs(keys) do
  if t == 'persist' or t == -1 then redis.call('PERSIST', k)
  elseif tonumber(t) > 0 then redis.call('PEXPIREAT', k, t) end
end
return 1
"""
