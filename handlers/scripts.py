"""Lua scripts that make multi-key reads and writes of a memory atomic in Redis."""

# Read live memories and count this access, in one round trip. ARGV[1] is now (ms), ARGV[2..]
# the record fields to return, `expires_at` first. Each result is false (missing or expired)
# or the field values followed by the access counters as they were before this access. The
# access hash inherits the record's expiry; checking the record first keeps a bump from
# resurrecting a deleted memory as a stray key.
FETCH_LUA = """
local out = {}
local now = tonumber(ARGV[1])
local fields = {}
for j = 2, #ARGV do fields[#fields + 1] = ARGV[j] end
for i = 1, #KEYS, 2 do
  local rec, acc = KEYS[i], KEYS[i + 1]
  local vals = redis.call('HMGET', rec, unpack(fields))
  if vals[1] and tonumber(vals[1]) > now then
    local old = redis.call('HMGET', acc, 'access_count', 'last_accessed_at')
    redis.call('HINCRBY', acc, 'access_count', 1)
    redis.call('HSET', acc, 'last_accessed_at', ARGV[1])
    local t = redis.call('PEXPIRETIME', rec)
    if t > 0 then redis.call('PEXPIREAT', acc, t) end
    vals[#fields + 1] = old[1]
    vals[#fields + 2] = old[2]
    out[#out + 1] = vals
  else
    out[#out + 1] = false
  end
end
return out
"""

# Read (id, type, wf, agent_id, content) of each live memory and delete its keys, atomically,
# so that two concurrent deletes report (and publish) each memory once.
DELETE_LUA = """
local out = {}
local now = tonumber(ARGV[1])
for i = 1, #KEYS, 2 do
  local rec, acc = KEYS[i], KEYS[i + 1]
  local f = redis.call('HMGET', rec, 'id', 'type', 'wf', 'agent_id', 'content', 'expires_at')
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
