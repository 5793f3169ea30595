"""The MCP server (`python -m bus.mcp`) through the MCP SDK's own client over stdio, against
the test NATS server and the handler processes, in a fresh namespace."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from bus import MemoryBus
from bus.tools import EXAMPLES, mcp_tools

ROOT = Path(__file__).resolve().parents[2]
Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def mcp_client(servers: Any, handlers: Any, ns: str) -> Connect:
    """Start `python -m bus.mcp` with `MEMBUS_*` set (the namespace and NATS of the test,
    plus the given extras) and connect the SDK's client to it."""

    @asynccontextmanager
    async def connect(**env: str) -> AsyncIterator[Client]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "bus.mcp"],
            env={"MEMBUS_NATS_URL": servers.nats_url, "MEMBUS_NAMESPACE": ns, **env},
            cwd=ROOT,
        )
        async with Client(params, read_timeout_seconds=30) as client:
            yield client

    return connect


async def tool(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, mcp_types.TextContent)
    reply: dict[str, Any] = json.loads(block.text)
    assert result.is_error is (reply["success"] is not True)
    return reply


async def ok(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    reply = await tool(client, name, arguments)
    assert reply["success"] is True, reply
    return reply


@pytest.fixture
async def memory(servers: Any, ns: str) -> AsyncIterator[MemoryBus]:
    """The same namespace through the SDK, to check what the MCP server stored."""
    bus = await MemoryBus.connect(servers.nats_url, namespace=ns)
    yield bus
    await bus.close()


async def test_the_server_lists_the_twenty_one_tools_with_our_schemas(mcp_client: Connect) -> None:
    async with mcp_client() as client:
        listed = await client.list_tools()
        instructions = client.instructions

    ours = {t["name"]: t for t in mcp_tools()}
    assert [t.name for t in listed.tools] == list(ours)
    for t in listed.tools:
        assert t.input_schema == ours[t.name]["inputSchema"]
        assert t.description == ours[t.name]["description"]
    assert instructions is not None and "## Memory & Knowledge Management" in instructions


async def test_add_and_search_carry_the_configured_identity(
    mcp_client: Connect, memory: MemoryBus
) -> None:
    identity = {
        "MEMBUS_WORKFLOW_ID": "wf_mcp",
        "MEMBUS_AGENT_ID": "mcp-agent",
        "MEMBUS_SESSION_ID": "mcp-session",
    }
    async with mcp_client(**identity) as client:
        added = await ok(client, "memory_add", EXAMPLES["memory_add"])
        found = await ok(client, "memory_search", EXAMPLES["memory_search"])
        general = await ok(client, "memory_add", {"type": "user_pref", "content": "Be brief"})

    assert [r["id"] for r in found["results"]] == [added["id"]]
    got = await memory.agent().get([added["id"], general["id"]])
    decision, pref = got.memories
    assert (decision.workflow_id, decision.agent_id) == ("wf_mcp", "mcp-agent")
    assert decision.session_id == "mcp-session"
    assert decision.content == EXAMPLES["memory_add"]["content"]
    # A general type is stored across workflows, but still says who wrote it.
    assert (pref.workflow_id, pref.agent_id) == (None, "mcp-agent")
    # Another workflow does not see the MCP agent's decision.
    other = await memory.agent(workflow_id="wf_other").search("database Alpha API")
    assert added["id"] not in [r.id for r in other.results]


async def test_mistakes_and_error_replies_are_tool_errors_with_text(mcp_client: Connect) -> None:
    async with mcp_client(MEMBUS_WORKFLOW_ID="wf_mcp") as client:
        unknown = await tool(client, "memory_find", {"query": "x"})
        identity = await tool(
            client, "memory_add", {"type": "fact", "content": "x", "workflow_id": "wf_evil"}
        )
        missing = await tool(client, "memory_history", {"id": "01JZZZZZZZZZZZZZZZZZZZZZZZ"})
        no_workspace = await tool(client, "list_states", {})

    assert unknown["code"] == "invalid_request" and "memory_search" in unknown["error"]
    assert identity["code"] == "invalid_request" and "workflow_id" in identity["error"]
    assert missing["code"] == "not_found" and missing["error"]
    assert no_workspace["code"] == "invalid_request" and "list_workspaces" in no_workspace["error"]


async def test_a_workspace_and_a_state_round_trip_through_the_configured_workspace(
    mcp_client: Connect, memory: MemoryBus
) -> None:
    workspace = EXAMPLES["create_workspace"]["name"]
    state = {k: v for k, v in EXAMPLES["create_state"].items() if k != "workspace"}
    env = {
        "MEMBUS_WORKSPACE": workspace,
        "MEMBUS_AGENT_ID": "mcp-agent",
        "MEMBUS_WORKFLOW_ID": "wf_mcp",
    }
    async with mcp_client(**env) as client:
        await ok(client, "create_workspace", EXAMPLES["create_workspace"])
        await ok(client, "create_state", state)  # no `workspace`: the configured one
        listed = await ok(client, "list_states", {})
        loaded = (await ok(client, "load_state", {"name": state["name"]}))["data"]
        noted = await ok(client, "memory_add", {"type": "todo", "content": "Add logout"})

    assert [s["name"] for s in listed["data"]] == [state["name"]]
    assert loaded["workspace"] == workspace
    assert loaded["next_steps"] == state["next_steps"]
    assert loaded["agent_id"] == "mcp-agent"
    # Seen from the SDK: the same state, and the note went into the workspace.
    direct = await memory.agent(workspace=workspace).load_state(state["name"])
    assert direct.conversation_context == state["conversation_context"]
    (todo,) = (await memory.agent().get([noted["id"]])).memories
    assert (todo.workspace, todo.workflow_id, todo.agent_id) == (workspace, "wf_mcp", "mcp-agent")


async def test_the_server_starts_and_answers_while_nats_is_down(mcp_client: Connect) -> None:
    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"nats://127.0.0.1:{s.getsockname()[1]}"
    async with mcp_client(MEMBUS_NATS_URL=dead) as client:
        assert len((await client.list_tools()).tools) == 21
        down = await tool(client, "memory_search", {"query": "anything"})
        mistake = await tool(client, "memory_search", {"query": "x", "colour": "red"})
    assert down["code"] == "unavailable" and "Retry" in down["error"]
    assert mistake["code"] == "invalid_request" and "colour" in mistake["error"]


async def test_keys_versions_conflicts_and_erase_pass_through_the_tools(
    mcp_client: Connect, memory: MemoryBus
) -> None:
    async with mcp_client(MEMBUS_WORKFLOW_ID="wf_mcp", MEMBUS_AGENT_ID="mcp-agent") as client:
        first = await ok(
            client, "memory_add", {"type": "context", "content": "Plan: outline", "key": "plan"}
        )
        second = await ok(
            client, "memory_add", {"type": "context", "content": "Plan: chapter 1", "key": "plan"}
        )
        got = await ok(client, "memory_get", {"keys": ["plan", "nothing"]})
        updated = await ok(
            client, "memory_update", {"id": first["id"], "importance": 0.9, "expected_version": 2}
        )
        stale = await tool(
            client, "memory_update", {"id": first["id"], "content": "x", "expected_version": 2}
        )
        taken = await tool(
            client,
            "memory_add",
            {"type": "context", "content": "Plan: redo", "key": "plan", "expected_version": 0},
        )
        erased = await ok(client, "memory_delete", {"ids": [first["id"]], "erase": True})

    assert (first["version"], first["replaced"]) == (1, False)
    assert (second["id"], second["version"], second["replaced"]) == (first["id"], 2, True)
    [held] = got["memories"]
    assert (held["id"], held["key"], held["version"]) == (first["id"], "plan", 2)
    assert held["content"] == "Plan: chapter 1" and got["missing_keys"] == ["nothing"]
    assert updated["version"] == 3
    # A stale write is a tool error that tells the model where the memory is now.
    assert (stale["code"], stale["id"], stale["current_version"]) == ("conflict", first["id"], 3)
    assert "expected_version 3" in stale["error"]
    assert (taken["code"], taken["id"], taken["current_version"]) == ("conflict", first["id"], 3)
    assert erased["deleted"] == 1 and erased["erased"] == 1
    history = await memory.agent().history(first["id"])
    assert [e.event for e in history.entries][-1] == "erased"
    assert "Plan" not in json.dumps([e.changes for e in history.entries], default=str)
