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
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from conftest import handler_here
from redis.crc import key_slot
from test_durable import settled
from test_redis_replica import unlinked

from bus import AgentMemory, MemoryBus
from bus.errors import Unavailable
from contracts.subjects import DURABLE_CONSUMER, DURABLE_STREAM
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.service import open_redis
from handlers.store import keys
from handlers.store.placement import (
    OPEN_POOLS,
    OWN_INDEX,
    POOL_SEQUENCE,
    home_key,
    index_name,
    pool_index_name,
    tier_key,
)
from handlers.store.replicas import declared_replicas

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


def _cluster(stack: EmbeddedStack) -> contextlib.closing[redis.RedisCluster]:
    """A client of the whole cluster, closed when its `with` ends."""
    return contextlib.closing(
        redis.RedisCluster(host="127.0.0.1", port=stack.redis_cluster_ports[0])
    )


@contextlib.asynccontextmanager
async def _handler(stack: EmbeddedStack, env: dict[str, str] | None = None) -> AsyncIterator[Any]:
    """A handler's operations in this process, on the cluster (`handler_here`)."""
    client, _ = await open_redis(stack.redis_url)
    async with handler_here(stack.nats_url, stack.redis_url, client, env) as here:
        yield here


def _located(stack: EmbeddedStack, ns: str) -> str:
    """The namespace as its keys are named (`Indexes.locate`): a pooled one with its pool's
    hash tag, from its home key."""
    with _cluster(stack) as client:
        home = client.get(home_key(ns))
    assert home is not None, f"{ns} has no home"
    return ns if home == OWN_INDEX.encode() else keys.Pooled(ns, int(home))


def _primary_of(stack: EmbeddedStack, ns: str) -> int:
    """The index (in `redis_cluster_ports`) of the primary that owns the slot of the
    namespace's keys (`ns` as `_located` names it)."""
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
    """How many of the namespace's keys (`ns` as `_located` names it) each node holds, by
    index in `redis_cluster_ports`: 0 for a replica (after a failover, a primary may be any
    of them), for its copies are not where the keys live."""
    counts = []
    for client in _nodes(stack):
        try:
            if client.info("replication")["role"] != "master":
                counts.append(0)
                continue
            counts.append(sum(1 for _ in client.scan_iter(match=keys.ns_prefix(ns) + "*")))
        finally:
            client.close()
    return counts


def _on_node(stack: EmbeddedStack, ns: str) -> redis.Redis:
    """A client of the primary that holds the namespace's keys."""
    return redis.Redis(port=stack.redis_cluster_ports[_primary_of(stack, ns)])


async def test_namespaces_spread_over_the_primaries_each_on_one_node(
    on_cluster: EmbeddedStack,
) -> None:
    spaces = [f"spread-{i}" for i in range(20)]
    for ns in spaces:
        async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
            mem = bus.agent(workflow_id="wf_c")
            first = await mem.add("knowledge", f"the {ns} deploy window is friday")
            await mem.add("knowledge", f"the {ns} team prefers short answers")
            for mode in ("text", "vector", "hybrid"):
                found = await mem.search("deploy window friday", mode=mode, limit=5)
                assert found.results and found.results[0].id == first.id, (ns, mode)
                # A pool's other namespaces hold the same words: none of theirs shows.
                assert len(found.results) <= 2, (ns, mode)
            described = await mem.describe()
            assert described.total == 2
            assert len((await mem.list(limit=10)).memories) == 2
    located = [_located(on_cluster, ns) for ns in spaces]
    # Born pooled: each namespace's keys carry its pool's tag, so a pool is in one slot.
    assert all(isinstance(ns, keys.Pooled) for ns in located)
    # Consecutive new namespaces go round the open pools: a slot each.
    pools = {keys.pool_tag(ns.sequence) for ns in located if isinstance(ns, keys.Pooled)}
    assert len(pools) == len(spaces)
    primaries = set()
    for ns in located:
        counts = _keys_by_node(on_cluster, ns)
        # Every key of the namespace on one node: the one that owns its pool's slot.
        assert [c > 0 for c in counts].count(True) == 1, (ns, counts)
        assert counts.index(max(counts)) == _primary_of(on_cluster, ns)
        primaries.add(_primary_of(on_cluster, ns))
        node = _on_node(on_cluster, ns)
        try:
            tier = node.get(tier_key(ns))
            assert tier is not None and tier != OWN_INDEX.encode()
            assert pool_index_name(int(tier), True).encode() in node.execute_command("FT._LIST")
        finally:
            node.close()
    assert len(primaries) == 3  # 20 pools over 3 primaries: all of them used


async def test_namespaces_sharing_a_pool_see_only_their_own(on_cluster: EmbeddedStack) -> None:
    async def fill(ns: str) -> list[str]:
        async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
            mem = bus.agent(workflow_id="wf_p")
            return [
                (await mem.add("knowledge", f"{ns} keeps the release checklist {i}")).id
                for i in range(3)
            ]

    mine = await fill("pool-a")
    # As if OPEN_POOLS - 1 other namespaces were made in between: the next one shares.
    with _cluster(on_cluster) as plain:
        plain.incrby(POOL_SEQUENCE, OPEN_POOLS - 1)
    theirs = await fill("pool-b")
    a, b = _located(on_cluster, "pool-a"), _located(on_cluster, "pool-b")
    assert isinstance(a, keys.Pooled) and isinstance(b, keys.Pooled)
    assert keys.pool_tag(a.sequence) == keys.pool_tag(b.sequence)
    for ns, own in (("pool-a", mine), ("pool-b", theirs)):
        async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
            mem = bus.agent(workflow_id="wf_p")
            for mode in ("text", "vector", "hybrid"):
                found = await mem.search("release checklist", mode=mode, limit=10)
                assert sorted(r.id for r in found.results) == sorted(own), (ns, mode)
            assert sorted(m.id for m in (await mem.list(limit=10)).memories) == sorted(own)
            assert (await mem.describe()).total == 3


async def test_a_namespace_outgrows_its_pool_into_an_index_in_its_slot(
    on_cluster: EmbeddedStack,
) -> None:
    ns = "grown"
    async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
        mem = bus.agent(workflow_id="wf_g")
        ids = [(await mem.add("knowledge", "fact number 0 about rollouts")).id]
        located = _located(on_cluster, ns)
        assert isinstance(located, keys.Pooled)
        ids += [
            (await mem.add("knowledge", f"fact number {i} about rollouts")).id
            for i in range(1, 150)
        ]
        node = _on_node(on_cluster, located)
        try:
            # Promoted past 100 memories (in the background): its own index, same slot.
            for _ in range(300):
                if node.get(tier_key(located)) == OWN_INDEX.encode():
                    break
                await asyncio.sleep(0.1)
            assert node.get(tier_key(located)) == OWN_INDEX.encode()
            assert index_name(located).encode() in node.execute_command("FT._LIST")
        finally:
            node.close()
        found = await mem.search("fact number 7", mode="text", limit=3)
        assert ids[7] in [r.id for r in found.results]
        assert (await mem.describe()).total == 150
        listed = await mem.list(limit=200)
        assert sorted(m.id for m in listed.memories) == sorted(ids)
    counts = _keys_by_node(on_cluster, located)
    assert [c > 0 for c in counts].count(True) == 1, counts


async def test_a_namespace_from_before_homes_keeps_its_keys(on_cluster: EmbeddedStack) -> None:
    """A namespace written as on a cluster before pools (under its own tag, with no home
    key) stays there: a handler that pools new namespaces reads and writes it as it is."""
    ns = "legacy"
    async with (
        _handler(on_cluster, {"MEMBUS_POOL_MAX": "0"}) as old,
        await MemoryBus.connect(namespace=ns, nc=old) as bus,  # type: ignore[arg-type]
    ):
        mem = bus.agent(workflow_id="wf_l")
        ids = [(await mem.add("knowledge", f"legacy fact {i} on runbooks")).id for i in range(5)]
    with _cluster(on_cluster) as plain:
        assert plain.get(home_key(ns)) == OWN_INDEX.encode()
        plain.delete(home_key(ns))  # as written before homes were kept
    async with (
        _handler(on_cluster) as new,
        await MemoryBus.connect(namespace=ns, nc=new) as bus,  # type: ignore[arg-type]
    ):
        mem = bus.agent(workflow_id="wf_l")
        got = await mem.get(ids)
        assert not got.missing and len(got.memories) == 5
        ids.append((await mem.add("knowledge", "legacy fact 5 on runbooks")).id)
        found = await mem.search("legacy fact 3", mode="text", limit=3)
        assert ids[3] in [r.id for r in found.results]
        assert (await mem.describe()).total == 6
    assert _located(on_cluster, ns) == ns and not isinstance(_located(on_cluster, ns), keys.Pooled)
    counts = _keys_by_node(on_cluster, ns)
    assert [c > 0 for c in counts].count(True) == 1 and sum(counts) > 10, counts


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
        # Its keys' slot: its pool's, shared with the pool's other namespaces.
        located = _located(on_cluster, ns)
        source = _primary_of(on_cluster, located)
        target = (source + 1) % on_cluster.redis_primaries
        slot = key_slot(keys.ns_prefix(located).encode())

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
        assert _primary_of(on_cluster, located) == target
        counts = _keys_by_node(on_cluster, located)
        assert counts[source] == 0 and counts[target] > 0

        got = await mem.get(written)
        assert not got.missing and len(got.memories) == 90
        listed = await mem.list(limit=200)
        assert sorted(m.id for m in listed.memories) == sorted(written)
        found = await mem.search("during the move 42", mode="text", limit=3)
        assert written[30 + 42] in [r.id for r in found.results]
        assert (await mem.describe()).total == 90


def _replica_of(stack: EmbeddedStack, primary: int) -> int:
    """The index (in `redis_cluster_ports`) of the primary's replica, from its node table."""
    client = redis.Redis(port=stack.redis_cluster_ports[primary])
    try:
        replicas = declared_replicas(client.execute_command("CLUSTER", "NODES"))
    finally:
        client.close()
    assert replicas, f"node {primary} is no primary with a replica"
    return stack.redis_cluster_ports.index(int(replicas[0].rsplit(":", 1)[1]))


async def test_durable_writes_wait_for_a_replica_that_is_down_and_land_once_it_is_back(
    on_cluster: EmbeddedStack,
) -> None:
    """Issue 35: a primary whose replica link is gone reports 0 connected replicas; its
    writes must still wait for the replica its node table declares, not be acknowledged
    as if it had none."""
    ns = "replica-down"
    async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
        mem = bus.agent(workflow_id="wf_rd")
        await mem.describe()  # the namespace's first use decides where its keys live
        primary = _primary_of(on_cluster, _located(on_cluster, ns))
        replica = _replica_of(on_cluster, primary)
        name = on_cluster.redis_node_name(replica)
        on_cluster.servers[name].send_signal(signal.SIGKILL)
        on_cluster.servers[name].wait()
        node = aioredis.Redis(port=on_cluster.redis_cluster_ports[primary])
        try:
            await unlinked(node)
            sent = [f"held for the replica {i}" for i in range(10)]
            for content in sent:
                await mem.durable.add("context", content, dedup="none")
            await asyncio.sleep(3)
            # Applied on the primary, yet not one acknowledged: each is retried.
            info = await bus.nc.jetstream().consumer_info(DURABLE_STREAM, DURABLE_CONSUMER)
            assert info.num_pending + info.num_ack_pending == len(sent)
            assert (await mem.describe()).total == len(sent)
        finally:
            on_cluster.start_redis_node(replica)
            await node.aclose()
        await settled(bus, timeout=90)
        listed = await mem.list(limit=50)
        assert sorted(m.content for m in listed.memories) == sorted(sent)
        # The replica holds every write it was waited for.
        back = _nodes(on_cluster)[replica]
        try:
            held = [
                k for k in back.scan_iter(match=keys.record_prefix(_located(on_cluster, ns)) + "*")
            ]
            assert len(held) == len(sent)
        finally:
            back.close()


async def test_a_primary_killed_under_durable_writes_loses_no_acknowledged_write(
    on_cluster: EmbeddedStack,
) -> None:
    ns = "failover"
    sent: list[str] = []
    async with await MemoryBus.connect(on_cluster.nats_url, namespace=ns) as bus:
        mem = bus.agent(workflow_id="wf_f")
        await mem.describe()  # the namespace's first use decides where its keys live
        primary = _primary_of(on_cluster, _located(on_cluster, ns))
        name = on_cluster.redis_node_name(primary)
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


async def test_a_burst_of_first_writes_takes_one_home(on_cluster: EmbeddedStack) -> None:
    """32 concurrent first adds to a new namespace in one handler: one home, one pool
    sequence, every memory in it."""
    with _cluster(on_cluster) as plain:
        before = int(plain.get(POOL_SEQUENCE) or 0)
        async with (
            _handler(on_cluster) as here,
            await MemoryBus.connect(namespace="burst", nc=here) as bus,  # type: ignore[arg-type]
        ):
            mem = bus.agent(workflow_id="wf_b")
            added = await asyncio.gather(
                *(mem.add("context", f"burst write number {i}") for i in range(32))
            )
            listed = await mem.list(limit=50)
            assert sorted(m.id for m in listed.memories) == sorted(a.id for a in added)
        assert int(plain.get(POOL_SEQUENCE) or 0) == before + 1
    located = _located(on_cluster, "burst")
    assert isinstance(located, keys.Pooled)
    counts = _keys_by_node(on_cluster, located)
    assert [c > 0 for c in counts].count(True) == 1, counts


async def _add_retrying(mem: AgentMemory, content: str) -> str:
    for _ in range(20):
        try:
            return (await mem.add("context", content)).id
        except Unavailable:
            await asyncio.sleep(0.05)
    raise AssertionError(f"{content!r} was never added")


async def test_a_handler_holding_a_lost_home_follows_the_new_one(
    on_cluster: EmbeddedStack,
) -> None:
    """Redis loses a namespace's set-up (home, tier, meta: a flush, a node back empty)
    while a handler holds its old home; another handler sets it up anew first. The first
    handler's next write goes to the new home too (after one `unavailable`), not to the
    old place that nobody else reads."""
    ns = "rehomed"
    async with (
        _handler(on_cluster) as first,
        _handler(on_cluster) as second,
        await MemoryBus.connect(namespace=ns, nc=first) as one,  # type: ignore[arg-type]
        await MemoryBus.connect(namespace=ns, nc=second) as two,  # type: ignore[arg-type]
    ):
        mine = one.agent(workflow_id="wf_r")
        theirs = two.agent(workflow_id="wf_r")
        await mine.add("context", "written before the loss")
        old = _located(on_cluster, ns)
        with _cluster(on_cluster) as plain:
            # Lost, and other namespaces made since: the next home is another pool.
            plain.delete(home_key(ns), tier_key(old), keys.meta_key(old))
            plain.incr(POOL_SEQUENCE)
        ids = [await _add_retrying(theirs, "written by the second handler after the loss")]
        new = _located(on_cluster, ns)
        assert isinstance(old, keys.Pooled) and isinstance(new, keys.Pooled)
        assert new.sequence != old.sequence
        ids.append(await _add_retrying(mine, "written by the first handler after the loss"))
        for mem in (mine, theirs):
            listed = await mem.list(limit=10)
            assert sorted(m.id for m in listed.memories) == sorted(ids)
        assert _located(on_cluster, ns) == new and _located(on_cluster, ns).sequence == new.sequence


async def test_two_handlers_first_using_namespaces_at_once_take_one_sequence_each(
    on_cluster: EmbeddedStack,
) -> None:
    """Each new namespace, first used by two handlers at once, takes one pool sequence
    (each handler took one before: 1.5 a namespace) and is pooled."""
    spaces = [f"twice-{i}" for i in range(20)]
    with _cluster(on_cluster) as plain:
        before = int(plain.get(POOL_SEQUENCE) or 0)
        async with (
            _handler(on_cluster) as first,
            _handler(on_cluster) as second,
        ):
            for ns in spaces:
                async with (
                    await MemoryBus.connect(namespace=ns, nc=first) as one,  # type: ignore[arg-type]
                    await MemoryBus.connect(namespace=ns, nc=second) as two,  # type: ignore[arg-type]
                ):
                    await asyncio.gather(
                        one.agent().add("context", f"{ns} one"),
                        two.agent().add("context", f"{ns} two"),
                    )
                    assert (await one.agent().describe()).total == 2
        assert int(plain.get(POOL_SEQUENCE) or 0) == before + len(spaces)
        located = [_located(on_cluster, ns) for ns in spaces]
        assert all(isinstance(ns, keys.Pooled) for ns in located)
        assert len({keys.pool_tag(ns.sequence) for ns in located}) == len(spaces)  # type: ignore[attr-defined]
        for ns in located:
            assert plain.get(tier_key(ns)) != OWN_INDEX.encode()
