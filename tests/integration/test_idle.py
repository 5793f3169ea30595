"""Forgetting by idleness (PROTOCOL.md v3 `idle_ttl_s`): a memory expires that long after its
last access, each access pushing the expiry of every key it has, never past its TTL."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import msgspec
import pytest
import redis.asyncio as aioredis

from bus import AgentMemory, MemoryBus
from bus.errors import InvalidRequest
from contracts.messages import ImportedMemory
from handlers.ops.clock import dt_to_ms
from handlers.store import keys
from handlers.store.tallies import tally_prefix

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")


def _ms() -> int:
    return time.time_ns() // 1_000_000


async def _expiry(rds: aioredis.Redis, ns: str, mid: str) -> int:
    return int(await rds.pexpiretime(keys.record_key(ns, mid)))


async def _pushed(rds: aioredis.Redis, ns: str, mid: str, past: int) -> int:
    """The memory's expiry, once a background push has moved it past `past`."""
    for _ in range(100):
        t = await _expiry(rds, ns, mid)
        if t > past:
            return t
        await asyncio.sleep(0.02)
    raise AssertionError(f"the expiry of {mid} stayed at {t}")


async def test_every_kind_of_read_pushes_the_expiry(
    wf123: AgentMemory, key_ns: str, rds: aioredis.Redis
) -> None:
    before = _ms()
    added = await wf123.add("fact", "the staging password rotates monthly", idle_ttl_s=60)
    first = await _expiry(rds, key_ns, added.id)
    assert before + 60_000 <= first <= _ms() + 60_000
    ns = key_ns
    # Every key of the memory, and the tallies' expiry set, follow the record.
    assert await rds.pexpiretime(keys.history_key(ns, added.id)) == first
    assert int(await rds.zscore(tally_prefix(ns) + "x", added.id)) == first
    got = (await wf123.get([added.id])).memories[0]
    assert got.idle_ttl_s == 60

    await asyncio.sleep(0.3)
    # A search counts its results' access right after its reply: wait for its push.
    got_push = await _expiry(rds, key_ns, added.id)
    at = _ms()
    await wf123.search("staging password")
    t1 = await _pushed(rds, key_ns, added.id, got_push)
    assert at + 60_000 <= t1 <= _ms() + 60_000
    assert int(await rds.zscore(tally_prefix(ns) + "x", added.id)) == t1
    assert await rds.pexpiretime(keys.access_key(ns, added.id)) == t1

    await asyncio.sleep(0.3)
    counted = (await wf123.get([added.id])).memories[0]
    t2 = await _expiry(rds, key_ns, added.id)
    assert t2 > t1
    # What a read reports is that expiry, after its own access.
    assert _shown(counted.expires_at) == t2

    await asyncio.sleep(0.3)
    await wf123.list()  # a list pushes the expiry without counting an access
    await _pushed(rds, key_ns, added.id, t2)
    again = (await wf123.get([added.id])).memories[0]
    assert again.access_count == counted.access_count + 1


def _shown(at: datetime | None) -> int:
    assert at is not None
    return dt_to_ms(at)


async def test_every_reply_shows_the_expiry_its_own_access_leaves(
    bus: MemoryBus, wf123: AgentMemory, key_ns: str, rds: aioredis.Redis
) -> None:
    # Each reply's `expires_at` is the key's PEXPIRETIME once the request's own access has
    # pushed it: at once for add, update and get; after the reply for those that count or
    # keep alive in the background (search, recall, list, timeline); untouched for export.
    added = await wf123.add("fact", "the staging password rotates monthly", idle_ttl_s=60)
    mid = added.id
    now = await _expiry(rds, key_ns, mid)
    assert _shown(added.expires_at) == now

    async def moved(shown: datetime | None) -> None:
        nonlocal now
        now = await _pushed(rds, key_ns, mid, now)
        assert _shown(shown) == now

    await asyncio.sleep(0.02)
    await moved((await wf123.get([mid])).memories[0].expires_at)
    await asyncio.sleep(0.02)
    await moved((await wf123.update(mid, importance=0.9)).expires_at)
    await asyncio.sleep(0.02)
    await moved((await wf123.search("staging password")).results[0].expires_at)
    await asyncio.sleep(0.02)
    await moved((await wf123.recall("staging password", session_id="s1")).results[0].expires_at)
    await asyncio.sleep(0.02)
    await moved((await wf123.list()).memories[0].expires_at)
    await asyncio.sleep(0.02)
    await moved((await wf123.timeline(mid, mode="full")).memories[0].expires_at)
    await asyncio.sleep(0.02)
    # Below full trust a get counts its access after the read, as it did before the reply.
    inner = MemoryBus(bus.nc, bus.namespace, bus.timeout, owns=False, trust="inner")
    shared = await wf123.add("fact", "shared and idle", idle_ttl_s=60, store="shared")
    await asyncio.sleep(0.02)
    seen = (await inner.agent(workflow_id="wf_123").get([shared.id])).memories[0]
    assert _shown(seen.expires_at) == await _expiry(rds, key_ns, shared.id)
    assert _shown(seen.expires_at) > _shown(shared.expires_at)
    # Neither an export nor a repeat of its content (a mention) pushes it: they show it.
    await asyncio.sleep(0.02)
    [out] = (await bus.export_page(ids=[mid])).memories
    again = await wf123.add("fact", "the staging password rotates monthly", idle_ttl_s=60)
    assert again.duplicate_of == mid
    assert _shown(out.expires_at) == _shown(again.expires_at) == await _expiry(rds, key_ns, mid)
    assert _shown(out.expires_at) == now


async def test_the_ttl_bounds_what_every_reply_shows(
    wf123: AgentMemory, key_ns: str, rds: aioredis.Redis
) -> None:
    added = await wf123.add("context", "a short-lived note", idle_ttl_s=60, ttl_s=61)
    cap = await _expiry(rds, key_ns, added.id) - 60_000 + 61_000
    await asyncio.sleep(1.2)
    got = (await wf123.get([added.id])).memories[0]
    assert _shown(got.expires_at) == cap == await _expiry(rds, key_ns, added.id)
    found = (await wf123.search("short-lived note")).results[0]
    assert _shown(found.expires_at) == cap
    listed = (await wf123.list()).memories[0]
    assert _shown(listed.expires_at) == cap
    # A plain TTL (not idle) is its record's, whatever reads it.
    plain = await wf123.add("context", "plain ttl", ttl_s=600)
    t = await _expiry(rds, key_ns, plain.id)
    assert _shown(plain.expires_at) == t
    assert _shown((await wf123.get([plain.id])).memories[0].expires_at) == t
    assert (await wf123.add("fact", "kept forever")).expires_at is None


@pytest.mark.transports("in_process")
async def test_an_idle_memory_goes_at_the_time_its_reply_showed(
    bus: MemoryBus, wf123: AgentMemory, key_ns: str, rds: aioredis.Redis
) -> None:
    # Waits out the shortest idle time (60 s): there until the time shown, gone after it.
    added = await wf123.add("context", "forgotten when unread", idle_ttl_s=60)
    await asyncio.sleep(1)
    at = _shown((await wf123.get([added.id])).memories[0].expires_at)
    await asyncio.sleep(max(0.0, (at - _ms() - 2_000) / 1000))
    asked = _ms()
    [there] = (await bus.export_page(ids=[added.id])).memories  # an export does not push it
    assert asked < at and _shown(there.expires_at) == at
    await asyncio.sleep(max(0.0, (at - _ms()) / 1000) + 0.05)
    assert not await rds.exists(keys.record_key(key_ns, added.id))
    assert (await wf123.get([added.id])).missing == [added.id]


async def test_the_ttl_is_never_extended(
    wf123: AgentMemory, key_ns: str, rds: aioredis.Redis
) -> None:
    added = await wf123.add("context", "a short-lived note", idle_ttl_s=60, ttl_s=61)
    cap = await _expiry(rds, key_ns, added.id) - 60_000 + 61_000
    await asyncio.sleep(1.2)
    await wf123.get([added.id])
    assert await _expiry(rds, key_ns, added.id) == cap
    # An update is an access too, and a new TTL moves the cap.
    await wf123.update(added.id, ttl_s=120)
    t = await _expiry(rds, key_ns, added.id)
    assert _ms() + 59_000 <= t <= _ms() + 60_000


async def test_idle_ttl_is_checked(wf123: AgentMemory) -> None:
    with pytest.raises(InvalidRequest, match="idle_ttl_s"):
        await wf123.add("fact", "x", idle_ttl_s=59)


@pytest.mark.transports("in_process")
async def test_the_indexed_expiry_moves_only_when_reads_would_pass_it(
    wf123: AgentMemory, key_ns: str, rds: aioredis.Redis
) -> None:
    # The index holds a bound a tenth of the idle time ahead: reads within it re-index
    # nothing; a read that would pass it moves it once.
    added = await wf123.add("fact", "the bound moves rarely", idle_ttl_s=60)
    rec = keys.record_key(key_ns, added.id)
    bound = int(await rds.hget(rec, "expires_at"))
    assert bound == await _expiry(rds, key_ns, added.id) + 6_000
    await asyncio.sleep(0.3)
    await wf123.get([added.id])
    assert int(await rds.hget(rec, "expires_at")) == bound
    await asyncio.sleep(6.2)
    await wf123.get([added.id])
    moved = int(await rds.hget(rec, "expires_at"))
    assert moved == await _expiry(rds, key_ns, added.id) + 6_000 > bound
    # Found by a filtered read all along.
    assert [m.id for m in (await wf123.list()).memories] == [added.id]


async def test_export_and_import_keep_it_idle(bus: MemoryBus, wf123: AgentMemory) -> None:
    added = await wf123.add("fact", "carried across", idle_ttl_s=3600)
    [exported] = (await bus.export_page(ids=[added.id])).memories
    assert exported.idle_ttl_s == 3600
    row = msgspec.to_builtins(exported)
    other = MemoryBus(bus.nc, f"{bus.namespace}b", bus.timeout, owns=False)
    await other.import_memories([msgspec.convert(row, ImportedMemory)])
    got = (await other.agent(workflow_id="wf_123").get([added.id])).memories[0]
    assert got.idle_ttl_s == 3600
    assert got.expires_at is not None and got.expires_at > datetime.now(UTC)


async def test_describe_counts_the_idle_bounded_memories_of_its_scope(
    bus: MemoryBus, wf123: AgentMemory
) -> None:
    assert (await wf123.describe()).idle_count == 0
    idle = await wf123.add("context", "scratch that goes once unread", idle_ttl_s=600)
    await wf123.add("context", "scratch with a plain ttl", ttl_s=600)
    await wf123.add("user_pref", "general and idle", idle_ttl_s=3600)
    await bus.agent(workflow_id="wf_other").add("context", "elsewhere", idle_ttl_s=600)
    seen = await wf123.describe()
    assert (seen.total, seen.idle_count) == (3, 2)
    assert (await wf123.describe(scope="workflow")).idle_count == 1
    assert (await bus.agent().describe()).idle_count == 1  # the general one
    # Reads push its expiry (a retally of the same memory): still counted once.
    await wf123.get([idle.id])
    await wf123.search("scratch")
    assert (await wf123.describe()).idle_count == 2
    await wf123.delete([idle.id])
    assert (await wf123.describe()).idle_count == 1
