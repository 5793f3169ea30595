"""Superseded memories and a memory's history (PROTOCOL v2: `supersedes`, `history`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis

from bus import AgentMemory, MemoryBus, NotFound
from handlers.store import keys


@pytest.fixture
def planner(bus: MemoryBus) -> AgentMemory:
    return bus.agent(workflow_id="wf_1", agent_id="planner", session_id="sess-1")


async def test_a_superseded_decision_leaves_reads_until_asked_for(planner: AgentMemory) -> None:
    old = await planner.add("decision", "Use PostgreSQL for the orders database")
    new = await planner.add(
        "decision", "Use MySQL for the orders database", supersedes=[old.id, "01NOSUCH"]
    )

    found = await planner.search("orders database")
    everything = await planner.search("orders database", include_superseded=True)
    listed = await planner.list()
    all_listed = await planner.list(include_superseded=True)
    [kept] = (await planner.get([old.id])).memories

    assert (new.superseded, new.missing) == ([old.id], ["01NOSUCH"])
    assert [r.id for r in found.results] == [new.id]
    assert {r.id for r in everything.results} == {old.id, new.id}
    assert ([m.id for m in listed.memories], listed.total) == ([new.id], 1)
    assert all_listed.total == 2
    assert kept.superseded_by == new.id  # get always returns it
    [replacing] = (await planner.get([new.id])).memories
    assert kept.updated_at >= replacing.created_at  # superseding is a change


async def test_a_memory_never_supersedes_itself(planner: AgentMemory) -> None:
    first = await planner.add("decision", "Ship on Friday")
    again = await planner.add("decision", "ship on friday", supersedes=[first.id])

    assert again.duplicate_of == first.id
    assert (again.superseded, again.missing) == ([], [first.id])
    assert [r.id for r in (await planner.search("ship friday")).results] == [first.id]


async def test_semantic_dedup_does_not_fold_into_a_superseded_memory(
    planner: AgentMemory,
) -> None:
    old = await planner.add("decision", "deploy with blue green")
    await planner.add("decision", "deploy with canaries", supersedes=[old.id])

    again = await planner.add("decision", "deploy with blue green", dedup="semantic")

    assert again.duplicate_of is None  # the live one is gone from reads: a fresh memory


async def test_an_edited_superseded_memory_takes_no_dedup_key(planner: AgentMemory) -> None:
    old = await planner.add("decision", "store sessions in memcached")
    await planner.add("decision", "store sessions in redis", supersedes=[old.id])
    await planner.update(old.id, content="store sessions in sqlite")

    again = await planner.add("decision", "store sessions in sqlite")

    # A fresh, current memory: not a mention of the superseded one, which reads leave out.
    assert again.duplicate_of is None and again.id != old.id
    assert again.id in [m.id for m in (await planner.list()).memories]


async def test_history_records_add_update_repeat_supersede_and_delete(
    planner: AgentMemory, bus: MemoryBus
) -> None:
    added = await planner.add("decision", "Use PostgreSQL", tags=["db"])
    await planner.update(added.id, content="Use PostgreSQL 16", importance=0.9)
    await planner.add("decision", "use postgresql 16")  # an exact repeat: a mention
    newer = await planner.add("decision", "Use MySQL", supersedes=[added.id])
    await bus.agent(session_id="sess-2").delete([added.id])

    history = await planner.history(added.id)

    assert [e.event for e in history.entries] == [
        "added",
        "updated",
        "mentioned",
        "superseded",
        "deleted",
    ]
    added_e, updated, mentioned, superseded, deleted = history.entries
    assert (added_e.agent_id, added_e.session_id, added_e.changes) == ("planner", "sess-1", {})
    assert updated.changes["content"].old == "Use PostgreSQL"
    assert updated.changes["content"].new == "Use PostgreSQL 16"
    assert (updated.changes["importance"].old, updated.changes["importance"].new) == (0.7, 0.9)
    assert set(updated.changes) == {"content", "importance"}
    assert (mentioned.changes["mention_count"].old, mentioned.changes["mention_count"].new) == (
        1,
        2,
    )
    assert superseded.changes["superseded_by"].old is None
    assert superseded.changes["superseded_by"].new == newer.id
    assert (deleted.agent_id, deleted.session_id) == (None, "sess-2")
    times = [e.at for e in history.entries]
    assert times == sorted(times)
    assert abs(times[0] - datetime.now(UTC)) < timedelta(seconds=30)


async def test_a_near_duplicate_is_a_mention_in_the_history(planner: AgentMemory) -> None:
    first = await planner.add("decision", "cache the user profile for five minutes")
    again = await planner.add(
        "decision", "cache the user profile for five minutes please", dedup="semantic",
        dedup_threshold=0.5,
    )  # fmt: skip

    assert again.duplicate_of == first.id
    assert [e.event for e in (await planner.history(first.id)).entries] == ["added", "mentioned"]


async def test_an_update_of_ttl_shows_the_old_and_new_expiry(planner: AgentMemory) -> None:
    added = await planner.add("context", "scratch", ttl_s=3600)
    await planner.update(added.id, ttl_s=0)

    [_, updated] = (await planner.history(added.id)).entries

    assert updated.changes["expires_at"].old is not None
    assert updated.changes["expires_at"].new is None


async def test_history_of_an_unknown_id_is_not_found(planner: AgentMemory) -> None:
    with pytest.raises(NotFound, match="history"):
        await planner.history("01NOSUCHMEMORY")


async def test_history_expires_with_its_memory_and_outlives_a_delete(
    planner: AgentMemory, rds: aioredis.Redis, key_ns: str
) -> None:
    brief = await planner.add("context", "expires soon", ttl_s=600)
    kept = await planner.add("knowledge", "permanent")

    assert await rds.pexpiretime(keys.history_key(key_ns, brief.id)) == await rds.pexpiretime(
        keys.record_key(key_ns, brief.id)
    )
    assert await rds.pexpiretime(keys.history_key(key_ns, kept.id)) == -1

    await planner.delete([kept.id])

    ttl_s = await rds.ttl(keys.history_key(key_ns, kept.id))
    assert 30 * 86400 - 60 < ttl_s <= 30 * 86400
    assert [e.event for e in (await planner.history(kept.id)).entries] == ["added", "deleted"]
