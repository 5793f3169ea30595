"""Events: one per changed memory on mem.<ns>.events.<scope>.<type>.<action>."""

from __future__ import annotations

import pytest

from bus import AgentMemory, BusTimeout, MemoryBus

# Events as subscribers see them: published by the handler processes, through NATS.
pytestmark = pytest.mark.transports("nats")


async def test_add_publishes_an_added_event_on_the_workflow_subject(
    bus: MemoryBus, wf123: AgentMemory, ns: str
) -> None:
    stream = await bus.subscribe("wf_123")
    added = await wf123.add("decision", "Adopt NATS for messaging", tags=["infra"])

    ev = await stream.next()

    assert stream.subject == f"mem.{ns}.events.wf_123.*.*"
    assert (ev.action, ev.id, ev.type) == ("added", added.id, "decision")
    assert (ev.workflow_id, ev.agent_id) == ("wf_123", "researcher")
    assert ev.preview == "Adopt NATS for messaging"
    await stream.close()


async def test_general_memories_publish_under_the_general_token(
    bus: MemoryBus, wf123: AgentMemory, nc
) -> None:
    sub = await nc.subscribe(f"mem.{bus.namespace}.events._general.user_pref.added")
    await wf123.add("user_pref", "Prefers dark mode")

    msg = await sub.next_msg(timeout=5)

    assert b'"workflow_id":null' in msg.data
    await sub.unsubscribe()


async def test_a_workflow_subscriber_sees_only_its_workflow(
    bus: MemoryBus, wf123: AgentMemory, wf456: AgentMemory
) -> None:
    stream = await wf456.subscribe()
    await wf123.add("decision", "not for wf_456")
    mine = await wf456.add("decision", "for wf_456")

    ev = await stream.next()

    assert ev.id == mine.id
    with pytest.raises(BusTimeout):
        await stream.next(timeout=0.3)
    await stream.close()


async def test_delete_of_three_publishes_three_deleted_events(
    bus: MemoryBus, wf123: AgentMemory
) -> None:
    ids = [(await wf123.add("decision", f"d{i}")).id for i in range(3)]
    stream = await bus.subscribe("wf_123", action="deleted")

    reply = await wf123.delete([*ids, "01NOPE"])

    seen = {(await stream.next()).id for _ in range(3)}
    assert reply.deleted == 3
    assert seen == set(ids)
    with pytest.raises(BusTimeout):
        await stream.next(timeout=0.3)
    await stream.close()


async def test_clear_by_type_publishes_one_event_per_memory(
    bus: MemoryBus, wf123: AgentMemory
) -> None:
    ids = {(await wf123.add("context", f"c{i}")).id for i in range(4)}
    stream = await bus.subscribe("wf_123", type="context", action="deleted")

    cleared = await wf123.clear_by_type("context")

    assert cleared.deleted == 4
    assert {(await stream.next()).id for _ in range(4)} == ids
    await stream.close()


async def test_reads_publish_no_events(bus: MemoryBus, wf123: AgentMemory) -> None:
    added = await wf123.add("decision", "quiet reads")
    stream = await bus.subscribe()

    await wf123.get([added.id])
    await wf123.search("quiet reads")
    await wf123.list()
    await wf123.describe()

    with pytest.raises(BusTimeout):
        await stream.next(timeout=0.3)
    await stream.close()


async def test_superseding_publishes_added_then_updated_for_the_old_memory(
    bus: MemoryBus, wf123: AgentMemory
) -> None:
    old = await wf123.add("decision", "Use PostgreSQL")
    stream = await bus.subscribe("wf_123")
    new = await wf123.add("decision", "Use MySQL", supersedes=[old.id])

    first, second = await stream.next(), await stream.next()

    assert (first.action, first.id) == ("added", new.id)
    assert (second.action, second.id, second.agent_id) == ("updated", old.id, "researcher")
    await stream.close()
