"""Small namespaces share a pool index; one that outgrows it gets its own.

Isolation in a pool rests on the `pool` filter that every query carries, so these tests
check it on every read a namespace has, and that a promotion loses nothing: not the memories
written while it runs, nor the reads of a handler that has not heard of it yet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from typing import Any

import msgspec
import pytest

from contracts import (
    AddRequest,
    DescribeRequest,
    GetRequest,
    ListRequest,
    PeopleRequest,
    RecallRequest,
    SearchRequest,
    TimelineRequest,
)
from contracts.messages import ExportRequest, ImportedMemory, ImportRequest
from handlers.embed import HashEmbedder
from handlers.ops import coop, reads, transfer, writes
from handlers.ops import recall as recall_ops
from handlers.ops import search as search_ops
from handlers.ops.deps import Deps
from handlers.store import keys
from handlers.store.keys import POOL_NAMESPACES
from handlers.store.placement import OWN_INDEX, index_name, pool_index_name, tier_key
from handlers.store.schema import POOL_FIELD
from handlers.store.store import Store


def _ns() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def _deps(in_process, pool_max: int = 1000, dimension: int = 384) -> Deps:
    """A handler of its own (its own caches) on the test Redis."""
    base: Deps = in_process.deps
    store = Store(base.store.client, "hash", dimension, pool_max=pool_max)
    return dataclasses.replace(base, store=store, embedder=HashEmbedder(dimension))


async def _tier(deps: Deps, ns: str) -> str:
    return (await deps.store.client.get(tier_key(ns))).decode()


async def _add(deps: Deps, ns: str, content: str, **kw) -> str:
    reply = await writes.add(ns, AddRequest(type="knowledge", content=content, **kw), deps)
    await deps.store.settle()  # promotions run after the reply
    return reply.id


async def _in_pool(deps: Deps, ns: str) -> int:
    """How many of the namespace's memories its pool index holds."""
    pool = int(await _tier(deps, ns))
    raw = await deps.store.client.execute_command(
        "FT.SEARCH", pool_index_name(pool), f"@pool:[{pool} {pool}]", "LIMIT", 0, 0
    )
    return raw[b"total_results"] if isinstance(raw, dict) else raw[0]


async def _everything(deps: Deps, ns: str, anchor: str) -> dict[str, object]:
    """What each read of the namespace shows: ids and counts, by operation."""
    out: dict[str, object] = {}
    for mode in ("vector", "text", "hybrid"):
        reply = await search_ops.search(
            ns, SearchRequest(query="shared words", mode=mode, limit=50, scope="both"), deps
        )
        out[mode] = sorted(r.id for r in reply.results)
    listed = await reads.list_(ns, ListRequest(limit=100, workflow_id="wf-1"), deps)
    out["list"] = sorted(m.id for m in listed.memories)
    out["list_total"] = listed.total
    described = await reads.describe(ns, DescribeRequest(workflow_id="wf-1"), deps)
    out["describe"] = (described.total, described.by_type, described.tags)
    recalled = await recall_ops.recall(
        ns,
        RecallRequest(message="shared words", session_id=uuid.uuid4().hex, workflow_id="wf-1"),
        deps,
    )
    out["recall"] = sorted(m.id for m in recalled.results)
    timeline = await coop.timeline(
        ns, TimelineRequest(anchor=anchor, before=20, after=20, workflow_id="wf-1"), deps
    )
    out["timeline"] = sorted(m.id for m in timeline.memories)
    people = await coop.people(ns, PeopleRequest(workflow_id="wf-1"), deps)
    out["people"] = sorted(p.name for p in people.people)
    return out


async def test_namespaces_sharing_a_pool_never_see_each_others_memories(in_process) -> None:
    deps = _deps(in_process)
    a, b = _ns(), _ns()

    async def fill(ns: str, n: int, person: str, tag: str) -> list[str]:
        return [
            await _add(
                deps,
                ns,
                f"shared words {i} about {person}",
                workflow_id="wf-1",
                tags=[tag],
                related_people=[person],
            )
            for i in range(n)
        ]

    mine, theirs = await fill(a, 3, "Ada", "x"), await fill(b, 4, "Bob", "y")

    tier_a, tier_b = int(await _tier(deps, a)), int(await _tier(deps, b))
    assert tier_a != tier_b and tier_a % 65536 == tier_b % 65536 == 384  # one pool index
    seen_a, seen_b = await _everything(deps, a, mine[0]), await _everything(deps, b, theirs[0])

    for seen, ids, person, tag in ((seen_a, mine, "Ada", "x"), (seen_b, theirs, "Bob", "y")):
        for mode in ("vector", "text", "hybrid", "list", "timeline"):
            assert seen[mode] == sorted(ids), mode
        assert seen["recall"] and set(seen["recall"]) <= set(ids)
        assert seen["list_total"] == len(ids)
        assert seen["describe"] == (len(ids), {"knowledge": len(ids)}, [tag])
        assert seen["people"] == [person]
    # A memory's id is no key into another namespace.
    got = await reads.get(a, GetRequest(ids=theirs[:2]), deps)
    assert got.memories == [] and sorted(got.missing) == sorted(theirs[:2])


async def test_a_namespace_that_outgrows_the_pool_gets_its_own_index(in_process) -> None:
    deps, ns = _deps(in_process, pool_max=10), _ns()
    ids = [await _add(deps, ns, f"shared words note {i}", workflow_id="wf-1") for i in range(9)]
    assert await _in_pool(deps, ns) == 9
    before = await _everything(deps, ns, ids[0])

    # The first add and every 32nd count the namespace: make the 10th one a check.
    deps.store.promotions._pooled_adds[ns] = 32
    ids.append(await _add(deps, ns, "shared words note 9", workflow_id="wf-1"))

    assert await _tier(deps, ns) == OWN_INDEX
    info = await deps.store.client.execute_command("FT.INFO", index_name(ns))
    assert (
        int(info[b"num_docs"] if isinstance(info, dict) else info[info.index(b"num_docs") + 1])
        == 10
    )
    assert await _in_pool_after_promotion(deps, ns) == 0
    after = await _everything(deps, ns, ids[0])
    assert after["list"] == sorted(ids)
    assert after["vector"] == sorted(ids) and after["text"] == sorted(ids)
    assert after["describe"][0] == 10 and before["describe"][0] == 9
    # New memories go to the namespace's own index only.
    late = await _add(deps, ns, "shared words note 10", workflow_id="wf-1")
    assert not await deps.store.client.hexists(keys.record_key(ns, late), POOL_FIELD)
    listed = await reads.list_(ns, ListRequest(limit=100), deps)
    assert listed.total == 11


async def test_an_import_that_outgrows_the_pool_promotes_the_namespace(in_process) -> None:
    source, ns = _deps(in_process), _ns()
    for i in range(40):
        await _add(source, ns, f"imported note {i}")
    exported: dict[str, Any] = {}
    cursor: str | None = "0"
    while cursor is not None:
        page = await transfer.export(ns, ExportRequest(cursor=cursor), source)
        exported.update({m.id: m for m in page.memories})
        cursor = page.cursor
    as_sent = msgspec.json.encode(list(exported.values()))
    memories = msgspec.json.decode(as_sent, type=list[ImportedMemory])

    deps, target = _deps(in_process, pool_max=10), _ns()
    reply = await transfer.import_(target, ImportRequest(memories=memories), deps)
    await deps.store.settle()  # promotions run after the reply

    assert len(reply.created) == 40
    assert await _tier(deps, target) == OWN_INDEX
    listed = await reads.list_(target, ListRequest(limit=100), deps)
    assert sorted(m.id for m in listed.memories) == sorted(exported)


async def _in_pool_after_promotion(deps: Deps, ns: str) -> int:
    """Memories of the namespace still carrying a pool number (the pool indexes them)."""
    client = deps.store.client
    found = [k async for k in client.scan_iter(match=keys.record_prefix(ns) + "*")]
    return sum([await client.hexists(k, POOL_FIELD) for k in found])


async def test_a_handler_that_missed_the_promotion_reads_and_writes_the_right_index(
    in_process,
) -> None:
    promoter, stale, ns = _deps(in_process, pool_max=5), _deps(in_process, pool_max=5), _ns()
    ids = [await _add(promoter, ns, f"shared words {i}") for i in range(4)]
    # The other handler has the namespace cached as pooled.
    first = await search_ops.search(ns, SearchRequest(query="shared words", limit=50), stale)
    assert len(first.results) == 4

    assert await promoter.store.promotions.promote(ns)
    assert await _in_pool_after_promotion(promoter, ns) == 0

    # Its next reads find the pool empty of the namespace, see the tier moved, and retry.
    hits = await search_ops.search(ns, SearchRequest(query="shared words", limit=50), stale)
    assert sorted(h.id for h in hits.results) == sorted(ids)
    listed = await reads.list_(ns, ListRequest(limit=50), stale)
    assert listed.total == 4
    # Its writes read the tier in the write script itself.
    late = await _add(stale, ns, "written by the stale handler")
    assert not await stale.store.client.hexists(keys.record_key(ns, late), POOL_FIELD)
    listed = await reads.list_(ns, ListRequest(limit=50), promoter)
    assert listed.total == 5


async def test_memories_written_during_a_promotion_are_all_kept(in_process) -> None:
    deps, writer, ns = _deps(in_process, pool_max=5), _deps(in_process, pool_max=5), _ns()
    for i in range(20):
        await _add(deps, ns, f"before the move {i}")

    async def write() -> list[str]:
        return [await _add(writer, ns, f"during the move {i}") for i in range(40)]

    async def promote() -> bool:
        # As the store promotes: under the namespace's lock (the writer's own check of the
        # namespace's size may want to promote it too).
        async with deps.store.exclusive(ns, "promote", hold_s=120.0):
            return await deps.store.promotions.promote(ns)

    promoted, written = await asyncio.gather(promote(), write())

    assert promoted
    listed = await reads.list_(ns, ListRequest(limit=100), deps)
    assert listed.total == 60
    assert set(written) <= {m.id for m in listed.memories}
    assert await _in_pool_after_promotion(deps, ns) == 0
    hits = await search_ops.search(ns, SearchRequest(query="during", mode="text", limit=60), deps)
    assert sorted(h.id for h in hits.results) == sorted(written)


async def test_a_reader_during_a_promotion_sees_every_memory(in_process) -> None:
    # RediSearch builds an index by scanning the whole keyspace in the background, so an
    # index made again while readers use it answers with what it has scanned so far. Keys
    # of another prefix make that scan long enough to be caught.
    deps, reader, ns = _deps(in_process, pool_max=5), _deps(in_process, pool_max=5), _ns()
    ids = {await _add(deps, ns, f"kept through the move {i}") for i in range(30)}
    client = deps.store.client
    filler = f"filler:{ns}:"
    for start in range(0, 60_000, 5_000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, start + 5_000):
            pipe.set(f"{filler}{i}", "x")
        await pipe.execute()
    seen: list[int] = []
    done = asyncio.Event()

    async def read() -> None:
        while not done.is_set():
            listed = await reads.list_(ns, ListRequest(limit=100, tags=[]), reader)
            found = await search_ops.search(
                ns, SearchRequest(query="kept move", mode="text", limit=50), reader
            )
            seen.extend((listed.total, len(found.results)))

    async def promote() -> bool:
        try:
            async with deps.store.exclusive(ns, "promote", hold_s=120.0):
                return await deps.store.promotions.promote(ns)
        finally:
            done.set()

    try:
        promoted, _ = await asyncio.gather(promote(), read())
    finally:
        async for batch in _batches(client.scan_iter(match=f"{filler}*", count=5_000)):
            await client.delete(*batch)
    assert promoted and await _tier(deps, ns) == OWN_INDEX
    assert seen and set(seen) == {len(ids)}, sorted(set(seen))


async def _batches(keys_: Any, size: int = 5_000) -> Any:
    batch = []
    async for key in keys_:
        batch.append(key)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


async def test_pool_max_zero_gives_every_namespace_its_own_index(in_process) -> None:
    deps, ns = _deps(in_process, pool_max=0), _ns()
    mid = await _add(deps, ns, "on its own from the start")

    assert await _tier(deps, ns) == OWN_INDEX
    assert not await deps.store.client.hexists(keys.record_key(ns, mid), POOL_FIELD)
    hits = await search_ops.search(ns, SearchRequest(query="on its own"), deps)
    assert [h.id for h in hits.results] == [mid]


async def test_a_new_namespace_first_used_by_two_handlers_at_once_is_pooled(in_process) -> None:
    # The handler that lost the race for the meta must not take the new namespace for one
    # made before pools (it did for 5 of 20 here, 10 of 20 on a cluster).
    first, second = _deps(in_process), _deps(in_process)
    spaces = [_ns() for _ in range(20)]
    for ns in spaces:
        await asyncio.gather(_add(first, ns, "one"), _add(second, ns, "two"))
    tiers = [await _tier(first, ns) for ns in spaces]
    assert OWN_INDEX not in tiers, tiers
    for ns in spaces:
        listed = await reads.list_(ns, ListRequest(limit=10), second)
        assert listed.total == 2


async def test_a_namespace_redis_lost_is_set_up_again_by_its_next_write(in_process) -> None:
    deps, ns = _deps(in_process), _ns()
    await _add(deps, ns, "before the loss")
    # Redis lost the namespace's set-up (not its memories): the handler still has it cached.
    await deps.store.client.delete(tier_key(ns), keys.meta_key(ns))

    mid = await _add(deps, ns, "after the loss")

    assert int(await _tier(deps, ns)) % 65536 == 384
    hits = await search_ops.search(ns, SearchRequest(query="after the loss", mode="text"), deps)
    assert mid in [h.id for h in hits.results]


async def test_namespaces_of_different_dimensions_get_different_pools(in_process) -> None:
    small, big = _deps(in_process, dimension=16), _deps(in_process, dimension=384)
    a, b = _ns(), _ns()
    in_a = await _add(small, a, "sixteen dimensions")
    in_b = await _add(big, b, "three hundred eighty four dimensions")

    assert int(await _tier(small, a)) % 65536 == 16
    assert int(await _tier(big, b)) % 65536 == 384
    hits_a = await search_ops.search(a, SearchRequest(query="dimensions", mode="vector"), small)
    hits_b = await search_ops.search(b, SearchRequest(query="dimensions", mode="vector"), big)
    assert [h.id for h in hits_a.results] == [in_a]
    assert [h.id for h in hits_b.results] == [in_b]


async def test_a_pool_index_takes_its_vectors_in_small_blocks(in_process) -> None:
    # A dimension of its own, so a pool index of its own: with RediSearch's default block
    # of 1,024 vectors its first memory alone took 1,024 x 1,000 x 4 bytes (3.9 MB).
    deps, ns = _deps(in_process, dimension=1000), _ns()
    await _add(deps, ns, "the first memory of a new pool")
    number = int(await _tier(deps, ns))
    info = await deps.store.client.execute_command("FT.INFO", pool_index_name(number))
    size = info[b"vector_index_sz_mb"] if isinstance(info, dict) else None
    if size is None:
        size = info[info.index(b"vector_index_sz_mb") + 1]
    assert float(size) < 0.5


@pytest.mark.parametrize("name", ["a-b", "A_B", "ab"])
async def test_similar_namespace_names_stay_apart_in_a_pool(in_process, name: str) -> None:
    deps = _deps(in_process)
    suffix = uuid.uuid4().hex[:8]
    ns, other = f"{name}{suffix}", f"{name}{suffix}-x"
    mine = await _add(deps, ns, "same words everywhere")
    await _add(deps, other, "same words everywhere")

    for mode in ("vector", "text", "hybrid"):
        hits = await search_ops.search(ns, SearchRequest(query="same words", mode=mode), deps)
        assert [h.id for h in hits.results] == [mine], mode


async def test_a_dropped_pool_index_is_created_again_on_the_next_query(in_process) -> None:
    deps, ns = _deps(in_process), _ns()
    mid = await _add(deps, ns, "survives a pool index drop")
    pool = int(await _tier(deps, ns))
    await deps.store.client.execute_command("FT.DROPINDEX", pool_index_name(pool))

    hits = await search_ops.search(ns, SearchRequest(query="pool index drop", mode="text"), deps)
    described = await reads.describe(ns, DescribeRequest(), deps)

    assert [h.id for h in hits.results] == [mid]
    assert described.total == 1


async def test_a_pool_index_holds_at_most_its_share_of_namespaces(in_process) -> None:
    deps = _deps(in_process)
    spaces = [_ns() for _ in range(POOL_NAMESPACES + 1)]
    for i, ns in enumerate(spaces):
        await _add(deps, ns, f"note {i} of a crowded pool")
    numbers = [int(await _tier(deps, ns)) for ns in spaces]
    by_index: dict[str, set[int]] = {}
    for number in numbers:
        by_index.setdefault(pool_index_name(number), set()).add(number)

    assert len(by_index) >= 2  # 65 new namespaces cannot share one pool
    for name in by_index:
        # Every pool number the index holds memories of (other tests' namespaces too).
        raw = await deps.store.client.execute_command(
            "FT.AGGREGATE", name, "*", "GROUPBY", 1, "@pool", "LIMIT", 0, 1000
        )
        rows = raw[b"results"] if isinstance(raw, dict) else raw[1:]
        assert 0 < len(rows) <= POOL_NAMESPACES
    for i, ns in enumerate(spaces):  # each still finds its own memory only
        hits = await search_ops.search(ns, SearchRequest(query="crowded pool", mode="text"), deps)
        assert [h.content for h in hits.results] == [f"note {i} of a crowded pool"]


async def test_identical_memories_score_alike_in_a_pool_as_in_an_own_index(in_process) -> None:
    """BM25 in a pool: two identical memories score the same, beside a neighbour namespace
    in the same pool whose memories hold the same words many times over."""
    scores: dict[int, list[tuple[str, float | None]]] = {}
    for pool_max in (1000, 0):
        deps = _deps(in_process, pool_max=pool_max)
        while True:
            # Two namespaces set up in a row share a pool, unless that pool filled up
            # between them (other tests of the run fill pools too): then take the next two.
            neighbour, ns = _ns(), _ns()
            await deps.store.indexes.get(neighbour)
            await deps.store.indexes.get(ns)
            if not pool_max or pool_index_name(int(await _tier(deps, ns))) == pool_index_name(
                int(await _tier(deps, neighbour))
            ):
                break
        for i in range(30):
            await _add(deps, neighbour, f"migration plan {i} migration notes", dedup="none")
        twins = [await _add(deps, ns, "the migration plan was approved", dedup="none")]
        twins.append(await _add(deps, ns, "the migration plan was approved", dedup="none"))
        await _add(deps, ns, "a plan for lunch", dedup="none")
        if pool_max:  # still side by side
            assert pool_index_name(int(await _tier(deps, ns))) == pool_index_name(
                int(await _tier(deps, neighbour))
            )
        hits = await search_ops.search(
            ns, SearchRequest(query="migration plan", mode="text", limit=10), deps
        )
        got = {h.id: h.text_score for h in hits.results}
        assert got[twins[0]] == got[twins[1]] == 1.0
        scores[pool_max] = [(h.content, h.text_score) for h in hits.results]
    # The same memories in the same order, the best match (the twins) at 1.0 in both.
    assert [c for c, _ in scores[1000]] == [c for c, _ in scores[0]]


async def test_identical_memories_score_alike_whatever_the_pool_holds_before_them(
    in_process,
) -> None:
    """Identical memories, one a workflow's and one general, after a neighbour's memories
    with the same word (some in the same workflow): the query's filters reject those, and a
    word read as an OR of its forms (`migration`, `+migrat`) was then skipped onto the first
    twin with one form counted (0.77 of the other). Each form is now a clause of its own."""
    deps = _deps(in_process)
    neighbour, ns = _ns(), _ns()
    await deps.store.indexes.get(neighbour)
    while True:  # a namespace in the neighbour's pool (64 namespaces share one)
        await deps.store.indexes.get(ns)
        if pool_index_name(int(await _tier(deps, ns))) == pool_index_name(
            int(await _tier(deps, neighbour))
        ):
            break
        ns = _ns()
    for i in range(34):
        wf = "wf_123" if i % 3 == 0 else None
        kw = {"workflow_id": wf, "scope": "workflow"} if wf else {}
        await _add(deps, neighbour, f"schema migration step {i}", dedup="none", **kw)
    for i in range(20):
        await _add(deps, ns, f"general filler note {i}")
    in_wf = await writes.add(
        ns,
        AddRequest(type="context", content="pelican migration notes", workflow_id="wf_123"),
        deps,
    )
    general = await _add(deps, ns, "pelican migration notes")

    hits = await search_ops.search(
        ns,
        SearchRequest(query="pelican migration", mode="text", workflow_id="wf_123", limit=5),
        deps,
    )

    got = {h.id: h.text_score for h in hits.results}
    assert got == {in_wf.id: 1.0, general: 1.0}


async def test_a_promoted_namespace_scores_as_one_with_its_own_index_from_the_start(
    in_process,
) -> None:
    rng = random.Random(3)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
        "nu",
    ]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) for _ in range(80)]
    found = {}
    for pool_max in (20, 0):
        deps, ns = _deps(in_process, pool_max=pool_max), _ns()
        for text in texts:
            await _add(deps, ns, text, dedup="none")
        assert await _tier(deps, ns) == OWN_INDEX
        hits = await search_ops.search(
            ns, SearchRequest(query="alpha beta", mode="text", limit=20), deps
        )
        found[pool_max] = [(h.content, round(h.text_score, 9)) for h in hits.results]
    assert found[20] == found[0]
