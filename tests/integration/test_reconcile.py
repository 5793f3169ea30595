"""`reconcile` (PROTOCOL.md v3): for each candidate fact, the nearest current memories in
scope and a suggested action. The hash embedder is lexical, so "similar" here means
sharing most words: enough to tell the three actions apart."""

from __future__ import annotations

import pytest

from bus import AgentMemory, MemoryBus
from bus.errors import InvalidRequest
from contracts import ReconcileFact

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")


async def test_each_fact_gets_noop_supersede_or_add_in_request_order(wf123: AgentMemory) -> None:
    known = await wf123.add("user_pref", "The user prefers dark mode in every editor")
    old = await wf123.add(
        "decision", "The team deploys the billing service on Friday afternoons after review"
    )
    other = await wf123.add("knowledge", "Kayak trips need a dry bag and a spare paddle")

    reply = await wf123.reconcile(
        [
            "the user prefers DARK mode in every   editor",  # the same, case and spaces aside
            ReconcileFact(
                content="The team deploys the billing service on Monday mornings after review",
                type="decision",
            ),
            ReconcileFact(content="Invoices are archived for seven years", type="knowledge"),
        ]
    )

    noop, supersede, add = reply.results
    assert (noop.action, noop.target) == ("noop", known.id)
    assert noop.content == "the user prefers DARK mode in every   editor"
    assert (supersede.action, supersede.target) == ("supersede", old.id)
    assert supersede.neighbours[0].id == old.id
    assert supersede.neighbours[0].type == "decision"
    assert 0.75 <= supersede.neighbours[0].similarity < 0.95
    assert (add.action, add.target) == ("add", None)
    assert len(add.neighbours) <= 3
    # Read-only: nothing was written, nothing was counted as read.
    assert (await wf123.describe()).total == 3
    (again,) = (await wf123.get([other.id])).memories
    assert again.access_count == 0  # as before this get: the reconcile counted none


async def test_a_similar_memory_of_another_type_is_not_superseded(wf123: AgentMemory) -> None:
    await wf123.add("knowledge", "The team deploys the billing service on Friday afternoons")
    reply = await wf123.reconcile(
        [
            ReconcileFact(
                content="The team deploys the billing service on Monday afternoons",
                type="decision",
            )
        ]
    )
    (result,) = reply.results
    assert result.action == "add"
    assert result.neighbours and result.neighbours[0].type == "knowledge"


async def test_superseded_memories_and_other_workflows_are_not_neighbours(
    wf123: AgentMemory, wf456: AgentMemory
) -> None:
    first = await wf123.add(
        "decision", "Postgres is the database for new services", scope="workflow"
    )
    await wf123.add(
        "decision",
        "MySQL is the database for new services",
        supersedes=[first.id],
        scope="workflow",
    )
    await wf456.add("decision", "Postgres is the database for new services", scope="workflow")

    reply = await wf123.reconcile(["Postgres is the database for new services"])

    (result,) = reply.results
    assert first.id not in [n.id for n in result.neighbours]
    assert result.action != "noop"  # the only exact copies are superseded or elsewhere


async def test_limits_and_bad_facts_are_refused(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_r")
    with pytest.raises(InvalidRequest):
        await mem.reconcile([f"fact {i}" for i in range(51)])
    with pytest.raises(InvalidRequest):
        await mem.reconcile([])
    with pytest.raises(InvalidRequest, match="Unknown memory type"):
        await mem.reconcile([ReconcileFact(content="x", type="no_such_type")])
    with pytest.raises(InvalidRequest):
        await mem.reconcile(["x"], limit=11)
    assert (await mem.reconcile(["nothing stored yet"])).results[0].action == "add"
