"""Lua scripts that make multi-key reads and writes of a memory atomic in Redis."""

# Read the access counters of live memories (before this access), then bump them; the access
# hash inherits the record's expiry. Checking EXISTS first keeps a bump from resurrecting a
# deleted memory as a stray key.
BUMP_LUA = """
local out = {}
for i = 1, #KEYS, 2 do
  local rec, acc = KEYS[i], KEYS[i + 1]
  if redis.call('EXISTS', rec) == 1 then
    local old = redis.call('HMGET', acc, 'access_count', 'last_accessed_at')
    redis.call('HINCRBY', acc, 'access_count', 1)
    redis.call('HSET', acc, 'last_accessed_at', ARGV[1])
    local t = redis.call('PEXPIRETIME', rec)
    if t > 0 then redis.call('PEXPIREAT', acc, t) end
    out[#out + 1] = {old[1] or false, old[2] or false}
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
