"""The LLM tools end to end: `ToolExecutor` runs each tool's own example against the real
handlers, in a fresh namespace, and every outcome comes back as JSON text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bus import MemoryBus, NotFound
from bus.tools import EXAMPLES, ToolExecutor

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")

IDENTITY = {"workflow_id": "wf_tools", "agent_id": "tool-agent", "session_id": "sess-tools"}


@pytest.fixture
def executor(bus: MemoryBus, transport: str) -> ToolExecutor:
    return ToolExecutor(bus, **IDENTITY)


async def call(executor: ToolExecutor, name: str, arguments: Any) -> dict[str, Any]:
    text = await executor.call(name, arguments)
    assert isinstance(text, str)
    reply: dict[str, Any] = json.loads(text)
    return reply


async def ok(executor: ToolExecutor, name: str, arguments: Any) -> dict[str, Any]:
    reply = await call(executor, name, arguments)
    assert reply["success"] is True, reply
    return reply


def example(tool: str, **changes: Any) -> dict[str, Any]:
    return {**EXAMPLES[tool], **changes}


async def test_the_memory_tools_run_their_examples_end_to_end(executor: ToolExecutor) -> None:
    added = await ok(executor, "memory_add", EXAMPLES["memory_add"])
    memory_id = added["id"]
    assert added["workflow_id"] == "wf_tools"  # a decision stays in its workflow

    found = await ok(executor, "memory_search", EXAMPLES["memory_search"])
    assert [r["id"] for r in found["results"]] == [memory_id]
    assert found["results"][0]["type"] == "decision"
    assert "embedding" not in found["results"][0]

    described = await ok(executor, "memory_describe", EXAMPLES["memory_describe"])
    assert described["total"] == 1 and described["by_type"] == {"decision": 1}

    listed = await ok(executor, "memory_list", EXAMPLES["memory_list"])
    assert listed["memories"] == [] and listed["count"] == 0  # no todo or goal yet
    listed = await ok(executor, "memory_list", {"mode": "compact"})
    assert [m["id"] for m in listed["memories"]] == [memory_id]

    got = await ok(executor, "memory_get", example("memory_get", ids=[memory_id, "01NOPE"]))
    record = got["memories"][0]
    assert (record["agent_id"], record["workflow_id"]) == ("tool-agent", "wf_tools")
    assert record["session_id"] == "sess-tools"
    assert record["related_people"] == ["Dana"]
    assert got["missing"] == ["01NOPE"]
    # Null and empty fields are left out of what the model reads.
    assert "expires_at" not in record and "facts" not in record and "title" not in record

    await ok(executor, "memory_update", example("memory_update", id=memory_id))

    history = await ok(executor, "memory_history", example("memory_history", id=memory_id))
    assert [e["event"] for e in history["entries"]] == ["added", "updated"]
    assert history["entries"][1]["agent_id"] == "tool-agent"
    assert history["entries"][1]["changes"]["content"]["new"].startswith("Deploys of")

    later = await ok(executor, "memory_add", {"type": "event", "content": "Staging deployed"})
    timeline = await ok(executor, "memory_timeline", example("memory_timeline", anchor=memory_id))
    assert [m["id"] for m in timeline["memories"]] == [memory_id, later["id"]]
    assert timeline["anchor_index"] == 0

    people = await ok(executor, "memory_people", EXAMPLES["memory_people"])
    assert [p["name"] for p in people["people"]] == ["Dana"]
    assert people["people"][0]["memory_ids"] == [memory_id]

    deleted = await ok(executor, "memory_delete", example("memory_delete", ids=[memory_id]))
    assert deleted["deleted"] == 1
    again = await ok(executor, "memory_get", {"ids": [memory_id]})
    assert again["memories"] == [] and again["missing"] == [memory_id]


async def test_general_types_are_stored_without_the_workflow(executor: ToolExecutor) -> None:
    added = await ok(executor, "memory_add", {"type": "user_pref", "content": "Short answers"})

    assert "workflow_id" not in added  # general: null, left out of the text
    other = ToolExecutor(executor.bus, workflow_id="wf_elsewhere")
    found = await ok(other, "memory_search", {"query": "short answers"})
    assert [r["id"] for r in found["results"]] == [added["id"]]


async def test_a_repeat_bumps_mention_count_and_supersedes_hides_the_old(
    executor: ToolExecutor,
) -> None:
    first = await ok(executor, "memory_add", {"type": "decision", "content": "Use MySQL"})
    repeat = await ok(executor, "memory_add", {"type": "decision", "content": "Use MySQL"})
    assert repeat["duplicate_of"] == first["id"] and repeat["mention_count"] == 2

    newer = await ok(
        executor,
        "memory_add",
        {"type": "decision", "content": "Use PostgreSQL", "supersedes": [first["id"]]},
    )
    assert newer["superseded"] == [first["id"]]
    found = await ok(executor, "memory_search", {"query": "use mysql postgresql"})
    assert [r["id"] for r in found["results"]] == [newer["id"]]


async def test_reconcile_then_apply_as_a_model_would(executor: ToolExecutor) -> None:
    old = await ok(
        executor, "memory_add", {"type": "knowledge", "content": "Deploy with make deploy"}
    )
    example_ = EXAMPLES["memory_apply"]
    actions = [{**example_["actions"][0], "id": old["id"]}, example_["actions"][1]]

    applied = await ok(executor, "memory_apply", {"actions": actions})

    assert [r["action"] for r in applied["results"]] == ["supersede", "add"]
    got = await ok(executor, "memory_get", {"ids": [r["id"] for r in applied["results"]]})
    assert {m["agent_id"] for m in got["memories"]} == {"tool-agent"}
    assert {m["session_id"] for m in got["memories"]} == {"sess-tools"}
    # Identity stays the executor's, inside the actions too.
    reply = await call(
        executor,
        "memory_apply",
        {"actions": [{"action": "add", "type": "fact", "content": "x", "workflow_id": "wf_x"}]},
    )
    assert reply["success"] is False and "workflow_id" in reply["error"]


async def test_an_error_reply_comes_back_as_the_servers_recovery_text(
    executor: ToolExecutor, bus: MemoryBus
) -> None:
    missing = "01JZZZZZZZZZZZZZZZZZZZZZZZ"
    reply = await call(executor, "memory_history", {"id": missing})

    with pytest.raises(NotFound) as direct:
        await bus.agent(workflow_id="wf_tools").history(missing)
    assert reply == {"success": False, "code": "not_found", "error": direct.value.message}

    reply = await call(executor, "memory_update", {"id": missing, "importance": 0.5})
    assert reply["success"] is False and reply["code"] == "not_found" and reply["error"]


async def test_the_server_checks_what_the_schema_cannot(executor: ToolExecutor) -> None:
    reply = await call(executor, "memory_add", {"type": "no_such_type", "content": "x"})

    assert reply["success"] is False and reply["code"] == "invalid_request"
    assert "user_pref" in reply["error"]  # the server lists the known types


async def test_unknown_tools_and_bad_arguments_come_back_as_text(executor: ToolExecutor) -> None:
    for name, arguments, words in [
        ("memory_find", {"query": "x"}, "Unknown tool"),
        ("memory_search", "{not json", "not valid JSON"),
        ("memory_search", "[]", "JSON object"),
        ("memory_search", {"query": "x", "limit": 1000}, "$.limit"),
        ("memory_add", {"type": "fact", "content": "x", "agent_id": "me"}, "agent_id"),
    ]:
        reply = await call(executor, name, arguments)
        assert reply["success"] is False and reply["code"] == "invalid_request"
        assert words in reply["error"], reply


async def test_a_closed_connection_is_unavailable_and_says_retry(servers: Any, ns: str) -> None:
    bus = await MemoryBus.connect(servers.nats_url, namespace=ns)
    await bus.nc.close()

    reply = await call(ToolExecutor(bus), "memory_search", {"query": "x"})

    assert reply["success"] is False and reply["code"] == "unavailable"
    assert "Retry" in reply["error"]


# ----------------------------------------------------------------------------- workspaces


async def test_the_workspace_tools_run_their_examples_end_to_end(executor: ToolExecutor) -> None:
    name = EXAMPLES["create_workspace"]["name"]
    assert await ok(executor, "create_workspace", EXAMPLES["create_workspace"]) == {"success": True}
    taken = await call(executor, "create_workspace", EXAMPLES["create_workspace"])
    assert taken["code"] == "conflict" and "list_workspaces" in taken["error"]

    listed = await ok(executor, "list_workspaces", EXAMPLES["list_workspaces"])
    assert [w["name"] for w in listed["data"]] == [name]

    loaded = await ok(executor, "load_workspace", EXAMPLES["load_workspace"])
    assert loaded["data"]["root_folder"] == "projects/alpha"

    await ok(executor, "update_workspace", EXAMPLES["update_workspace"])
    loaded = await ok(executor, "load_workspace", EXAMPLES["load_workspace"])
    assert loaded["data"]["workflows"] == EXAMPLES["update_workspace"]["workflows"]
    assert loaded["data"]["purpose"] == EXAMPLES["create_workspace"]["purpose"]  # kept

    await ok(executor, "archive_workspace", EXAMPLES["archive_workspace"])
    assert (await ok(executor, "list_workspaces", {}))["data"] == []
    archived = await ok(executor, "list_workspaces", {"include_archived": True})
    assert [w["name"] for w in archived["data"]] == [name]

    unknown = await call(executor, "load_workspace", {"name": "Nowhere"})
    assert unknown["code"] == "not_found" and "list_workspaces" in unknown["error"]


async def test_the_state_tools_run_their_examples_end_to_end(executor: ToolExecutor) -> None:
    await ok(executor, "create_workspace", EXAMPLES["create_workspace"])
    state = EXAMPLES["create_state"]

    assert await ok(executor, "create_state", state) == {"success": True}
    again = await call(executor, "create_state", state)
    assert again["code"] == "conflict" and "immutable" in again["error"]

    listed = await ok(executor, "list_states", EXAMPLES["list_states"])
    assert [s["name"] for s in listed["data"]] == [state["name"]]

    loaded = (await ok(executor, "load_state", EXAMPLES["load_state"]))["data"]
    assert loaded["next_steps"] == state["next_steps"]
    assert loaded["active_files"] == state["active_files"]
    assert loaded["agent_id"] == "tool-agent" and loaded["session_id"] == "sess-tools"

    # A state is a memory of type `state` in its workspace: searchable, not deletable.
    found = await ok(
        executor,
        "memory_search",
        {"query": "token refresh", "types": ["state"], "workspace": state["workspace"]},
    )
    assert [r["id"] for r in found["results"]] == [loaded["id"]]
    refused = await call(executor, "memory_delete", {"ids": [loaded["id"]]})
    assert refused["success"] is False and "archive" in refused["error"]

    await ok(executor, "archive_state", EXAMPLES["archive_state"])
    assert (await ok(executor, "list_states", EXAMPLES["list_states"]))["data"] == []
    still = await ok(executor, "load_state", EXAMPLES["load_state"])
    assert still["data"]["is_archived"] is True

    unknown = await call(executor, "load_state", example("load_state", name="Nope"))
    assert unknown["code"] == "not_found" and "list_states" in unknown["error"]


async def test_a_configured_workspace_fills_states_adds_and_reads(
    executor: ToolExecutor, bus: MemoryBus
) -> None:
    await ok(executor, "create_workspace", example("create_workspace", name="Ops"))
    await ok(executor, "create_workspace", example("create_workspace", name="Dev"))
    ops = ToolExecutor(bus, workspace="Ops", **IDENTITY)
    state = {k: v for k, v in EXAMPLES["create_state"].items() if k != "workspace"}

    await ok(ops, "create_state", state)
    names = await ok(executor, "list_states", {"workspace": "Ops"})
    assert [s["name"] for s in names["data"]] == [state["name"]]
    assert await call(executor, "load_state", {"name": state["name"]}) == {
        "success": False,
        "code": "invalid_request",
        "error": "load_state needs `workspace`: no default workspace is configured."
        " Pass the workspace's name (list_workspaces shows them).",
    }

    in_ops = await ok(ops, "memory_add", {"type": "fact", "content": "Ops runs on k8s"})
    in_dev = await ok(
        ops, "memory_add", {"type": "fact", "content": "Dev runs on k8s", "workspace": "Dev"}
    )
    got = await ok(ops, "memory_get", {"ids": [in_ops["id"], in_dev["id"]]})
    assert [m["workspace"] for m in got["memories"]] == ["Ops", "Dev"]
    found = await ok(ops, "memory_search", {"query": "runs on k8s", "types": ["fact"]})
    assert [r["id"] for r in found["results"]] == [in_ops["id"]]
    described = await ok(ops, "memory_describe", {})
    assert described["by_type"] == {"fact": 1, "state": 1}
