"""`describe` reads counts the writes keep (handlers/store/tallies.py): every write, expiry
and concurrent writer must show in the next call, through one handler or several, and the
counts must equal an aggregation over the memories live at the same moment."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from inprocess import InProcess

from bus import AgentMemory, MemoryBus
from bus.errors import NotFound
from handlers.store import keys, layout
from handlers.store.filters import ReadScope, Scoped, read_filter
from handlers.store.record import Record
from handlers.store.store import Store
from handlers.store.tallies import TALLIES_COMPLETE, Overview, tally_prefix
from handlers.store.tallies.scripts import SETTLE_MAX

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")


async def _calls(rds: aioredis.Redis, command: str) -> int:
    stats = await rds.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def _aggregations(rds: aioredis.Redis) -> int:
    return await _calls(rds, "FT.AGGREGATE")


async def _searches(rds: aioredis.Redis) -> int:
    return await _calls(rds, "FT.SEARCH")


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


STORES = ("private", "shared", "social")


def _scopes() -> list[ReadScope]:
    """Every shape of scope `describe` reads: each workflow (with and without the general
    memories), the general ones, whole workspaces, in and out of a workspace, and each
    reduced set of stores."""
    shapes: list[ReadScope] = []
    for workspace in (None, "A", "B"):
        for stores in (None, ("private",), ("private", "shared"), ("shared", "social")):
            shapes.append(ReadScope(None, True, workspace, stores))
            if workspace is not None:
                shapes.append(ReadScope(None, False, workspace, stores))
            for wf in ("wf_0", "wf_1", "wf_2"):
                shapes += [ReadScope(wf, True, workspace, stores)]
                shapes += [ReadScope(wf, False, workspace, stores)]
    return shapes


async def _assert_counts_equal_aggregation(store: Store, ns: str) -> None:
    ns = await store.locate(ns)  # on the cluster, a pooled name carries its pool's tag
    for scope in _scopes():
        # As for the pages below: a memory that expires between the two reads differs
        # for a moment; a lasting difference fails.
        for _ in range(20):
            now = int(time.time() * 1000)
            kept = await store.queries.overview(ns, scope, now)
            full = Overview.of(await store.queries.aggregate(ns, read_filter(now, scope)))
            # An aggregation cannot tell idle-bounded memories (test_idle counts them).
            assert kept.idle_count is not None and full.idle_count is None
            if kept._replace(idle_count=None) == full:
                break
            await asyncio.sleep(0.1)
        assert kept._replace(idle_count=None) == full, scope


async def _assert_pages_equal_index_pages(store: Store, ns: str) -> None:
    """`list`'s scope-only pages from the tallies are the index's pages: the same total and
    the same creation times, page by page (memories created in the same millisecond may
    come in either order)."""
    ns = await store.locate(ns)
    for scope in _scopes():
        for current in (True, False):
            for offset, limit in ((0, 20), (7, 5)):
                # A memory whose expiry falls between `now` and the reads is gone from
                # Redis (so from the index and the pages) but still counted as of `now`:
                # read again with a later `now`; a lasting difference fails. The run's
                # short TTLs end dozens a second for 3 s, and a cluster handler's reads
                # are slower, so a few reads in a row can each meet one.
                for attempt in range(20):
                    now = int(time.time() * 1000)
                    kept = await store.queries.newest(
                        ns, scope, now, offset=offset, limit=limit, current=current
                    )
                    where = read_filter(now, scope, current=current)
                    full = await store.queries.page(ns, where, Record, offset=offset, limit=limit)
                    assert kept is not None
                    times = [r.created_at for r in kept.items]
                    same = kept.total == full.total
                    if (same and times == [r.created_at for r in full.items]) or attempt == 19:
                        break
                    await asyncio.sleep(0.1)
                assert kept.total == full.total, scope
                assert times == [r.created_at for r in full.items], scope


async def _mixed_run(bus: MemoryBus, seed: int) -> None:
    """Eight agents in three workflows at once: adds in every store, workspace and scope
    (some expiring within 2 s), tag and TTL updates, deletes and supersedes."""
    rng = random.Random(seed)
    await bus.create_workspace("A", description="a", root_folder="/a", purpose="p")
    await bus.create_workspace("B", description="b", root_folder="/b", purpose="p")

    async def agent_run(i: int) -> None:
        mem = bus.agent(workflow_id=f"wf_{i % 3}", agent_id=f"a{i}")
        mine: list[str] = []
        current: list[str] = []  # those of `mine` not superseded
        for j in range(30):
            roll = rng.random()
            if roll < 0.55 or not mine:
                added = await mem.add(
                    rng.choice(["knowledge", "decision", "user_pref"]),
                    f"agent {i} note {j} {rng.random()}",
                    tags=rng.sample(["red", "blue", "green", "gold"], rng.randint(0, 2)),
                    scope=rng.choice(["general", "workflow"]),
                    ttl_s=rng.choice([None, None, 1, 2]),
                    workspace=rng.choice([None, "A", "B"]),
                    store=rng.choice(STORES),
                    supersedes=[current[-1]] if current and rng.random() < 0.2 else [],
                )
                mine.append(added.id)
                # v4: a memory is superseded once (again is a conflict); it is still updated
                # and deleted below.
                current = [m for m in current if m not in added.superseded] + [added.id]
            elif roll < 0.75:
                with contextlib.suppress(NotFound):  # expired meanwhile
                    await mem.update(
                        rng.choice(mine),
                        tags=rng.sample(["red", "blue", "teal"], rng.randint(0, 2)),
                        ttl_s=rng.choice([None, 0, 1, 3]),
                    )
            else:
                gone = mine.pop(rng.randrange(len(mine)))
                await mem.delete([gone])
                current = [m for m in current if m != gone]

    await asyncio.gather(*(agent_run(i) for i in range(8)))


@pytest.mark.transports("in_process", "nats", "cluster")
async def test_counts_and_pages_equal_the_index_after_a_mixed_run_with_expiries(
    bus: MemoryBus, bus_client: InProcess | None, in_process: InProcess, ns: str
) -> None:
    # The store the writes went to: the cluster's for "cluster", else the session's Redis.
    store = (bus_client or in_process).deps.store
    await _mixed_run(bus, seed=7)
    await _assert_counts_equal_aggregation(store, ns)
    await _assert_pages_equal_index_pages(store, ns)

    await asyncio.sleep(3.1)  # the behaviour under test: every short TTL passing

    await _assert_counts_equal_aggregation(store, ns)
    await _assert_pages_equal_index_pages(store, ns)
    general = await bus.agent(workflow_id="wf_0").describe()
    assert general.total == general.general_count + general.workflow_count


@pytest.mark.transports("in_process")
async def test_describe_never_aggregates_once_counts_are_kept(
    wf123: AgentMemory, rds: aioredis.Redis
) -> None:
    calls = await _aggregations(rds)
    first = await wf123.add("knowledge", "one fact", ttl_s=1)
    await wf123.describe()
    await wf123.update(first.id, tags=["x"])
    await wf123.add("decision", "two", supersedes=[first.id])
    await asyncio.sleep(1.1)  # an expiry, settled by the next describe

    again = await wf123.describe()

    assert (again.total, again.by_type) == (1, {"decision": 1})
    assert await _aggregations(rds) == calls


@pytest.mark.transports("in_process")
async def test_a_vector_query_by_scope_alone_reads_its_size_from_the_counts(
    wf123: AgentMemory, rds: aioredis.Redis, in_process: InProcess, ns: str
) -> None:
    old = await wf123.add("knowledge", "one")
    await wf123.add("knowledge", "two", supersedes=[old.id])
    await wf123.add("knowledge", "three", scope="general")
    store = in_process.deps.store
    scope = ReadScope("wf_123", True)
    seen: list[int] = []
    policy = store.queries._policy
    choose = policy.choose

    async def recorded(ns_: str, where: str, count: Any) -> str:
        async def counted(filter_: str) -> int:
            seen.append(await count(filter_))
            return seen[-1]

        return await choose(ns_, where, counted)

    policy.choose = recorded  # type: ignore[method-assign]
    try:
        searches = await _searches(rds)
        where = read_filter(None, scope, current=True)
        chosen = await store.queries.hybrid_policy(ns, where, scoped=Scoped(scope, True))
        assert await _searches(rds) == searches  # no count query
        assert seen == [2, 3]  # the scope's current memories, then the namespace's
        assert chosen == await store.queries.hybrid_policy(ns, read_filter(None, scope), "other")
    finally:
        policy.choose = choose  # type: ignore[method-assign]


@pytest.mark.transports("in_process")
async def test_more_expiries_than_one_read_settles_are_answered_by_aggregating_meanwhile(
    bus: MemoryBus, rds: aioredis.Redis, ns: str
) -> None:
    mem = bus.agent(workflow_id="wf_many")
    await mem.add("knowledge", "stays")
    n = SETTLE_MAX + 40
    # Long enough that none expires while they are written on a loaded machine.
    ttl_s = 6
    for start in range(0, n, 50):  # within the handler's store connections
        batch = range(start, min(n, start + 50))
        await asyncio.gather(*(mem.add("knowledge", f"brief {i}", ttl_s=ttl_s) for i in batch))
    # None expired while they were written (each add settles the few that are due).
    assert await rds.zcard(tally_prefix(ns) + "x") == n
    # The behaviour under test: every short TTL passing at once.
    await asyncio.sleep(ttl_s + 0.1)
    calls = await _aggregations(rds)

    first = await mem.describe()  # settles SETTLE_MAX of them: not all
    second = await mem.describe()  # settles the rest

    assert first.total == second.total == 1
    assert await _aggregations(rds) == calls + 1
    assert (await mem.list()).total == 1
    assert await rds.zcard(tally_prefix(ns) + "x") == 0


@pytest.mark.transports("in_process")
async def test_recounting_uncounts_a_memory_deleted_without_counting(
    wf123: AgentMemory, rds: aioredis.Redis, in_process: InProcess, ns: str
) -> None:
    await wf123.add("knowledge", "alpha", tags=["red"])
    gone = await wf123.add("knowledge", "beta", tags=["blue"])
    # As an older handler deletes, beside newer ones: the record goes, its counts stay. The
    # operator then has the namespace counted again (docs/operations.md): `membus migrate`.
    await rds.delete(keys.record_key(ns, gone.id))
    assert (await wf123.describe()).total == 2
    await rds.delete(tally_prefix(ns) + TALLIES_COMPLETE)

    assert await layout.ensure(in_process.deps.store, again=True) >= 1
    assert await rds.exists(tally_prefix(ns) + TALLIES_COMPLETE)

    counted = await wf123.describe()
    assert (counted.total, counted.tags) == (1, ["red"])
    await _assert_counts_equal_aggregation(in_process.deps.store, ns)


@pytest.mark.transports("in_process", "nats", "cluster")
async def test_one_memory_written_at_once_from_everywhere_is_counted_once(
    bus: MemoryBus, in_process: InProcess, ns: str
) -> None:
    agents = [bus.agent(workflow_id="wf_0", agent_id=f"a{i}") for i in range(6)]
    target = await agents[0].add("knowledge", "contended", tags=["red"])
    other = await agents[0].add("decision", "bystander", scope="general")
    store = in_process.deps.store

    async def flip(agent: AgentMemory, i: int) -> None:
        with contextlib.suppress(NotFound):  # deleted meanwhile
            await agent.update(
                target.id, tags=[["red"], ["blue", "gold"], []][i % 3], ttl_s=[None, 0, 60][i % 3]
            )

    await asyncio.gather(*(flip(agents[i % 6], i) for i in range(60)))
    await _assert_counts_equal_aggregation(store, ns)  # as the last update left it

    async def end(agent: AgentMemory) -> None:
        await asyncio.sleep(0.01)
        await agent.add("knowledge", "replacement", supersedes=[target.id])
        await agent.delete([target.id, other.id])

    await asyncio.gather(*(flip(agents[i % 6], i) for i in range(60, 120)), end(agents[5]))

    await _assert_counts_equal_aggregation(store, ns)
    seen = await agents[0].describe()
    assert (seen.total, seen.by_type) == (1, {"knowledge": 1})
