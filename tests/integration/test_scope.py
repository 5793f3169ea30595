"""Scope rules end to end: auto-scoping by type, per-request scope, the MEM-V2 flow."""

from __future__ import annotations

import pytest

from bus import AgentMemory, InvalidRequest, MemoryBus


async def test_user_pref_added_in_one_workflow_is_found_from_another(
    wf123: AgentMemory, wf456: AgentMemory
) -> None:
    added = await wf123.add("user_pref", "The user prefers informal tone and first names")
    assert added.workflow_id is None  # user_pref is a general type

    hits = await wf456.search("informal tone first names", scope="both")

    assert [h.id for h in hits.results][:1] == [added.id]
    assert hits.results[0].workflow_id is None


async def test_decision_in_a_workflow_is_not_found_with_scope_general(
    wf123: AgentMemory, wf456: AgentMemory
) -> None:
    dec = await wf123.add("decision", "Use PostgreSQL for the storage layer")
    assert dec.workflow_id == "wf_123"

    general = await wf123.search("PostgreSQL storage layer", scope="general")
    other = await wf456.search("PostgreSQL storage layer", scope="both")
    own = await wf123.search("PostgreSQL storage layer", scope="workflow")

    assert dec.id not in [h.id for h in general.results]
    assert dec.id not in [h.id for h in other.results]
    assert [h.id for h in own.results] == [dec.id]


async def test_scope_override_on_add_forces_general_or_workflow(wf123: AgentMemory) -> None:
    shared = await wf123.add("decision", "Shared decision", scope="general")
    pinned = await wf123.add("user_pref", "Pinned preference", scope="workflow")

    assert shared.workflow_id is None
    assert pinned.workflow_id == "wf_123"


async def test_workflow_type_without_workflow_id_is_general_and_keeps_its_ttl(
    bus: MemoryBus,
) -> None:
    nowf = bus.agent(agent_id="loner")

    added = await nowf.add("context", "Context with no workflow")

    assert added.workflow_id is None
    assert added.expires_at is not None  # context keeps its 7-day TTL


async def test_read_scopes_cover_the_right_memories(wf123: AgentMemory, wf456: AgentMemory) -> None:
    g = await wf123.add("knowledge", "General knowledge")
    mine = await wf123.add("decision", "Workflow decision one")
    theirs = await wf456.add("decision", "Workflow decision two")

    both = {m.id for m in (await wf123.list(scope="both")).memories}
    only_wf = {m.id for m in (await wf123.list(scope="workflow")).memories}
    only_general = {m.id for m in (await wf123.list(scope="general")).memories}

    assert both == {g.id, mine.id}
    assert only_wf == {mine.id}
    assert only_general == {g.id}
    assert theirs.id not in both


async def test_workflow_scope_without_workflow_id_means_general_only(bus: MemoryBus) -> None:
    writer = bus.agent(workflow_id="wf_1")
    g = await writer.add("knowledge", "General fact")
    await writer.add("decision", "Scoped decision")
    nowf = bus.agent()

    listed = await nowf.list(scope="workflow")
    described = await nowf.describe(scope="both")

    assert [m.id for m in listed.memories] == [g.id]
    assert described.scope == "general"
    assert described.total == 1


async def test_clear_by_type_deletes_only_its_scope(wf123: AgentMemory, wf456: AgentMemory) -> None:
    await wf123.add("context", "c1")
    await wf123.add("context", "c2")
    keep = await wf456.add("context", "c3")
    general = await wf123.add("context", "c4", scope="general")

    cleared = await wf123.clear_by_type("context")

    assert cleared.deleted == 2
    left = await wf456.get([keep.id, general.id])
    assert {m.id for m in left.memories} == {keep.id, general.id}
    assert (await wf123.clear_by_type("context", scope="general")).deleted == 1


async def test_clear_by_type_without_workflow_or_general_scope_is_refused(bus: MemoryBus) -> None:
    with pytest.raises(InvalidRequest) as err:
        await bus.agent().clear_by_type("context")
    assert "workflow_id" in err.value.message
