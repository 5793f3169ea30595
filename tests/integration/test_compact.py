"""`compact` (PROTOCOL.md v3): keep the best N current memories of a type in scope, delete
the rest, each deletion announced and in its history with reason "compacted"."""

from __future__ import annotations

import asyncio

import pytest

from bus import AgentMemory, MemoryBus
from bus.errors import InvalidRequest, NotFound

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")


async def _ids(mem: AgentMemory, type_: str) -> set[str]:
    return {m.id for m in (await mem.list(types=[type_], limit=200)).memories}


async def test_by_importance_keeps_the_most_important_and_leaves_other_types(
    wf123: AgentMemory,
) -> None:
    added = [
        (await wf123.add("knowledge", f"note {i}", importance=i / 10, scope="workflow")).id
        for i in range(1, 7)
    ]
    other = await wf123.add("decision", "a decision stays", scope="workflow")

    reply = await wf123.compact("knowledge", keep=2, by="importance")

    assert (reply.deleted, reply.remaining) == (4, 0)
    assert await _ids(wf123, "knowledge") == set(added[-2:])
    assert await _ids(wf123, "decision") == {other.id}
    history = await wf123.history(added[0])
    assert (history.entries[-1].event, history.entries[-1].reason) == ("deleted", "compacted")
    assert (await wf123.compact("knowledge", keep=2, by="importance")).deleted == 0


async def test_by_recency_keeps_the_newest(wf123: AgentMemory) -> None:
    added = []
    for i in range(5):
        added.append((await wf123.add("todo", f"task {i}", scope="workflow")).id)
        await asyncio.sleep(0.002)  # distinct creation times
    await wf123.compact("todo", keep=3, by="recency")
    assert await _ids(wf123, "todo") == set(added[-3:])


async def test_by_accesses_keeps_the_most_read(wf123: AgentMemory) -> None:
    added = [(await wf123.add("fact", f"fact {i}", scope="workflow")).id for i in range(5)]
    for _ in range(3):
        await wf123.get([added[1], added[3]])
    await wf123.get([added[4]])

    await wf123.compact("fact", keep=3, by="accesses")

    assert await _ids(wf123, "fact") == {added[1], added[3], added[4]}


async def test_the_scope_is_the_workflow_or_the_general_memories(
    wf123: AgentMemory, wf456: AgentMemory
) -> None:
    mine = [(await wf123.add("context", f"mine {i}", scope="workflow")).id for i in range(3)]
    theirs = [(await wf456.add("context", f"theirs {i}", scope="workflow")).id for i in range(3)]
    general = [(await wf123.add("context", f"all {i}", scope="general")).id for i in range(3)]

    await wf123.compact("context", keep=1, by="recency")
    assert len(await _ids(wf123, "context") & set(mine)) == 1
    assert await _ids(wf456, "context") >= set(theirs)
    await wf123.compact("context", keep=0, by="recency", general=True)
    assert not await _ids(wf123, "context") & set(general)
    assert await _ids(wf456, "context") >= set(theirs)


@pytest.mark.transports("nats")
async def test_each_compacted_memory_is_announced(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_c")
    added = [(await mem.add("knowledge", f"k {i}", scope="workflow")).id for i in range(3)]
    sub = await bus.nc.subscribe(f"mem.{bus.namespace}.events.wf_c.>")
    await bus.nc.flush()
    await mem.compact("knowledge", keep=1, by="recency")
    seen = set()
    for _ in range(2):
        msg = await sub.next_msg(timeout=5)
        assert msg.subject.endswith(".deleted")
        seen.add(msg.data)
    assert len(seen) == 2
    assert (await mem.get(added)).missing == added[:2]
    await sub.unsubscribe()


async def test_states_and_bad_bounds_are_refused(wf123: AgentMemory) -> None:
    with pytest.raises(InvalidRequest, match="immutable"):
        await wf123.compact("state", keep=1, by="recency")
    with pytest.raises(InvalidRequest):
        await wf123.compact("knowledge", keep=-1, by="recency")
    with pytest.raises(InvalidRequest):
        await wf123.compact("knowledge", keep=1, by="size")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="Unknown memory type"):
        await wf123.compact("no_such_type", keep=1, by="recency")


async def test_an_unknown_workspace_is_not_found_as_for_add(bus: MemoryBus) -> None:
    mem = bus.agent(workspace="No such workspace")
    with pytest.raises(NotFound, match="No such workspace"):
        await mem.compact("knowledge", keep=1, by="recency")
    with pytest.raises(NotFound):
        await mem.add("knowledge", "a note")
