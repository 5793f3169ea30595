"""`apply` (PROTOCOL.md v3): up to 50 writes of one namespace, checked first and applied
atomically, all or nothing, with their events and history."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bus import AgentMemory, MemoryBus
from bus.errors import Conflict, InvalidRequest, NotFound

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")


async def _contents(mem: AgentMemory) -> set[str]:
    return {m.content for m in (await mem.list(limit=100)).memories}


async def test_every_kind_of_action_in_one_batch(wf123: AgentMemory) -> None:
    stale = await wf123.add("fact", "The team deploys on Fridays")
    typo = await wf123.add("knowledge", "Run make relase to ship")
    gone = await wf123.add("context", "scratch note")

    reply = await wf123.apply(
        [
            {"action": "add", "type": "user_pref", "content": "The user likes dark mode"},
            {"action": "supersede", "id": stale.id, "type": "fact",
             "content": "The team deploys on Mondays"},
            {"action": "update", "id": typo.id, "content": "Run make release to ship"},
            {"action": "delete", "id": gone.id},
        ]
    )  # fmt: skip

    assert [(r.index, r.action) for r in reply.results] == [
        (0, "add"),
        (1, "supersede"),
        (2, "update"),
        (3, "delete"),
    ]
    assert reply.results[2].id == typo.id and reply.results[3].id == gone.id
    assert await _contents(wf123) == {
        "The user likes dark mode",
        "The team deploys on Mondays",
        "Run make release to ship",
    }
    new_id = reply.results[1].id
    old = (await wf123.get([stale.id])).memories[0]
    assert old.superseded_by == new_id
    new = (await wf123.get([new_id])).memories[0]
    assert old.valid_until == new.created_at
    assert (await wf123.history(typo.id)).entries[-1].event == "updated"
    assert (await wf123.history(gone.id)).entries[-1].event == "deleted"
    assert (await wf123.history(stale.id)).entries[-1].event == "superseded"
    # The batch's workflow and agent are the handle's.
    added = (await wf123.get([reply.results[0].id])).memories[0]
    assert added.agent_id == "researcher"


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        ({"action": "update", "id": "01NOSUCHMEMORY0000000000000", "importance": 0.1},
         NotFound, "actions[1] (update)"),
        ({"action": "delete", "id": "01NOSUCHMEMORY0000000000000"}, NotFound, "actions[1]"),
        ({"action": "add", "type": "no_such_type", "content": "x"}, InvalidRequest, "actions[1]"),
        ({"action": "add", "type": "fact", "content": "x", "supersedes": ["a"]},
         InvalidRequest, "supersede"),
        ({"action": "add", "type": "fact", "content": "x", "metadata": {"k": "v" * 9000}},
         InvalidRequest, "actions[1] (add): `metadata`"),
        ({"action": "add", "type": "fact", "title": "t", "narrative": "a\u0000b"},
         InvalidRequest, "actions[1] (add)"),
    ],
)  # fmt: skip
async def test_one_refused_action_writes_nothing(
    wf123: AgentMemory, bad: dict[str, Any], error: type[Exception], words: str
) -> None:
    keep = await wf123.add("fact", "The build takes ten minutes")
    with pytest.raises(error) as refused:
        await wf123.apply(
            [{"action": "delete", "id": keep.id}, bad, {"action": "add", "type": "fact",
             "content": "never written"}]
        )  # fmt: skip
    assert words in str(refused.value)
    assert await _contents(wf123) == {"The build takes ten minutes"}
    assert (await wf123.history(keep.id)).entries[-1].event == "added"


async def test_two_actions_on_one_memory_are_refused(wf123: AgentMemory) -> None:
    m = await wf123.add("fact", "one")
    with pytest.raises(InvalidRequest, match=r"actions\[1\].*actions\[0\]"):
        await wf123.apply(
            [{"action": "update", "id": m.id, "importance": 0.2}, {"action": "delete", "id": m.id}]
        )


async def test_a_state_is_never_changed_by_apply(bus: MemoryBus) -> None:
    await bus.create_workspace("W", description="w", root_folder="w/", purpose="p")
    mem = bus.agent(workflow_id="wf_s", workspace="W")
    await mem.create_state(
        "S1", conversation_context="ctx", active_task="t", active_files=[], next_steps=[]
    )
    state = await mem.load_state("S1")
    with pytest.raises(InvalidRequest, match="immutable"):
        await mem.apply([{"action": "delete", "id": state.id}])
    with pytest.raises(InvalidRequest, match="immutable"):
        await mem.apply([{"action": "supersede", "id": state.id, "type": "fact", "content": "x"}])


async def test_batches_racing_for_one_memory_apply_once_each_or_not_at_all(
    wf123: AgentMemory,
) -> None:
    # Eight batches each delete the same memory and add a note: exactly one deletes it,
    # and only its note is written (the others are refused whole).
    target = await wf123.add("fact", "contested")
    outcomes = await asyncio.gather(
        *(
            wf123.apply(
                [
                    {"action": "add", "type": "fact", "content": f"note {i}"},
                    {"action": "delete", "id": target.id},
                ]
            )
            for i in range(8)
        ),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(won) == 1
    # v4: one that read the memory before it went is `conflict`; one that read after it,
    # `not_found`.
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(o, Conflict | NotFound) for o in refused)
    notes = {c for c in await _contents(wf123) if c.startswith("note")}
    assert len(notes) == 1


@pytest.mark.transports("nats")
async def test_each_write_is_announced(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_ev")
    old = await mem.add("fact", "old fact", scope="workflow")
    sub = await bus.nc.subscribe(f"mem.{bus.namespace}.events.wf_ev.>")
    await bus.nc.flush()
    await mem.apply(
        [{"action": "supersede", "id": old.id, "type": "fact", "content": "new fact",
          "scope": "workflow"},
         {"action": "add", "type": "fact", "content": "another", "scope": "workflow"}]
    )  # fmt: skip
    seen = []
    for _ in range(3):
        msg = await sub.next_msg(timeout=2)
        seen.append(json.loads(msg.data)["action"])
    assert sorted(seen) == ["added", "added", "updated"]
