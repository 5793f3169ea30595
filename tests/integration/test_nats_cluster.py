"""The bus on a NATS cluster of three servers: handlers on different servers serve one queue
group, the durable-write stream is replicated on all three, and a server killed under
durable writes loses no acknowledged write and applies none twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import nats
import nats.errors
import pytest
from nats.js.errors import NotFoundError, ServiceUnavailableError
from test_durable import settled

from bus import MemoryBus
from contracts.subjects import DURABLE_CONSUMER, DURABLE_STREAM, SERVICE_NAME
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.durable import cluster_size, stream_replicas

# Each test starts servers and handler processes of its own.
pytestmark = pytest.mark.processes


@pytest.fixture
async def cluster() -> AsyncIterator[EmbeddedStack]:
    stack = EmbeddedStack.temporary()
    stack.nats_nodes = 3
    try:
        stack.start_servers()
        # One handler on the first server only, one on the second only; clients use the
        # third, so every request crosses the cluster.
        procs = [
            proc
            for url in stack.nats_urls[:2]
            for proc in stack.start_handlers(1, {"MEMBUS_EMBEDDER": "hash", "MEMBUS_NATS_URL": url})
        ]
        await wait_for_handlers(stack.nats_urls[2], 2, procs, timeout=60)
        yield stack
    finally:
        stack.stop()


async def served_by_each(nats_url: str) -> list[int]:
    """Requests each handler instance answered, from micro's `$SRV.STATS`."""
    nc = await nats.connect(nats_url)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(f"$SRV.STATS.{SERVICE_NAME}", b"", reply=inbox)
        counts = []
        with pytest.raises(nats.errors.TimeoutError):
            while True:
                stats = msgspec.json.decode((await sub.next_msg(timeout=0.5)).data)
                counts.append(sum(e.get("num_requests", 0) for e in stats["endpoints"]))
        return counts
    finally:
        await nc.close()


async def stream_ready(bus: MemoryBus, timeout: float = 60) -> Any:
    """The durable stream's info once the handlers created it and its replicas elected a
    leader (a ping answers before that, on a busy machine by seconds)."""
    js = bus.nc.jetstream()
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            info = await js.stream_info(DURABLE_STREAM)
            consumer = await js.consumer_info(DURABLE_STREAM, DURABLE_CONSUMER)
            if all(
                i.cluster is not None and i.cluster.leader and len(i.cluster.replicas or []) == 2
                for i in (info, consumer)
            ):
                return info
        except (NotFoundError, ServiceUnavailableError, nats.errors.TimeoutError):
            pass
        assert asyncio.get_running_loop().time() < deadline, "the stream never came up"
        await asyncio.sleep(0.2)


def test_replicas_follow_the_cluster_up_to_three() -> None:
    assert cluster_size({}) == 1
    assert cluster_size({"connect_urls": ["a:1", "b:1", "c:1", "d:1", "e:1"]}) == 5
    # Still forming: the server has met one other so far, the handler was given three.
    assert cluster_size({"connect_urls": ["a:1", "b:1"]}, configured=3) == 3
    assert [stream_replicas(0, n) for n in (1, 2, 3, 5)] == [1, 2, 3, 3]
    assert stream_replicas(2, 5) == 2  # MEMBUS_STREAM_REPLICAS overrides


async def test_handlers_on_different_servers_serve_one_queue_group(
    cluster: EmbeddedStack,
) -> None:
    async with await MemoryBus.connect(cluster.nats_urls[2], namespace="spread") as bus:
        mem = bus.agent(workflow_id="wf_c")
        for i in range(60):
            await mem.add("knowledge", f"fact number {i} from across the cluster")
        described = await mem.describe()

    assert described.total == 60
    counts = await served_by_each(cluster.nats_urls[2])
    assert len(counts) == 2
    assert all(n >= 5 for n in counts), counts  # both took a share of the queue group


async def test_a_server_killed_under_durable_writes_loses_nothing_and_applies_once(
    cluster: EmbeddedStack,
) -> None:
    # The client lists the two servers that stay up, as a deployment lists its cluster.
    url = ",".join(cluster.nats_urls[1:])
    async with await MemoryBus.connect(url, namespace="failover") as bus:
        info = await stream_ready(bus)
        assert info.config.num_replicas == 3
        assert info.cluster is not None and len(info.cluster.replicas or []) == 2
        consumer = await bus.nc.jetstream().consumer_info(DURABLE_STREAM, DURABLE_CONSUMER)
        assert consumer.cluster is not None and len(consumer.cluster.replicas or []) == 2

        mem = bus.agent(workflow_id="wf_f")
        accepted: list[str] = []
        for i in range(120):
            if i == 40:
                # SIGKILL the first server: its handler reconnects to another server.
                cluster.servers["nats"].kill()
            content = f"durable write number {i}"
            try:
                await mem.durable.add("context", content, dedup="none")
            except Exception:  # not acknowledged: it may or may not be applied
                continue
            accepted.append(content)
        await settled(bus, timeout=90)
        listed = await mem.list(limit=200)

    stored = Counter(m.content for m in listed.memories)
    print(f"accepted {len(accepted)} of 120, stored {len(stored)}")
    assert len(accepted) >= 100, "the cluster stopped taking writes"
    assert set(accepted) <= set(stored), "an acknowledged write was lost"
    assert max(stored.values()) == 1, "a write was applied twice"
