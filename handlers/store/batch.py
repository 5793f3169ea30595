"""Several writes of one namespace as one atomic script, all or none (`apply`, v3)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import redis.asyncio as aioredis

from handlers.store.background import Added
from handlers.store.failures import Guard
from handlers.store.indexes import Indexes
from handlers.store.lua import lua
from handlers.store.placement import POOLED
from handlers.store.record import RECORD_FIELDS, Entry, Record
from handlers.store.resp import text
from handlers.store.tallies.scripts import TALLY
from handlers.store.writes import (
    ADD,
    DELETE,
    FOLLOW,
    GOING,
    SUPERSEDE,
    UPDATE,
    VERSION,
    add_call,
    delete_call,
    supersede_call,
    update_call,
)


class Refused(Exception):
    """An `apply` step's precondition failed (its action's index, why: exists, unset,
    missing, immutable, changed, version, superseded or meets, and the detail: the memory's
    version, or the id an add repeats); nothing was written."""

    def __init__(self, action: int, why: str, detail: str = "") -> None:
        super().__init__(f"action {action}: {why} {detail}".strip())
        self.action = action
        self.why = why
        self.detail = detail


# `apply` (v3): several writes of one namespace in one atomic step, all or none. Each step
# is one of the scripts above (add, update, supersede, delete) with its own keys and
# arguments, run as a function; before any runs, every step's precondition is checked, so a
# batch refused writes nothing. KEYS: each step's keys, in order. ARGV: now, the number of
# steps, the immutable type (states), then per step its op, the index of its action, its
# check ('new': its record must not exist and the namespace must be set up; 'live': its
# record must be live and not immutable; 'current': live, not immutable and not superseded),
# the version the caller read it at ('' for any: a change since is `changed`), the version
# its action expects ('' for any: v4 `expected_version`), its number of keys and of
# arguments; then each step's arguments, in order. Op `supersede+` is a supersede by the
# memory the batch's last add wrote or repeated (skipped, false, when that is the target).
# Returns {'refused', action index, why, detail}: why is exists, unset, missing, immutable,
# changed, version or superseded (detail: the memory's version), or meets (an add repeats a
# memory another action writes; detail: its id); else each step's result, as its own
# script returns it.
APPLY_LUA = lua(
    FOLLOW,
    VERSION,
    GOING,
    POOLED,
    TALLY,
    "local ops = {}\n"
    + "".join(
        f"ops['{name}'] = function(KEYS, ARGV)\n{body}\nend\n"
        for name, body in (
            ("add", ADD),
            ("update", UPDATE),
            ("supersede", SUPERSEDE),
            ("delete", DELETE),
        )
    )
    + """
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local ID_AT = """
    + str(RECORD_FIELDS.index("id") + 1)
    + """
local W = 7
local steps, k, a = {}, 1, 4 + W * n
for s = 1, n do
  local h = 3 + W * (s - 1)
  local st = {op = ARGV[h + 1], action = tonumber(ARGV[h + 2]), check = ARGV[h + 3],
    read = ARGV[h + 4], expected = ARGV[h + 5]}
  local nk, na = tonumber(ARGV[h + 6]), tonumber(ARGV[h + 7])
  st.keys, st.args = {}, {}
  for i = k, k + nk - 1 do st.keys[#st.keys + 1] = KEYS[i] end
  for i = a, a + na - 1 do st.args[#st.args + 1] = ARGV[i] end
  k, a = k + nk, a + na
  steps[s] = st
end
local targets = {}
for _, st in ipairs(steps) do
  if st.check ~= 'new' and st.op ~= 'supersede+' then targets[st.keys[1]] = st.action end
end
for _, st in ipairs(steps) do
  if st.check == 'new' then
    if redis.call('EXISTS', st.keys[2]) == 1 then return {'refused', st.action, 'exists', ''} end
    if redis.call('EXISTS', st.keys[4]) == 0 then return {'refused', st.action, 'unset', ''} end
    -- An add that would repeat a live memory that another action writes: the two actions
    -- meet on one memory.
    local dkey = st.keys[1]
    if string.sub(dkey, -1) ~= ':' then
      local existing = redis.call('GET', dkey)
      if existing and targets[st.args[3] .. existing] then
        return {'refused', st.action, 'meets', existing}
      end
    end
  else
    local f = redis.call('HMGET', st.keys[1], '$id', '$expires_at', '$type', '$superseded_by')
    if not f[1] or tonumber(f[2]) <= now then return {'refused', st.action, 'missing', ''} end
    if f[3] == ARGV[3] then return {'refused', st.action, 'immutable', ''} end
    local v = version_of(st.keys[1])
    if st.expected ~= '' and tonumber(st.expected) ~= v then
      return {'refused', st.action, 'version', v}
    end
    if st.check == 'current' and f[4] and f[4] ~= '' then
      return {'refused', st.action, 'superseded', v}
    end
    if st.read ~= '' and tonumber(st.read) ~= v then return {'refused', st.action, 'changed', v} end
  end
end
local out = {}
local by = false
for s, st in ipairs(steps) do
  if st.op == 'add' then
    out[s] = ops.add(st.keys, st.args)
    by = out[s]
    if type(by) == 'table' then by = by[ID_AT] else by = redis.call('HGET', st.keys[2], '$id') end
  elseif st.op == 'supersede+' then
    if redis.call('HGET', st.keys[1], '$id') == by then out[s] = false else
      st.args[2] = by
      out[s] = ops.supersede(st.keys, st.args)
    end
  else
    out[s] = ops[st.op](st.keys, st.args)
  end
end
return out
""",
)


class Step(NamedTuple):
    """One write of an `apply` (see `APPLY_LUA`): `op` (add, update, supersede, supersede+,
    delete), the index of the action it is part of, its check ("new", "live" or "current"),
    the version an update was made from and the version its action expects ("" for any),
    and the keys and arguments of its script."""

    op: str
    action: int
    check: str
    read: str
    expected: str
    keys: list[str]
    args: list[Any]
    # The memory an add writes, or an update makes (its words are counted after the batch).
    written: Record | None = None

    @classmethod
    def add(cls, action: int, ns: str, rec: Record, vector: np.ndarray, now_ms: int,
            entry: Entry) -> Step:  # fmt: skip
        return cls("add", action, "new", "", "", *add_call(ns, rec, vector, now_ms, entry), rec)

    @classmethod
    def update(cls, action: int, ns: str, old: Record, new: Record, vector: np.ndarray | None,
               now_ms: int, entry: Entry, expected: int | None = None) -> Step:  # fmt: skip
        call = update_call(ns, old, new, vector, now_ms, entry)
        return cls("update", action, "live", str(old.version), _at(expected), *call, new)

    @classmethod
    def supersede(cls, action: int, ns: str, memory_id: str, by: str, start_ms: int,
                  now_ms: int, entry: Entry, expected: int | None = None,
                  follows: bool = False, read: int | None = None) -> Step:  # fmt: skip
        """`follows`: superseded by the memory the batch's last add wrote or repeated;
        `read`: the version the caller read it at (None: any)."""
        call = supersede_call(ns, [memory_id], by, start_ms, now_ms, entry)
        op = "supersede+" if follows else "supersede"
        return cls(op, action, "current", _at(read), _at(expected), *call)

    @classmethod
    def delete(cls, action: int, ns: str, memory_id: str, now_ms: int, entry: Entry,
               history_ms: int, immutable_type: str, expected: int | None = None,
               read: int | None = None) -> Step:  # fmt: skip
        call = delete_call(ns, [memory_id], now_ms, entry, history_ms, immutable_type)
        return cls("delete", action, "live", _at(read), _at(expected), *call)


def _at(version: int | None) -> str:
    return "" if version is None else str(version)


class Batches:
    def __init__(
        self,
        client: aioredis.Redis,
        guard: Guard,
        indexes: Indexes,
        added: Added,
    ) -> None:
        self._guard = guard
        self._indexes = indexes
        self._added = added
        self._apply = client.register_script(APPLY_LUA)

    async def apply(
        self, ns: str, steps: list[Step], now_ms: int, immutable_type: str
    ) -> list[Any]:
        """Run write steps (`Step.add`, ...) in one atomic script, all or none (`APPLY_LUA`):
        each step's raw result, in order. `Refused` names the first step's action whose
        precondition failed; nothing is written then."""
        await self._indexes.get(ns)
        all_keys: list[str] = []
        head: list[Any] = [now_ms, len(steps), immutable_type]
        tail: list[Any] = []
        for step in steps:
            all_keys += step.keys
            tail += step.args
            head += [step.op, step.action, step.check, step.read, step.expected]
            head += [len(step.keys), len(step.args)]
        async with self._guard():
            out = await self._apply(keys=all_keys, args=head + tail)
        if out and out[0] in (b"refused", "refused"):
            raise Refused(int(out[1]), text(out[2]), text(out[3]))
        # An add whose script wrote nothing of its own (it returned the live memory it
        # repeats) adds no memory.
        new = [s.written for s, got in zip(steps, out, strict=True) if s.op == "add" and not got]
        self._added(ns, [rec for rec in new if rec is not None])
        updated = [s.written for s in steps if s.op == "update" and s.written is not None]
        self._added(ns, updated, new=False)
        return list(out)
