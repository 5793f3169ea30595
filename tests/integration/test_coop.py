"""`timeline` and `people`: reading memories as a conversation."""

from __future__ import annotations

import asyncio

import pytest

from bus import AgentMemory, MemoryBus, NotFound
from contracts import CompactTimelineReply, TimelineReply


@pytest.fixture
def agent(bus: MemoryBus) -> AgentMemory:
    return bus.agent(workflow_id="wf_1", agent_id="a")


async def _sequence(mem: AgentMemory, n: int) -> list[str]:
    return [(await mem.add("event", f"step {i} of the run")).id for i in range(n)]


async def test_timeline_is_the_window_around_the_anchor_oldest_first(agent: AgentMemory) -> None:
    ids = await _sequence(agent, 9)

    reply = await agent.timeline(ids[4], before=2, after=3)

    assert isinstance(reply, CompactTimelineReply)
    assert [m.id for m in reply.memories] == ids[2:8]
    assert reply.memories[reply.anchor_index].id == ids[4]
    assert reply.memories[0].preview == "step 2 of the run"


async def test_timeline_windows_at_the_edges(agent: AgentMemory) -> None:
    ids = await _sequence(agent, 4)

    first = await agent.timeline(ids[0], before=5, after=1)
    last = await agent.timeline(ids[-1], before=1, after=5)
    alone = await agent.timeline(ids[1], before=0, after=0)
    everything = await agent.timeline(ids[1], before=50, after=50)

    assert ([m.id for m in first.memories], first.anchor_index) == (ids[:2], 0)
    assert ([m.id for m in last.memories], last.anchor_index) == (ids[2:], 1)
    assert ([m.id for m in alone.memories], alone.anchor_index) == ([ids[1]], 0)
    assert [m.id for m in everything.memories] == ids


async def test_timeline_sees_only_the_callers_scope(bus: MemoryBus, agent: AgentMemory) -> None:
    mine = await agent.add("event", "mine 1")
    theirs = await bus.agent(workflow_id="wf_2").add("event", "theirs")
    general = await agent.add("fact", "a general fact")  # general by type
    later = await agent.add("event", "mine 2")

    reply = await agent.timeline(general.id, mode="full")

    assert isinstance(reply, TimelineReply)
    assert [m.id for m in reply.memories] == [mine.id, general.id, later.id]
    assert reply.memories[1].content == "a general fact"
    with pytest.raises(NotFound, match="scope"):
        await agent.timeline(theirs.id)
    workflow_only = await agent.timeline(mine.id, scope="workflow")
    assert [m.id for m in workflow_only.memories] == [mine.id, later.id]


async def test_timeline_filters_types_and_leaves_out_superseded(agent: AgentMemory) -> None:
    a = await agent.add("event", "deploy started")
    await agent.add("decision", "pause the deploy")
    old = await agent.add("event", "deploy at 50%")
    new = await agent.add("event", "deploy at 60%", supersedes=[old.id])

    events = await agent.timeline(a.id, types=["event"])
    with_old = await agent.timeline(a.id, types=["event"], include_superseded=True)

    assert [m.id for m in events.memories] == [a.id, new.id]
    assert [m.id for m in with_old.memories] == [a.id, old.id, new.id]


async def test_people_counts_the_live_memories_that_name_each(agent: AgentMemory) -> None:
    first = await agent.add("event", "met Ana", related_people=["Ana Lima"])
    await asyncio.sleep(0.005)  # distinct milliseconds: the order under test is by recency
    second = await agent.add("event", "call with ana and Bo", related_people=["ana lima", "Bo"])
    await asyncio.sleep(0.005)
    third = await agent.add("event", "Bo sent the draft", related_people=["Bo", "BO"])

    reply = await agent.people()

    assert [(p.name, p.mention_count) for p in reply.people] == [("Bo", 2), ("ana lima", 2)]
    bo, ana = reply.people
    assert bo.memory_ids == [third.id, second.id]
    assert ana.memory_ids == [second.id, first.id]
    assert bo.last_mentioned_at >= ana.last_mentioned_at
    assert [p.name for p in (await agent.people("LIM")).people] == ["ana lima"]


async def test_a_name_composed_or_decomposed_is_one_person(agent: AgentMemory) -> None:
    composed, decomposed = "Jos\u00e9", "Jose\u0301"
    first = await agent.add("event", "lunch with José", related_people=[composed])
    second = await agent.add("event", "José called", related_people=[decomposed])

    [jose] = (await agent.people()).people
    assert (jose.name, jose.mention_count) == (composed, 2)
    assert set(jose.memory_ids) == {first.id, second.id}
    assert [p.name for p in (await agent.people(decomposed)).people] == [composed]
    for name in (composed, decomposed):
        listed = await agent.list(people=[name])
        assert {m.id for m in listed.memories} == {first.id, second.id}, name


async def test_people_forgets_a_deleted_memory(agent: AgentMemory) -> None:
    only = await agent.add("event", "Cy joined", related_people=["Cy"])
    both = await agent.add("event", "Cy and Di left", related_people=["Cy", "Di"])

    await agent.delete([both.id])
    reply = await agent.people()

    assert [(p.name, p.mention_count, p.memory_ids) for p in reply.people] == [("Cy", 1, [only.id])]


async def test_people_sees_only_the_scope(bus: MemoryBus, agent: AgentMemory) -> None:
    await bus.agent(workflow_id="wf_2").add("event", "Eve in wf_2", related_people=["Eve"])
    await agent.add("fact", "Fay is the owner", related_people=["Fay"])  # general

    assert [p.name for p in (await agent.people()).people] == ["Fay"]
    assert [p.name for p in (await agent.people(scope="workflow")).people] == []
    assert (await agent.people(limit=1)).people[0].name == "Fay"
