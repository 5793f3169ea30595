"""Workspaces and the names of their states, in Redis.

A workspace is one hash (`workspace_key`, each field's value JSON) and a member of the
namespace's index (a sorted set, by creation time). A state is a memory of type `state`
(written by the record store); here is only its name's claim: the workspace's states hash
maps each name to the memory's id, and is never emptied, so a name stays taken forever. The
archived states are a set of names beside it. Checks and writes that must not race (a name
taken twice, a state in a missing workspace) are single Lua scripts.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import msgspec
import numpy as np
import redis.asyncio as aioredis

from contracts import limits
from handlers.store import keys
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


# Create a workspace unless its name is taken (check and write in one step, so two handlers
# creating one name at once leave one workspace). KEYS: the workspace, the namespace's index.
# ARGV: name, created (ms), the most workspaces a namespace may hold, then field/value pairs.
# Returns 1 (created), 0 (name taken) or -1 (the namespace is full).
def workspace_key(ns: str, name: str) -> str:
    """A workspace: a hash of its fields (each JSON). Names may hold any printable
    character; as the key's last part they need no escaping."""
    return keys.ns_prefix(ns) + f"ws:{name}"


def workspace_index(ns: str) -> str:
    """The namespace's workspace names, scored by creation time (ms)."""
    return keys.ns_prefix(ns) + "wsindex"


def states_key(ns: str, workspace: str) -> str:
    """A workspace's states: name -> JSON `{id, description}` of the state's memory. Never
    deleted, so a state's name stays taken forever."""
    return keys.ns_prefix(ns) + f"states:{workspace}"


def archived_states_key(ns: str, workspace: str) -> str:
    """The names of a workspace's archived states."""
    return keys.ns_prefix(ns) + f"sarchived:{workspace}"


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
CREATE_STATE_LUA = lua(
    FOLLOW,
    POOLED,
    TALLY,
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
)


# Archive a state: add its name to the archived set and note it in its memory's history.
# KEYS: the workspace, its states, its archived set. ARGV: name, history key prefix, the
# history entry. Returns 'no_workspace', 'missing', 'already', or the state's memory id.
ARCHIVE_STATE_LUA = lua(
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
""",
)


class StoredWorkspace(msgspec.Struct, kw_only=True):
    """A workspace as stored (times in epoch ms; `preferences` as the writer's JSON text)."""

    name: str
    description: str
    root_folder: str
    purpose: str
    workflows: list[str] = []
    key_files: list[str] = []
    preferences: str = "{}"
    is_archived: bool = False
    created_at: int
    updated_at: int


class NamedEntry(NamedTuple):
    """A workspace or state as a list shows it."""

    name: str
    description: str | None
    is_archived: bool


class StateName(msgspec.Struct):
    """What a state's name points at: its memory, and its description (for lists)."""

    id: str
    description: str | None = None


class Claimed(NamedTuple):
    """A state's name, the memory it names, and whether it is archived."""

    id: str
    is_archived: bool


_encode = msgspec.json.encode
_state_name = msgspec.json.Decoder(StateName)
_LISTED = ("name", "description", "is_archived")


def _pairs(fields: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for name, value in fields.items():
        out += [name, _encode(value)]
    return out


def _decode_workspace(raw: dict[Any, Any]) -> StoredWorkspace:
    values = {text(k): msgspec.json.decode(v) for k, v in raw.items()}
    return msgspec.convert(values, StoredWorkspace)


StateOutcome = Literal["ok", "exists", "full"]
ArchiveOutcome = Literal["missing", "already", "archived"]
_NO_WORKSPACE = "no_workspace"  # what the state scripts return for a missing workspace
_UNSET = "unset"  # ... and for a namespace Redis lost (no tier key)


class NoWorkspace(Exception):
    """A state operation named a workspace that does not exist (nothing was written)."""


class Spaces:
    """Every Redis read and write of workspaces and state names."""

    def __init__(
        self,
        client: aioredis.Redis,
        guard: Guard,
        write_with_setup: WriteWithSetup,
        added: Added,
    ) -> None:
        self.client = client
        self._guard = guard
        # Runs a record write, setting the namespace up again if Redis lost it (Store's).
        self._write_set_up = write_with_setup
        self._added = added
        self._create_workspace = client.register_script(CREATE_WORKSPACE_LUA)
        self._update_workspace = client.register_script(UPDATE_WORKSPACE_LUA)
        self._create_state = client.register_script(CREATE_STATE_LUA)
        self._archive_state = client.register_script(ARCHIVE_STATE_LUA)

    # ------------------------------------------------------------------ workspaces

    async def create_workspace(self, ns: str, ws: StoredWorkspace) -> int:
        """1: created; 0: the name is taken; -1: the namespace holds the most it may."""
        fields = msgspec.to_builtins(ws)
        args = [ws.name, ws.created_at, limits.MAX_WORKSPACES, *_pairs(fields)]
        workspace_keys = [workspace_key(ns, ws.name), workspace_index(ns)]
        async with self._guard():
            return int(await self._create_workspace(keys=workspace_keys, args=args))

    async def update_workspace(
        self, ns: str, name: str, fields: dict[str, Any], now_ms: int
    ) -> Literal["missing", "changed", "same"]:
        """Set some fields (protocol names, plain values), and `updated_at` when one of
        them changed."""
        args = [_encode(now_ms), *_pairs(fields)]
        async with self._guard():
            done = await self._update_workspace(keys=[workspace_key(ns, name)], args=args)
        return ("missing", "changed", "same")[int(done)]

    async def workspace(self, ns: str, name: str) -> StoredWorkspace | None:
        async with self._guard():
            raw = await self.client.hgetall(workspace_key(ns, name))
        return _decode_workspace(raw) if raw else None

    async def workspace_exists(self, ns: str, name: str) -> bool:
        async with self._guard():
            return bool(await self.client.exists(workspace_key(ns, name)))

    async def workspaces(self, ns: str) -> list[NamedEntry]:
        """Every workspace, oldest first."""
        async with self._guard():
            names = [text(n) for n in await self.client.zrange(workspace_index(ns), 0, -1)]
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.hmget(workspace_key(ns, name), _LISTED)
            rows = await pipe.execute() if names else []
        out = []
        for row in rows:
            if row[0] is None:
                continue
            name, description, archived = (msgspec.json.decode(v) for v in row)
            out.append(NamedEntry(name, description, bool(archived)))
        return out

    # ------------------------------------------------------------------ states

    async def create_state(
        self,
        ns: str,
        workspace: str,
        name: str,
        description: str | None,
        rec: Record,
        vector: np.ndarray,
        entry: Entry,
    ) -> StateOutcome:
        """Claim the state's name in `workspace` and write its memory `rec`, in one step."""
        fields, expires = new_hash(rec, vector)
        claim = _encode(StateName(id=rec.id, description=description))
        args: list[Any] = [name, claim, expires, _encode(entry), limits.MAX_STATES]
        for field, value in fields.items():
            args += [field, value]
        state_keys = [
            workspace_key(ns, workspace),
            states_key(ns, workspace),
            keys.record_key(ns, rec.id),
            keys.history_key(ns, rec.id),
            tally_prefix(ns),
            tier_key(ns),
        ]

        async def write() -> str:
            return text(await self._create_state(keys=state_keys, args=args))

        out = await self._write_set_up(ns, write, _UNSET)
        if out == _NO_WORKSPACE:
            raise NoWorkspace(workspace)
        if out == "ok":
            self._added(ns, [rec])
            return "ok"
        return "exists" if out == "exists" else "full"

    async def state(self, ns: str, workspace: str, name: str) -> Claimed | None:
        """The memory a state's name points at (None: no such state; `NoWorkspace`)."""
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            pipe.exists(workspace_key(ns, workspace))
            pipe.hget(states_key(ns, workspace), name)
            pipe.sismember(archived_states_key(ns, workspace), name)
            exists, raw, archived = await pipe.execute()
        if not exists:
            raise NoWorkspace(workspace)
        if raw is None:
            return None
        return Claimed(_state_name.decode(raw).id, bool(archived))

    async def states(self, ns: str, workspace: str) -> list[NamedEntry]:
        """Every state of a workspace, oldest first (`NoWorkspace`: no such workspace)."""
        async with self._guard():
            pipe = self.client.pipeline(transaction=False)
            pipe.exists(workspace_key(ns, workspace))
            pipe.hgetall(states_key(ns, workspace))
            pipe.smembers(archived_states_key(ns, workspace))
            exists, raw, archived = await pipe.execute()
        if not exists:
            raise NoWorkspace(workspace)
        gone = {text(n) for n in archived}
        named = sorted(
            ((_state_name.decode(v), text(k)) for k, v in raw.items()), key=lambda p: p[0].id
        )
        return [NamedEntry(name, s.description, name in gone) for s, name in named]

    async def archive_state(
        self, ns: str, workspace: str, name: str, entry: Entry
    ) -> tuple[ArchiveOutcome, str | None]:
        """Archive a state; the outcome, and its memory id when it was archived now."""
        state_keys = [
            workspace_key(ns, workspace),
            states_key(ns, workspace),
            archived_states_key(ns, workspace),
        ]
        async with self._guard():
            out = text(
                await self._archive_state(
                    keys=state_keys, args=[name, keys.history_prefix(ns), _encode(entry)]
                )
            )
        if out == _NO_WORKSPACE:
            raise NoWorkspace(workspace)
        if out == "missing":
            return "missing", None
        if out == "already":
            return "already", None
        return "archived", out
