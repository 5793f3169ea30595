"""The bus on a Redis Cluster: 3 primaries with a replica each, handlers given only the
first node's URL (see `handlers.store.cluster`).

Each namespace's keys live in one slot, so on one node; namespaces spread over the
primaries; a namespace's slot moved to another primary while it is written loses nothing;
a primary SIGKILLed under durable writes (its replica promoted) loses no acknowledged
write and applies none twice."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis.crc import key_slot
from test_durable import settled

from bus import MemoryBus
from bus.errors import Unavailable
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.store import keys

# The cluster's servers and handler processes are the module's own.
pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedStack]:
    stack = EmbeddedStack.temporary()
    stack.redis_primaries = 3
    try:
        stack.start_servers()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
async def on_cluster(cluster: EmbeddedStack) -> AsyncIterator[EmbeddedStack]:
    procs = cluster.start_handlers(2, {"MEMBUS_EMBEDDER": "hash"})
    await wait_for_handlers(cluster.nats_url, 2, procs, timeout=60)
    yield cluster


def _nodes(stack: EmbeddedStack) -> list[redis.Redis]:
    return [redis.Redis(port=port) for port in stack.redis_cluster_ports]


def _primary_of(stack: EmbeddedStack, ns: str) -> int:
    """The index (in `redis_cluster_ports`) of the primary that owns the namespace's slot."""
    slot = key_slot(keys.ns_prefix(ns).encode())
    client = redis.Redis(port=stack.redis_cluster_ports[0])
    try:
        for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return stack.redis_cluster_ports.index(int(primary[1]))
    finally:
        client.close()
    raise AssertionError(f"slot {slot} has no owner")


def _keys_by_node(stack: EmbeddedStack, ns: str) -> list[int]:
    """How many of the namespace's keys each primary holds."""
    counts = []
    for client in _nodes(stack)[: stack.redis_primaries]:
        counts.append(sum(1 for _ in client.scan_iter(match=keys.ns_prefix(ns) + "*")))
        client.close()
    return counts


async def test_namespaces_spread_over_the_primaries_each_on_one_node(
    on_cluster: EmbeddedStack,
) -> None:
    spaces = [f"spread-{i}" for i in range(12)]
    for ns in spaces:
        async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
            mem = bus.agent(workflow_id="wf_c")
            first = await mem.add("knowledge", f"the {ns} deploy window is friday")
            await mem.add("knowledge", f"the {ns} team prefers short answers")
            for mode in ("text", "vector", "hybrid"):
                found = await mem.search("deploy window friday", mode=mode, limit=5)
                assert found.results and found.results[0].id == first.id, (ns, mode)
            described = await mem.describe()
            assert described.total == 2
    homes = set()
    for ns in spaces:
        counts = _keys_by_node(on_cluster, ns)
        # Every key of the namespace on one node: the one that owns its slot.
        assert [c > 0 for c in counts].count(True) == 1, (ns, counts)
        assert counts.index(max(counts)) == _primary_of(on_cluster, ns)
        homes.add(_primary_of(on_cluster, ns))
    assert len(homes) == 3  # 12 namespaces over 3 primaries: all of them used


async def test_each_namespace_has_its_own_index_on_its_node(
    on_cluster: EmbeddedStack,
) -> None:
    # No pools on a cluster (RediSearch reads fields only of keys in its name's slot):
    # the first memory makes the namespace's own index, on the node of its slot.
    ns = "grown"
    async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
        mem = bus.agent(workflow_id="wf_g")
        first = await mem.add("knowledge", "fact number 0 about rollouts")
        node = on_cluster.redis_cluster_ports[_primary_of(on_cluster, ns)]
        client = redis.Redis(port=node)
        try:
            assert client.get(keys.tier_key(ns)) == keys.OWN_INDEX.encode()
            assert keys.index_name(ns).encode() in client.execute_command("FT._LIST")
        finally:
            client.close()
        ids = [first.id]
        ids += [
            (await mem.add("knowledge", f"fact number {i} about rollouts")).id
            for i in range(1, 150)
        ]
        found = await mem.search("fact number 7", mode="text", limit=3)
        assert ids[7] in [r.id for r in found.results]
        assert (await mem.describe()).total == 150
        listed = await mem.list(limit=200)
        assert sorted(m.id for m in listed.memories) == sorted(ids)


def _move_slot(stack: EmbeddedStack, slot: int, source: int, target: int) -> int:
    """Move one slot from primary `source` to primary `target` the way redis-cli's reshard
    does (IMPORTING / MIGRATING, MIGRATE of its keys in batches, then the new owner);
    the number of keys moved."""
    nodes = _nodes(stack)
    src, dst = nodes[source], nodes[target]
    src_id = src.execute_command("CLUSTER", "MYID").decode()
    dst_id = dst.execute_command("CLUSTER", "MYID").decode()
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    moved = 0
    while batch := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 20):
        port = stack.redis_cluster_ports[target]
        src.execute_command("MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS", *batch)
        moved += len(batch)
    for node in nodes[: stack.redis_primaries]:
        node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    for node in nodes:
        node.close()
    return moved


async def test_a_slot_moved_while_its_namespace_is_written_loses_nothing(
    on_cluster: EmbeddedStack,
) -> None:
    ns = "moving"
    async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
        mem = bus.agent(workflow_id="wf_m")
        written = [(await mem.add("context", f"before the move {i}")).id for i in range(30)]
        source = _primary_of(on_cluster, ns)
        target = (source + 1) % on_cluster.redis_primaries
        slot = key_slot(keys.ns_prefix(ns).encode())

        async def write(n: int) -> None:
            for i in range(n):
                # While a script's keys are split between the two nodes, Redis answers
                # TRYAGAIN until the move ends, and the bus `unavailable`: retry, as a
                # client does.
                for _ in range(100):
                    try:
                        written.append((await mem.add("context", f"during the move {i}")).id)
                        break
                    except Unavailable:
                        await asyncio.sleep(0.05)

        writing = asyncio.ensure_future(write(60))
        await asyncio.sleep(0.05)
        moved = await asyncio.to_thread(_move_slot, on_cluster, slot, source, target)
        await writing
        assert moved > 0
        assert _primary_of(on_cluster, ns) == target
        counts = _keys_by_node(on_cluster, ns)
        assert counts[source] == 0 and counts[target] > 0

        got = await mem.get(written)
        assert not got.missing and len(got.memories) == 90
        listed = await mem.list(limit=200)
        assert sorted(m.id for m in listed.memories) == sorted(written)
        found = await mem.search("during the move 42", mode="text", limit=3)
        assert written[30 + 42] in [r.id for r in found.results]
        assert (await mem.describe()).total == 90


async def test_a_primary_killed_under_durable_writes_loses_no_acknowledged_write(
    on_cluster: EmbeddedStack,
) -> None:
    ns = "failover"
    primary = _primary_of(on_cluster, ns)
    name = on_cluster.redis_node_name(primary)
    sent: list[str] = []
    async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
        mem = bus.agent(workflow_id="wf_f")
        for i in range(120):
            content = f"durable write {i}"
            await mem.durable.add("context", content, dedup="none")
            sent.append(content)
            if i == 40:
                on_cluster.servers[name].send_signal(signal.SIGKILL)
                on_cluster.servers[name].wait()
        await settled(bus, timeout=120)
        # Its replica took over the slots: every acknowledged write, exactly once.
        listed = await mem.list(limit=200)
        assert sorted(m.content for m in listed.memories) == sorted(sent)
        assert (await mem.describe()).total == len(sent)
    with contextlib.suppress(Exception):
        on_cluster.start_redis_node(primary)  # back, as a replica of its old replica
