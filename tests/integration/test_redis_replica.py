"""Durable writes on a Redis primary with a replica: a write is acknowledged only once the
replica has it, so the SIGKILL of the primary (its replica then promoted) loses none."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import redis.asyncio as aioredis
from test_durable import settled

from bus import MemoryBus
from contracts.subjects import DURABLE_CONSUMER, DURABLE_STREAM
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.store import keys

# Each test starts servers and handler processes of its own.
pytestmark = pytest.mark.processes

NS = "replicated"


async def linked(replica: aioredis.Redis, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (await replica.info("replication")).get("master_link_status") != "up":
        assert asyncio.get_running_loop().time() < deadline, "the replica never synced"
        await asyncio.sleep(0.1)


async def unlinked(primary: aioredis.Redis, timeout: float = 10) -> None:
    """Until the primary counts no linked replica (what misled handlers before issue 35)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while int((await primary.info("replication"))["connected_slaves"]):
        assert asyncio.get_running_loop().time() < deadline, "the replica stayed linked"
        await asyncio.sleep(0.05)


async def test_a_durable_write_is_acknowledged_once_a_replica_has_it() -> None:
    stack = EmbeddedStack.temporary()
    replica: aioredis.Redis | None = None
    try:
        stack.start_servers()
        replica_proc = stack.start_redis_replica()
        replica = aioredis.Redis.from_url(f"redis://127.0.0.1:{stack.redis_replica_port}/0")
        await linked(replica)
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": "hash"})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=60)

        async with await MemoryBus.connect(stack.nats_url, namespace=NS) as bus:
            mem = bus.agent(workflow_id="wf_r")
            js = bus.nc.jetstream()
            # The replica stopped: the write is applied on the primary, not acknowledged.
            os.kill(replica_proc.pid, signal.SIGSTOP)
            try:
                await mem.durable.add("context", "held until a replica has it", dedup="none")
                await asyncio.sleep(3)
                info = await js.consumer_info(DURABLE_STREAM, DURABLE_CONSUMER)
                assert info.num_pending + info.num_ack_pending == 1
            finally:
                os.kill(replica_proc.pid, signal.SIGCONT)
            await settled(bus)

            sent = ["held until a replica has it"]
            for i in range(30):
                content = f"replicated write {i}"
                await mem.durable.add("context", content, dedup="none")
                sent.append(content)
            await settled(bus)

        # Every acknowledged write is on the replica when the primary dies.
        stack.servers["redis"].kill()
        found = [
            await replica.hget(key, "content")
            async for key in replica.scan_iter(match=f"{keys.record_prefix(NS)}*")
        ]
        assert sorted(c.decode() for c in found if c) == sorted(sent)
    finally:
        if replica is not None:
            await replica.aclose()
        stack.stop()


async def _held_then_landed(stack: EmbeddedStack, replica: aioredis.Redis, ns: str) -> None:
    """The replica killed: durable writes wait (applied or refused, never acknowledged);
    the replica back: each lands once, on the replica too."""
    primary = aioredis.Redis.from_url(stack.redis_url)
    try:
        async with await MemoryBus.connect(stack.nats_url, namespace=ns) as bus:
            mem = bus.agent(workflow_id="wf_r")
            await linked(replica)
            stack.servers["redis-replica"].kill()
            stack.servers["redis-replica"].wait()
            await unlinked(primary)
            sent = [f"declared replica write {i}" for i in range(10)]
            for content in sent:
                await mem.durable.add("context", content, dedup="none")
            await asyncio.sleep(3)
            info = await bus.nc.jetstream().consumer_info(DURABLE_STREAM, DURABLE_CONSUMER)
            assert info.num_pending + info.num_ack_pending == len(sent)
            stack.start_redis_replica()
            await replica.connection_pool.disconnect()  # its connections died with it
            await linked(replica)
            await settled(bus, timeout=90)
            listed = await mem.list(limit=50)
            assert sorted(m.content for m in listed.memories) == sorted(sent)
        found = [
            await replica.hget(key, "content")
            async for key in replica.scan_iter(match=f"{keys.record_prefix(ns)}*")
        ]
        assert sorted(c.decode() for c in found if c) == sorted(sent)
    finally:
        await primary.aclose()


async def _with_replica(env: dict[str, str], ns: str, before: str | None = None) -> None:
    stack = EmbeddedStack.temporary()
    replica: aioredis.Redis | None = None
    try:
        stack.start_servers()
        stack.start_redis_replica()
        replica = aioredis.Redis.from_url(f"redis://127.0.0.1:{stack.redis_replica_port}/0")
        await linked(replica)
        if before is not None:
            async with aioredis.Redis.from_url(stack.redis_url) as primary:
                await primary.execute_command(*before.split())
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": "hash", **env})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=60)
        await _held_then_landed(stack, replica, ns)
    finally:
        if replica is not None:
            await replica.aclose()
        stack.stop()


async def test_a_required_replica_that_is_down_holds_durable_writes_until_it_is_back() -> None:
    # Declared by the handlers' setting: a primary with 0 replicas connected this second is
    # not taken for one that has none.
    await _with_replica({"MEMBUS_REPLICAS_REQUIRED": "1"}, "required")


async def test_a_primary_refusing_writes_for_want_of_replicas_has_them_retried() -> None:
    # Declared by the primary itself: with min-replicas-to-write it refuses writes
    # (NOREPLICAS) while its replica is down; the durable write is retried, not rejected.
    await _with_replica({}, "refused", before="CONFIG SET min-replicas-to-write 1")
