"""`describe` serves a cached summary while it is exact: every write, expiry and concurrent
writer must show in the next call, through one handler or several."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from bus import AgentMemory, MemoryBus

pytestmark = pytest.mark.transports("in_process", "nats")


async def _aggregations(rds: aioredis.Redis) -> int:
    stats = await rds.info("commandstats")
    return int(stats.get("cmdstat_FT.AGGREGATE", {}).get("calls", 0))


async def test_every_write_shows_in_the_next_describe(wf123: AgentMemory) -> None:
    first = await wf123.add("knowledge", "alpha fact", tags=["red"])
    await wf123.add("user_pref", "prefers tea")
    before = await wf123.describe()
    assert (before.total, before.by_type) == (2, {"knowledge": 1, "user_pref": 1})

    await wf123.add("decision", "ship on friday", tags=["blue"])
    added = await wf123.describe()
    assert added.total == 3 and added.by_type["decision"] == 1
    assert added.tags == ["blue", "red"]

    await wf123.update(first.id, tags=["green"])
    updated = await wf123.describe()
    assert updated.tags == ["blue", "green"]

    await wf123.delete([first.id])
    deleted = await wf123.describe()
    assert deleted.total == 2 and "knowledge" not in deleted.by_type

    await wf123.add("user_pref", "prefers tea")  # a repeat: a mention, not a memory
    assert (await wf123.describe()).total == 2


async def test_superseding_shows_in_superseded_count_and_lists_leave_those_out(
    wf123: AgentMemory,
) -> None:
    old = await wf123.add("decision", "Keep sessions in Redis")
    await wf123.add("fact", "Sessions last 30 minutes")
    before = await wf123.describe()
    assert (before.total, before.superseded_count) == (2, 0)
    await wf123.add("decision", "Keep sessions in Postgres", supersedes=[old.id])
    after = await wf123.describe()
    assert (after.total, after.superseded_count) == (3, 1)
    assert after.by_type == {"decision": 2, "fact": 1}
    listed = await wf123.list()
    assert listed.total == after.total - after.superseded_count
    assert (await wf123.list(include_superseded=True)).total == after.total


async def test_an_expiry_shows_without_any_write(wf123: AgentMemory) -> None:
    await wf123.add("knowledge", "short lived", ttl_s=1)
    await wf123.add("knowledge", "long lived")
    assert (await wf123.describe()).total == 2

    await asyncio.sleep(1.2)  # the behaviour under test: time passing the expiry

    after = await wf123.describe()
    assert after.total == 1
    assert after.oldest == after.newest


async def test_concurrent_writers_never_leave_a_stale_summary(bus: MemoryBus) -> None:
    agents = [bus.agent(workflow_id=f"wf_{i % 3}", agent_id=f"a{i}") for i in range(6)]
    kept: list[str] = []

    async def writer(agent: AgentMemory, n: int) -> None:
        for j in range(n):
            added = await agent.add("knowledge", f"{agent.agent_id} note {j}", scope="general")
            if j % 3 == 0:
                await agent.delete([added.id])
            else:
                kept.append(added.id)

    async def reader(agent: AgentMemory) -> None:
        for _ in range(15):
            await agent.describe(scope="general")

    await asyncio.gather(*(writer(a, 12) for a in agents), *(reader(a) for a in agents[:3]))

    # Every write is acknowledged: any handler's next describe must count exactly them.
    for agent in agents:
        assert (await agent.describe(scope="general")).total == len(kept)


@pytest.mark.transports("in_process")
async def test_describe_without_changes_does_not_aggregate_again(
    wf123: AgentMemory, rds: aioredis.Redis
) -> None:
    await wf123.add("knowledge", "one fact")
    await wf123.describe()
    calls = await _aggregations(rds)

    again = await wf123.describe()

    assert again.total == 1
    assert await _aggregations(rds) == calls


@pytest.mark.transports("in_process")
async def test_a_redis_that_lost_memories_is_not_answered_from_the_cache(
    wf123: AgentMemory, rds: aioredis.Redis, ns: str
) -> None:
    gone = await wf123.add("knowledge", "lost with the data")
    await wf123.add("knowledge", "kept")
    assert (await wf123.describe()).total == 2

    # As a Redis restarted from an older snapshot: a memory and the generation gone.
    await rds.delete(f"membus:{ns}:m:{gone.id}", f"membus:{ns}:gen")

    assert (await wf123.describe()).total == 1
