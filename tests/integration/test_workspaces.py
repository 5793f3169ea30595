"""Workspaces and immutable states against the real bus."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from nats.aio.client import Client as NatsClient
from nats.errors import TimeoutError as NatsTimeoutError

from bus import AgentMemory, Conflict, InvalidRequest, MemoryBus, NotFound
from contracts.subjects import request_subject

WS = {
    "description": "E-commerce platform rebuild",
    "root_folder": "projects/alpha",
    "purpose": "Rebuild legacy e-commerce platform",
}
STATE = {
    "conversation_context": "We decided on JWT tokens for auth and set up the basic structure.",
    "active_task": "Implementing token refresh logic",
    "active_files": ["src/auth/jwt.ts", "src/auth/middleware.ts"],
    "next_steps": ["Add refresh token endpoint", "Test token expiration"],
}


async def raw(bus: MemoryBus, op: str, body: dict[str, object]) -> dict[str, object]:
    """The reply exactly as it came over the wire."""
    msg = await bus.nc.request(
        request_subject(bus.namespace, op), msgspec.json.encode(body), timeout=5
    )
    return msgspec.json.decode(msg.data)


@pytest.fixture
async def alpha(bus: MemoryBus) -> AgentMemory:
    await bus.create_workspace("Project Alpha", **WS)
    return bus.agent(workflow_id="wf_1", agent_id="planner", workspace="Project Alpha")


# --------------------------------------------------------------------------- workspaces


async def test_workspace_replies_are_the_seeds_lean_ones(bus: MemoryBus) -> None:
    assert await raw(bus, "create_workspace", {"name": "Alpha", **WS}) == {"success": True}
    assert await raw(bus, "list_workspaces", {}) == {
        "success": True,
        "data": [{"name": "Alpha", "description": WS["description"]}],
    }
    loaded = await raw(bus, "load_workspace", {"name": "Alpha"})
    assert loaded["success"] is True
    data = loaded["data"]
    assert isinstance(data, dict)
    assert {k: data[k] for k in ("name", *WS)} == {"name": "Alpha", **WS}
    assert data["workflows"] == [] and data["key_files"] == [] and data["preferences"] == {}
    assert data["is_archived"] is False
    update = {"name": "Alpha", "key_files": ["README.md"], "preferences": {"style": "terse"}}
    assert await raw(bus, "update_workspace", update) == {"success": True}
    assert await raw(bus, "archive_workspace", {"name": "Alpha"}) == {"success": True}


async def test_workspace_errors_guide_recovery_word_for_word(bus: MemoryBus) -> None:
    await bus.create_workspace("Alpha", **WS)
    again = await raw(bus, "create_workspace", {"name": "Alpha", **WS})
    assert again == {
        "success": False,
        "code": "conflict",
        "error": 'Workspace "Alpha" already exists. Use list_workspaces to see existing'
        " workspaces.",
    }
    missing = 'Workspace "Beta" not found. Use list_workspaces to see available workspaces.'
    for op, body in [
        ("load_workspace", {"name": "Beta"}),
        ("update_workspace", {"name": "Beta", "purpose": "x"}),
        ("archive_workspace", {"name": "Beta"}),
        ("create_state", {"workspace": "Beta", "name": "s", **STATE}),
        ("list_states", {"workspace": "Beta"}),
        ("load_state", {"workspace": "Beta", "name": "s"}),
        ("archive_state", {"workspace": "Beta", "name": "s"}),
    ]:
        assert await raw(bus, op, body) == {
            "success": False,
            "code": "not_found",
            "error": missing,
        }, op


async def test_update_archive_and_restore_a_workspace(bus: MemoryBus) -> None:
    await bus.create_workspace("Alpha", **WS, workflows=["review PRs"])
    await bus.create_workspace("Beta", **WS)
    before = await bus.load_workspace("Alpha")

    await bus.update_workspace("Alpha", purpose="Ship v2", key_files=["api.py"])
    after = await bus.load_workspace("Alpha")
    assert (after.purpose, after.key_files) == ("Ship v2", ["api.py"])
    assert (after.description, after.workflows) == (WS["description"], ["review PRs"])
    assert after.created_at == before.created_at and after.updated_at >= before.updated_at

    await bus.archive_workspace("Alpha")
    assert [w.name for w in (await bus.list_workspaces()).data] == ["Beta"]
    listed = (await bus.list_workspaces(include_archived=True)).data
    assert [(w.name, w.is_archived) for w in listed] == [("Alpha", True), ("Beta", False)]
    assert (await bus.load_workspace("Alpha")).is_archived

    await bus.update_workspace("Alpha", is_archived=False)
    assert [w.name for w in (await bus.list_workspaces()).data] == ["Alpha", "Beta"]


async def test_workspace_names_are_exact_and_checked(bus: MemoryBus) -> None:
    await bus.create_workspace("Alpha", **WS)
    await bus.create_workspace("alpha", **WS)  # another name: names are exact
    with pytest.raises(InvalidRequest, match="without leading or trailing blanks"):
        await bus.create_workspace(" Alpha", **WS)
    with pytest.raises(InvalidRequest, match="changes nothing"):
        await bus.update_workspace("Alpha")
    reply = await raw(bus, "create_workspace", {"name": "Gamma", **WS, "colour": "red"})
    assert reply["code"] == "invalid_request" and "colour" in str(reply["error"])
    names = {w.name for w in (await bus.list_workspaces()).data}
    assert names == {"Alpha", "alpha"}


async def test_a_name_written_composed_or_decomposed_is_one_name(bus: MemoryBus) -> None:
    composed, decomposed = "Caf\u00e9", "Cafe\u0301"
    await bus.create_workspace(decomposed, **WS)
    with pytest.raises(Conflict, match="already exists"):
        await bus.create_workspace(composed, **WS)
    assert (await bus.load_workspace(composed)).name == composed
    assert [w.name for w in (await bus.list_workspaces()).data] == [composed]

    mem, other = bus.agent(workspace=decomposed), bus.agent(workspace=composed)
    await other.create_state("R\u00e9sum\u00e9", **STATE)
    with pytest.raises(Conflict):
        await mem.create_state("Re\u0301sume\u0301", **STATE)
    state = await mem.load_state("Re\u0301sume\u0301")
    assert (state.workspace, state.name) == (composed, "R\u00e9sum\u00e9")
    added = await mem.add("knowledge", "the espresso machine is on floor two")
    found = await other.list(types=["knowledge"])
    assert [m.id for m in found.memories] == [added.id]


# --------------------------------------------------------------------------- states


async def test_save_a_state_in_one_session_and_load_it_in_another(
    bus: MemoryBus, alpha: AgentMemory
) -> None:
    first = bus.agent(agent_id="planner", workspace="Project Alpha", session_id="session-1")
    reply = await raw(
        bus,
        "create_state",
        {
            "workspace": "Project Alpha",
            "name": "Auth Module Progress",
            **STATE,
            "tags": ["auth", "In-Progress"],
            "context": {"session_id": "session-1"},
        },
    )
    assert reply == {"success": True}

    later = bus.agent(agent_id="coder", workspace="Project Alpha", session_id="session-2")
    state = await later.load_state("Auth Module Progress")
    assert (state.name, state.workspace) == ("Auth Module Progress", "Project Alpha")
    assert state.conversation_context == STATE["conversation_context"]
    assert state.active_task == STATE["active_task"]
    assert state.active_files == STATE["active_files"]
    assert state.next_steps == STATE["next_steps"]
    assert state.tags == ["auth", "in-progress"] and state.is_archived is False
    assert state.session_id == "session-1"
    assert first.workspace == later.workspace

    # The state is a memory of type `state` in its workspace, and searchable as one.
    [memory] = (await later.get([state.id])).memories
    assert (memory.type, memory.workspace, memory.title) == (
        "state",
        "Project Alpha",
        "Auth Module Progress",
    )
    assert memory.workflow_id is None and memory.importance == 0.9 and memory.expires_at is None
    hits = await later.search("token refresh", types=["state", "trace"])
    assert [h.id for h in hits.results] == [state.id]
    assert (await later.history(state.id)).entries[0].event == "added"


async def test_state_names_are_unique_forever_and_archive_hides_them(
    bus: MemoryBus, alpha: AgentMemory
) -> None:
    await alpha.create_state("Goals", **STATE, description="What we aim for")
    await alpha.create_state("Goals-v2", **STATE)
    assert await raw(
        bus, "create_state", {"workspace": "Project Alpha", "name": "Goals", **STATE}
    ) == {
        "success": False,
        "code": "conflict",
        "error": 'State "Goals" already exists. States are immutable - use a unique name'
        ' like "Goals-v2" or "Goals-2024-01".',
    }
    listed = (await alpha.list_states()).data
    assert [(s.name, s.description) for s in listed] == [
        ("Goals", "What we aim for"),
        ("Goals-v2", None),
    ]

    assert await raw(bus, "archive_state", {"workspace": "Project Alpha", "name": "Goals"}) == {
        "success": True
    }
    await alpha.archive_state("Goals")  # archiving twice is no error
    assert [s.name for s in (await alpha.list_states()).data] == ["Goals-v2"]
    everything = (await alpha.list_states(include_archived=True)).data
    assert [(s.name, s.is_archived) for s in everything] == [
        ("Goals", True),
        ("Goals-v2", False),
    ]
    archived = await alpha.load_state("Goals")  # archived, not gone
    assert archived.is_archived and archived.description == "What we aim for"
    with pytest.raises(Conflict):  # the name stays taken, archived or not
        await alpha.create_state("Goals", **STATE)
    history = (await alpha.history(archived.id)).entries
    assert [e.event for e in history] == ["added", "updated"]
    assert history[1].changes["is_archived"].new is True

    missing = 'State "Nope" not found. Use list_states to see available states.'
    for op in ("load_state", "archive_state"):
        reply = await raw(bus, op, {"workspace": "Project Alpha", "name": "Nope"})
        assert reply == {"success": False, "code": "not_found", "error": missing}


async def test_states_are_per_workspace(bus: MemoryBus, alpha: AgentMemory) -> None:
    await bus.create_workspace("Beta", **WS)
    beta = bus.agent(workspace="Beta")
    await alpha.create_state("Checkpoint", **STATE)
    await beta.create_state("Checkpoint", **{**STATE, "active_task": "Beta's task"})
    assert (await alpha.load_state("Checkpoint")).active_task == STATE["active_task"]
    assert (await beta.load_state("Checkpoint")).active_task == "Beta's task"
    assert (await alpha.load_state("Checkpoint", workspace="Beta")).active_task == "Beta's task"


async def test_states_are_immutable(bus: MemoryBus, alpha: AgentMemory) -> None:
    await alpha.create_state("Frozen", **STATE)
    state = await alpha.load_state("Frozen")
    other = await alpha.add("decision", "Use JWT", workspace="Project Alpha")

    for call in (
        alpha.update(state.id, content="changed"),
        alpha.add("decision", "Newer plan", supersedes=[state.id]),
        alpha.delete([other.id, state.id]),
        bus.agent().clear_by_type("state", scope="general"),
    ):
        with pytest.raises(InvalidRequest, match="immutable") as err:
            await call
        assert "archive_state" in str(err.value)
    # Nothing half-done: the batch that named a state deleted nothing.
    got = await alpha.get([state.id, other.id])
    assert [m.id for m in got.memories] == [state.id, other.id]
    assert got.memories[0].superseded_by is None
    decisions = (await alpha.list(types=["decision"])).memories
    assert [m.content for m in decisions] == ["Use JWT"]  # the refused add wrote nothing
    with pytest.raises(InvalidRequest, match="create_state"):
        await alpha.add("state", "a state made by hand")


async def test_create_state_checks_its_fields(bus: MemoryBus, alpha: AgentMemory) -> None:
    reply = await raw(bus, "create_state", {"workspace": "Project Alpha", "name": "x"})
    assert reply["code"] == "invalid_request" and "conversation_context" in str(reply["error"])
    huge = {**STATE, "conversation_context": "y" * 40_000}
    with pytest.raises(Exception, match="conversation_context") as err:
        await alpha.create_state("Huge", **huge)
    assert getattr(err.value, "code", None) == "too_large"
    with pytest.raises(NotFound):  # nothing half-written: the name was not claimed
        await alpha.load_state("Huge")
    # Long steps: the error names them, not the short conversation_context.
    steps = {**STATE, "next_steps": [f"step {i} " + "z" * 1_010 for i in range(32)]}
    with pytest.raises(Exception, match=r"`next_steps` 32,\d+ bytes in 32 items") as err:
        await alpha.create_state("Huge", **steps)
    assert getattr(err.value, "code", None) == "too_large"
    assert "conversation_context" not in str(err.value), err.value
    assert "`content`" not in str(err.value), err.value
    await alpha.create_state("Huge", **STATE)


# --------------------------------------------------------------------------- the workspace filter


async def test_memories_in_a_workspace_and_the_workspace_filter(bus: MemoryBus) -> None:
    await bus.create_workspace("Alpha", **WS)
    await bus.create_workspace("Beta", **WS)
    a1 = bus.agent(workflow_id="wf_1", workspace="Alpha")
    a2 = bus.agent(workflow_id="wf_2", workspace="Alpha")
    b1 = bus.agent(workflow_id="wf_1", workspace="Beta")
    plain = bus.agent(workflow_id="wf_1")

    outside = await plain.add("knowledge", "deploy notes kept outside every workspace")
    d1 = await a1.add("decision", "deploy on fridays is banned")
    d2 = await a2.add("decision", "deploy with blue green")
    g = await a1.add("knowledge", "deploy scripts live in ops/")
    await b1.add("decision", "deploy beta nightly")
    await plain.add("decision", "deploy outside any workspace")
    with pytest.raises(NotFound, match="list_workspaces"):
        await plain.add("decision", "x", workspace="Nowhere")

    # A workspace without a workflow: all of its memories, whatever workflow wrote them.
    whole = await bus.agent().search("deploy", workspace="Alpha", limit=10)
    assert {r.id for r in whole.results} == {d1.id, d2.id, g.id}
    assert all(r.workspace == "Alpha" for r in whole.results)
    listed = await bus.agent().list(workspace="Alpha")
    assert {m.id for m in listed.memories} == {d1.id, d2.id, g.id} and listed.total == 3

    described = await bus.agent().describe(workspace="Alpha")
    assert (described.total, described.by_type) == (3, {"decision": 2, "knowledge": 1})
    assert (described.workflow_count, described.general_count) == (2, 1)
    assert (await a1.describe()).total == 2  # wf_1 and general, in Alpha

    # With a workflow: the scope rules, within the workspace.
    mine = await a1.search("deploy", limit=10)
    assert {r.id for r in mine.results} == {d1.id, g.id}
    assert {r.id for r in (await a1.search("deploy", scope="general")).results} == {g.id}
    assert {m.id for m in (await a1.list(scope="workflow")).memories} == {d1.id}

    # Both of recall's paths stay in the workspace (path 1 is off here: only the search).
    for who in (bus.agent(workspace="Alpha"), a1):
        recalled = await who.recall(
            "deploy", session_id=f"s-{who.workflow_id}", recent_s=0, min_importance=1.0
        )
        assert recalled.results and all(r.path == "semantic" for r in recalled.results)
        assert {r.id for r in recalled.results} <= {d1.id, d2.id, g.id}
        assert outside.id not in {r.id for r in recalled.results}


async def test_a_timeline_in_a_workspace_reads_as_list_does(bus: MemoryBus) -> None:
    await bus.create_workspace("Alpha", **WS)
    a1 = bus.agent(workflow_id="wf_1", workspace="Alpha")
    a2 = bus.agent(workflow_id="wf_2", workspace="Alpha")
    plain = bus.agent(workflow_id="wf_1")
    first = await a1.add("decision", "alpha step one", scope="workflow")
    await plain.add("decision", "outside step", scope="workflow")
    second = await a2.add("decision", "alpha step two", scope="workflow")
    third = await a1.add("decision", "alpha step three", scope="workflow")

    # The workspace alone: all of its memories, whatever workflow wrote them.
    whole = await bus.agent(workspace="Alpha").timeline(second.id, mode="full")
    assert [m.id for m in whole.memories] == [first.id, second.id, third.id]
    # A workflow in the workspace: its memories there; the other workflow's anchor is not
    # in that scope.
    mine = await bus.agent(workflow_id="wf_1").timeline(first.id, workspace="Alpha")
    assert [m.id for m in mine.memories] == [first.id, third.id]
    with pytest.raises(NotFound):
        await a1.timeline(second.id)
    # Without a workspace the outside memory is a neighbour again.
    everywhere = await plain.timeline(first.id)
    assert len(everywhere.memories) == 3


async def test_search_memory_the_seed_way(bus: MemoryBus, alpha: AgentMemory) -> None:
    """`search` with `types: [state, trace]` and a workspace is the seed's searchMemory."""
    await alpha.create_state("Auth", **STATE)
    trace = await alpha.capture("grep", args={"pattern": "refresh token"}, output="jwt.ts:12")
    await alpha.add("decision", "refresh tokens rotate daily")
    hits = await bus.agent().search(
        "refresh token", types=["state", "trace"], workspace="Project Alpha"
    )
    assert {r.type for r in hits.results} == {"state", "trace"}
    assert trace.id in {r.id for r in hits.results}


async def test_workspace_and_state_events(bus: MemoryBus, nc: NatsClient) -> None:
    sub = await nc.subscribe(f"mem.{bus.namespace}.events.>")
    await nc.flush()  # the subscription is in place before the first event
    await bus.create_workspace("Alpha", **WS)
    mem = bus.agent(workspace="Alpha", agent_id="saver")
    await mem.create_state("S1", **STATE)
    await mem.archive_state("S1")
    await bus.archive_workspace("Alpha")
    seen = []
    for _ in range(4):
        msg = await sub.next_msg(timeout=5)
        seen.append((msg.subject.split(".", 3)[3], msgspec.json.decode(msg.data)["id"]))
    await sub.unsubscribe()
    state_id = (await mem.load_state("S1")).id
    assert seen == [
        ("_general.workspace.added", "Alpha"),
        ("_general.state.added", state_id),
        ("_general.state.updated", state_id),
        ("_general.workspace.updated", "Alpha"),
    ]


# --------------------------------------------------------------------------- concurrency


@pytest.mark.transports("nats")
async def test_two_handlers_creating_one_name_leave_one(transport: str, bus: MemoryBus) -> None:
    """Many concurrent creates of one workspace, then of one state, through two handler
    processes: exactly one succeeds each time, every other is `conflict`."""

    async def outcomes(calls: list) -> list[str]:
        results = await asyncio.gather(*calls, return_exceptions=True)
        return [
            getattr(r, "code", repr(r)) if isinstance(r, BaseException) else "ok" for r in results
        ]

    ws = await outcomes([bus.create_workspace("Shared", **WS) for _ in range(20)])
    assert sorted(ws) == ["conflict"] * 19 + ["ok"]
    mem = bus.agent(workspace="Shared")
    states = await outcomes(
        [mem.create_state("Checkpoint", **{**STATE, "active_task": f"task {i}"}) for i in range(20)]
    )
    assert sorted(states) == ["conflict"] * 19 + ["ok"]
    assert [w.name for w in (await bus.list_workspaces()).data] == ["Shared"]
    assert [s.name for s in (await mem.list_states()).data] == ["Checkpoint"]
    found = await mem.list(types=["state"])
    assert found.total == 1


async def test_dedup_stays_within_a_workspace(bus: MemoryBus) -> None:
    await bus.create_workspace("A", **WS)
    await bus.create_workspace("B", **WS)
    mem = bus.agent()
    first = await mem.add("knowledge", "The API uses JWT", workspace="A")
    again = await mem.add("knowledge", "the API  uses JWT", workspace="A")
    other = await mem.add("knowledge", "The API uses JWT", workspace="B")
    nowhere = await mem.add("knowledge", "The API uses JWT")
    assert again.duplicate_of == first.id and again.mention_count == 2
    assert len({first.id, other.id, nowhere.id}) == 3 and other.duplicate_of is None
    near = await mem.add("knowledge", "The API uses JWT!", workspace="B", dedup="semantic")
    assert near.duplicate_of == other.id
    loose = await mem.add("knowledge", "The API uses JWT!!", dedup="semantic")
    assert loose.duplicate_of == nowhere.id
    for ws, expected in (("A", first.id), ("B", other.id)):
        found = await bus.agent().list(workspace=ws)
        assert [m.id for m in found.memories] == [expected]


async def test_a_write_that_changes_nothing_is_no_event(bus: MemoryBus, nc: NatsClient) -> None:
    # Subscribed before anything happens, so every event there is arrives here.
    sub = await nc.subscribe(f"mem.{bus.namespace}.events._general.workspace.>")
    await nc.flush()
    await bus.create_workspace("Alpha", **WS)
    before = await bus.load_workspace("Alpha")
    await bus.update_workspace("Alpha", purpose=WS["purpose"])  # the same value
    await bus.archive_workspace("Alpha")
    await bus.archive_workspace("Alpha")  # already archived
    events = [msgspec.json.decode((await sub.next_msg(timeout=5)).data) for _ in range(2)]
    with pytest.raises(NatsTimeoutError):
        await sub.next_msg(timeout=0.3)
    await sub.unsubscribe()
    assert [(e["action"], e["id"]) for e in events] == [("added", "Alpha"), ("updated", "Alpha")]
    after = await bus.load_workspace("Alpha")
    assert after.is_archived and after.updated_at > before.updated_at
    await bus.update_workspace("Alpha", purpose=WS["purpose"])
    assert (await bus.load_workspace("Alpha")).updated_at == after.updated_at


async def test_lists_always_send_the_description(bus: MemoryBus, alpha: AgentMemory) -> None:
    await alpha.create_state("Plain", **STATE)
    await alpha.create_state("Described", **STATE, description="why")
    await alpha.archive_state("Described")
    reply = await raw(bus, "list_states", {"workspace": "Project Alpha", "include_archived": True})
    assert reply == {
        "success": True,
        "data": [
            {"name": "Plain", "description": None},
            {"name": "Described", "description": "why", "is_archived": True},
        ],
    }


@pytest.mark.parametrize(
    "name", ["a\u2028b", "W\ufeff", "x\u200by", "tab\there", "\u00a0lead", "x" * 129, ""]
)
async def test_names_hold_no_invisible_or_blank_edges(bus: MemoryBus, name: str) -> None:
    reply = await raw(bus, "create_workspace", {"name": name, **WS})
    assert reply["code"] == "invalid_request"
    assert "regex" not in str(reply["error"]) and "name" in str(reply["error"])
    assert (await bus.list_workspaces()).data == []


async def test_clearing_states_says_why_first(bus: MemoryBus) -> None:
    reply = await raw(bus, "clear_by_type", {"type": "state"})
    assert reply["code"] == "invalid_request" and "immutable" in str(reply["error"])
    assert str(reply["error"]).endswith("list_states.")  # one full stop, not two
    typo = await raw(bus, "search", {"query": "x", "types": ["states"]})
    assert 'Did you mean "state"?' in str(typo["error"])
