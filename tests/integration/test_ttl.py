"""TTL: Redis itself expires memories, and no query ever shows an expired one."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from bus import AgentMemory
from handlers.store import keys


async def test_one_second_ttl_disappears_from_get_search_list_and_describe(
    wf123: AgentMemory,
) -> None:
    short = await wf123.add("knowledge", "ephemeral kiwi fact", ttl_s=1)
    keep = await wf123.add("knowledge", "lasting kiwi fact")
    assert len((await wf123.search("kiwi fact")).results) == 2

    await asyncio.sleep(1.3)  # the behaviour under test: time passing the expiry

    assert (await wf123.get([short.id])).missing == [short.id]
    assert [h.id for h in (await wf123.search("ephemeral kiwi fact")).results] == [keep.id]
    assert [m.id for m in (await wf123.list()).memories] == [keep.id]
    described = await wf123.describe()
    assert described.total == 1
    assert (await wf123.delete([short.id])).missing == [short.id]


async def test_redis_key_carries_the_expiry(
    wf123: AgentMemory, rds: aioredis.Redis, key_ns: str
) -> None:
    added = await wf123.add("context", "expires in a minute", ttl_s=60)
    await wf123.get([added.id])  # creates the access key too

    rec_ms = await rds.pexpiretime(keys.record_key(key_ns, added.id))
    acc_ms = await rds.pexpiretime(keys.access_key(key_ns, added.id))

    assert added.expires_at is not None
    assert rec_ms == int(added.expires_at.timestamp() * 1000)
    assert acc_ms == rec_ms
    assert 55_000 < rec_ms - time.time() * 1000 <= 60_000


async def test_permanent_memory_has_no_redis_expiry(
    wf123: AgentMemory, rds: aioredis.Redis, key_ns: str
) -> None:
    added = await wf123.add("context", "forever", ttl_s=0)
    assert await rds.pexpiretime(keys.record_key(key_ns, added.id)) == -1
