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
