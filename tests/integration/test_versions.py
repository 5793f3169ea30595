"""v4 versions and conditional writes (PROTOCOL.md "Versions and conditional writes"): every
memory carries `version`, writes that change it bump it, and `expected_version` makes a
write apply only at that version, checked and written in one atomic step."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from bus import AgentMemory, MemoryBus
from bus.errors import Conflict, NotFound
from handlers.store import keys

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")


async def _version(mem: AgentMemory, memory_id: str) -> int:
    return (await mem.get([memory_id])).memories[0].version


async def test_writes_that_change_a_memory_bump_its_version_and_reads_do_not(
    wf123: AgentMemory,
) -> None:
    added = await wf123.add("fact", "The API listens on port 8080")
    assert added.version == 1
    assert await _version(wf123, added.id) == 1
    await wf123.search("API port")  # a read counts an access, never a version
    assert await _version(wf123, added.id) == 1

    again = await wf123.add("fact", "The API listens on port 8080")  # a mention
    assert again.duplicate_of == added.id and again.version == 2
    updated = await wf123.update(added.id, importance=0.9)
    assert updated.version == 3
    assert await _version(wf123, added.id) == 3

    newer = await wf123.add("fact", "The API listens on port 9090", supersedes=[added.id])
    assert newer.superseded == [added.id]
    old = (await wf123.get([added.id])).memories[0]
    assert old.superseded_by == newer.id and old.version == 4


async def test_an_update_at_another_version_is_a_conflict_and_writes_nothing(
    wf123: AgentMemory,
) -> None:
    added = await wf123.add("fact", "Deploys happen on Fridays")
    await wf123.update(added.id, content="Deploys happen on Mondays", expected_version=1)

    with pytest.raises(Conflict) as caught:
        await wf123.update(added.id, content="Deploys happen on Sundays", expected_version=1)
    assert caught.value.id == added.id and caught.value.current_version == 2
    assert "version 2, not 1" in caught.value.message
    got = (await wf123.get([added.id])).memories[0]
    assert got.content == "Deploys happen on Mondays" and got.version == 2
    assert [e.event for e in (await wf123.history(added.id)).entries] == ["added", "updated"]


async def test_concurrent_updates_at_one_version_exactly_one_applies(wf123: AgentMemory) -> None:
    added = await wf123.add("fact", "The on-call engineer is Ana")
    names = ["Bo", "Cy", "Di", "Ed", "Flo", "Gus"]
    outcomes = await asyncio.gather(
        *(
            wf123.update(added.id, content=f"The on-call engineer is {n}", expected_version=1)
            for n in names
        ),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, Conflict)]
    assert len(won) == 1 and len(lost) == len(names) - 1
    assert won[0].version == 2
    assert all(c.current_version == 2 for c in lost)
    got = (await wf123.get([added.id])).memories[0]
    assert got.version == 2
    assert got.content == f"The on-call engineer is {names[outcomes.index(won[0])]}"


async def test_superseding_a_superseded_memory_is_a_conflict(wf123: AgentMemory) -> None:
    old = await wf123.add("fact", "The cache holds 1 GB")
    first = await wf123.add("fact", "The cache holds 2 GB", supersedes=[old.id])
    assert first.superseded == [old.id]
    before = {m.id for m in (await wf123.list(limit=100, include_superseded=True)).memories}

    with pytest.raises(Conflict) as caught:
        await wf123.add("fact", "The cache holds 4 GB", supersedes=[old.id])
    assert caught.value.id == old.id and caught.value.current_version == 2
    with pytest.raises(Conflict):
        await wf123.apply(
            [{"action": "supersede", "id": old.id, "type": "fact", "content": "It holds 8 GB"}]
        )
    # Refused whole: neither the 4 GB nor the 8 GB memory was stored.
    after = {m.id for m in (await wf123.list(limit=100, include_superseded=True)).memories}
    assert after == before
    assert (await wf123.get([old.id])).memories[0].superseded_by == first.id


async def test_concurrent_adds_superseding_one_memory_leave_one_successor(
    wf123: AgentMemory,
) -> None:
    old = await wf123.add("fact", "The build runs on 2 cores")
    outcomes = await asyncio.gather(
        *(
            wf123.add("fact", f"The build runs on {n} cores", supersedes=[old.id])
            for n in (4, 8, 16, 32, 64, 128)
        ),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(won) == 1, outcomes
    assert all(isinstance(o, Conflict) for o in outcomes if o is not won[0])
    current = (await wf123.list(limit=100)).memories
    assert [m.id for m in current] == [won[0].id]
    assert (await wf123.get([old.id])).memories[0].superseded_by == won[0].id


async def test_concurrent_apply_batches_superseding_one_memory_exactly_one_applies(
    wf123: AgentMemory,
) -> None:
    old = await wf123.add("fact", "The staging database is db-1")
    outcomes = await asyncio.gather(
        *(
            wf123.apply(
                [
                    {
                        "action": "supersede",
                        "id": old.id,
                        "type": "fact",
                        "content": f"The staging database is db-{n}",
                    }
                ]
            )
            for n in range(2, 8)
        ),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(won) == 1, outcomes
    assert sum(isinstance(o, Conflict) for o in outcomes) == 5
    current = (await wf123.list(limit=100)).memories
    assert [m.id for m in current] == [won[0].results[0].id]


@pytest.mark.parametrize("kind", ["update", "supersede", "delete"])
async def test_an_apply_action_at_another_version_refuses_the_batch(
    wf123: AgentMemory, kind: str
) -> None:
    target = await wf123.add("fact", "Backups run nightly")
    await wf123.update(target.id, importance=0.8)  # version 2
    action: dict[str, object] = {"action": kind, "id": target.id, "expected_version": 1}
    if kind == "update":
        action["importance"] = 0.1
    if kind == "supersede":
        action.update(type="fact", content="Backups run hourly")
    before = (await wf123.list(limit=100)).memories

    with pytest.raises(Conflict) as caught:
        await wf123.apply([{"action": "add", "type": "fact", "content": "A new fact"}, action])
    assert caught.value.id == target.id and caught.value.current_version == 2
    assert "actions[1]" in caught.value.message
    assert (await wf123.list(limit=100)).memories == before

    action["expected_version"] = 2
    await wf123.apply([action])
    if kind == "delete":
        assert (await wf123.get([target.id])).memories == []
    else:
        assert await _version(wf123, target.id) == 3


async def test_an_apply_whose_add_repeats_a_memory_another_action_deletes_writes_nothing(
    wf123: AgentMemory,
) -> None:
    live = await wf123.add("fact", "The office closes at six")
    with pytest.raises(Conflict) as caught:
        await wf123.apply(
            [
                {"action": "add", "type": "fact", "content": "The office closes at six"},
                {"action": "delete", "id": live.id},
            ]
        )
    assert live.id in caught.value.message and "actions[0]" in caught.value.message
    kept = (await wf123.get([live.id])).memories[0]
    assert kept.mention_count == 1 and kept.version == 1


async def test_a_memory_from_before_versions_is_version_1_and_exports_keep_versions(
    bus: MemoryBus, wf123: AgentMemory, rds: aioredis.Redis, key_ns: str
) -> None:
    added = await wf123.add("fact", "Logs are kept 30 days")
    # A memory written before v4 has no version field: it reads as 1, and its next write
    # makes it 2.
    assert await rds.hdel(keys.record_key(key_ns, added.id), "version") == 1
    assert await _version(wf123, added.id) == 1
    assert (await wf123.update(added.id, importance=0.2)).version == 2
    exported = [m async for page in bus.export() for m in page]
    assert [m.version for m in exported if m.id == added.id] == [2]


@pytest.mark.transports("nats")
async def test_events_carry_the_version_after_the_change(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_ver")
    added = await mem.add("fact", "The queue holds 100 jobs", scope="workflow")
    sub = await bus.nc.subscribe(f"mem.{bus.namespace}.events.>")
    await bus.nc.flush()
    await mem.update(added.id, importance=0.3)
    await mem.add("fact", "The queue holds 100 jobs", scope="workflow")  # a mention
    seen = [json.loads((await sub.next_msg(timeout=2)).data) for _ in range(2)]
    assert [(e["action"], e["id"], e["version"]) for e in seen] == [
        ("updated", added.id, 2),
        ("updated", added.id, 3),
    ]


@pytest.mark.parametrize("kind", ["update", "delete"])
async def test_concurrent_apply_batches_changing_one_memory_lose_nothing(
    wf123: AgentMemory, kind: str
) -> None:
    # A batch applies only if the memories it read are still at the versions read: one that
    # raced another is refused whole (conflict), one that came after it applies on top.
    target = await wf123.add("fact", "The release train leaves on Thursday")
    others = [await wf123.add("fact", f"Unrelated note {n}") for n in range(6)]

    def batch(n: int) -> list[dict[str, object]]:
        action: dict[str, object] = {"action": kind, "id": target.id}
        if kind == "update":
            action["content"] = f"The release train leaves on day {n}"
        # Each batch also touches a memory of its own: refused whole, it changes none.
        return [action, {"action": "update", "id": others[n].id, "importance": 0.05}]

    outcomes = await asyncio.gather(
        *(wf123.apply(batch(n)) for n in range(6)), return_exceptions=True
    )
    won = [n for n, o in enumerate(outcomes) if not isinstance(o, BaseException)]
    refused = (Conflict,) if kind == "update" else (Conflict, NotFound)
    assert won and all(isinstance(o, refused) for n, o in enumerate(outcomes) if n not in won)
    got = {m.id: m for m in (await wf123.get([o.id for o in others])).memories}
    assert [n for n in range(6) if got[others[n].id].importance == 0.05] == won
    if kind == "update":
        # Every batch that applied made one version: none was lost, none applied twice.
        final = (await wf123.get([target.id])).memories[0]
        assert final.version == 1 + len(won)
        assert final.content in {f"The release train leaves on day {n}" for n in won}
    else:
        assert len(won) == 1 and (await wf123.get([target.id])).memories == []
