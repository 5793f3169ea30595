"""Capture of tool runs: each run becomes its own `trace`."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from nats.aio.client import Client as NatsClient

from bus import AgentMemory, MemoryBus
from bus.capture import captured, capturing, send_capture
from contracts.messages import Memory
from contracts.subjects import request_subject


async def traces(mem: AgentMemory, n: int, timeout: float = 5.0) -> list[Memory]:
    """The traces in the agent's scope, once there are `n` (a publish is not awaited)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = (await mem.list(types=["trace"], limit=100)).memories
        if len(found) >= n or loop.time() > deadline:
            return sorted(found, key=lambda m: m.created_at)
        await asyncio.sleep(0.05)


async def test_a_captured_run_is_a_trace_with_the_contract_fields(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_1", agent_id="coder", session_id="s-7")
    reply = await mem.capture(
        "Read File",
        args={"path": "src/app.py", "to": ["a.txt", "b.txt"], "lines": 20},
        output="def main(): ...",
        duration_ms=12.5,
    )
    [trace] = (await mem.get([reply.id])).memories
    assert trace.type == "trace" and trace.workflow_id == "wf_1"
    assert trace.title == "Tool run: Read File"
    assert trace.facts == ["tool: Read File", "error: false"]
    assert trace.tags == ["tool", "read_file"]
    assert trace.source == "auto" and trace.agent_id == "coder" and trace.session_id == "s-7"
    assert trace.related_files == ["src/app.py", "a.txt", "b.txt"]
    assert trace.narrative is not None
    assert '"path":"src/app.py"' in trace.narrative and "def main(): ..." in trace.narrative
    assert trace.metadata == {"tool": "Read File", "error": False, "duration_ms": 12.5}
    assert trace.importance == 0.2
    assert trace.expires_at is not None  # 30 days by default
    assert (trace.expires_at - trace.created_at).days == 30
    assert trace.content.startswith("Tool run: Read File\n\n")


async def test_every_run_is_its_own_trace_and_long_output_is_cut(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_1")
    first = await mem.capture("ls", args={"path": "."}, output="a b c")
    second = await mem.capture("ls", args={"path": "."}, output="a b c")
    assert first.id != second.id and second.duplicate_of is None  # never folded by dedup

    big = await mem.capture("write", args={"content": "B" * 6000}, output="ok")
    [written] = (await mem.get([big.id])).memories
    assert written.narrative is not None
    args_text = written.narrative.split("\nOutput: ")[0].removeprefix("Arguments: ")
    assert len(args_text.split("...", 1)[0].encode()) <= 2048 and "more bytes cut" in args_text

    failed = await mem.capture("build", output="é" * 5000, error=True)
    [trace] = (await mem.get([failed.id])).memories
    assert trace.facts == ["tool: build", "error: true"]
    assert trace.narrative is not None and "more bytes cut" in trace.narrative
    kept = trace.narrative.split("Output: ", 1)[1]
    assert len(kept.split("...", 1)[0].encode()) <= 2048


async def test_the_tool_name_is_trimmed_and_never_blank(bus: MemoryBus) -> None:
    mem = bus.agent()
    reply = await mem.capture("  grep\n", args={})
    [trace] = (await mem.get([reply.id])).memories
    assert trace.title == "Tool run: grep" and trace.tags == ["tool", "grep"]
    blank = await bus.nc.request(
        request_subject(bus.namespace, "capture"), b'{"tool": " \\n "}', timeout=5
    )
    body = msgspec.json.decode(blank.data)
    assert body["code"] == "invalid_request" and "blank" in body["error"]


async def test_a_capture_in_a_workspace_needs_the_workspace(bus: MemoryBus) -> None:
    reply = await bus.nc.request(
        request_subject(bus.namespace, "capture"),
        msgspec.json.encode({"tool": "ls", "workspace": "Nowhere"}),
        timeout=5,
    )
    body = msgspec.json.decode(reply.data)
    assert body["code"] == "not_found" and "list_workspaces" in body["error"]


@pytest.mark.transports("nats")
async def test_a_plain_publish_is_enough(transport: str, bus: MemoryBus, nc: NatsClient) -> None:
    mem = bus.agent(workflow_id="wf_pub")
    subject = request_subject(bus.namespace, "capture")
    await nc.publish(subject, b'{"tool": "grep", "workflow_id": "wf_pub", "output": "hit"}')
    await nc.publish(subject, b'{"tool": 42}')  # bad input: logged by the handler, not stored
    await nc.publish(subject, b"not json")
    await nc.publish(subject, b'{"tool": "sed", "workflow_id": "wf_pub"}')
    await nc.flush()
    found = await traces(mem, 2)
    # Two handlers share the queue group, so the order they store in is not the sent order.
    assert sorted(t.title for t in found) == ["Tool run: grep", "Tool run: sed"]
    assert (await mem.describe()).total == 2  # and the handlers are still serving


@pytest.mark.transports("nats")
async def test_a_wrapped_tool_is_captured_and_untouched(transport: str, bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_tools", agent_id="runner")

    @captured(mem)
    async def read_file(path: str, limit: int = 10) -> str:
        return f"contents of {path}"

    @captured(mem, tool="divide")
    async def divide(a: float, b: float) -> float:
        return a / b

    assert await read_file("notes.md") == "contents of notes.md"
    assert read_file.__name__ == "read_file"
    with pytest.raises(ZeroDivisionError):
        await divide(1, b=0)
    async with capturing(mem, "shell", {"cmd": "echo hi"}) as run:
        run.output = {"stdout": "hi", "code": 0}

    found = await traces(mem, 3)
    by_tool = {t.metadata["tool"]: t for t in found}
    assert set(by_tool) == {"read_file", "divide", "shell"}
    ok, failed, shell = by_tool["read_file"], by_tool["divide"], by_tool["shell"]
    assert ok.facts == ["tool: read_file", "error: false"]
    assert ok.related_files == ["notes.md"] and ok.agent_id == "runner"
    assert ok.narrative is not None and '"path":"notes.md"' in ok.narrative
    assert "contents of notes.md" in ok.narrative
    assert ok.metadata["duration_ms"] >= 0
    assert failed.facts == ["tool: divide", "error: true"]
    assert failed.narrative is not None and "ZeroDivisionError" in failed.narrative
    assert '"a":1' in failed.narrative and '"b":0' in failed.narrative
    assert shell.narrative is not None and '"stdout":"hi"' in shell.narrative

    # The runs are searchable traces.
    hits = await mem.search("contents of notes", types=["trace"])
    assert hits.results and hits.results[0].id == ok.id


async def test_a_capture_that_cannot_be_sent_never_breaks_the_tool(servers) -> None:
    bus = await MemoryBus.connect(servers.nats_url)
    mem = bus.agent(workflow_id="wf_x")

    @captured(mem)
    async def tool(x: object) -> object:
        return x

    await bus.nc.close()  # every publish now fails
    assert await tool("still works") == "still works"
    with pytest.raises(KeyError):
        async with capturing(mem, "lookup"):
            raise KeyError("the tool's own error goes on up")
    with pytest.raises(TypeError, match="async"):
        captured(mem)(lambda: None)  # type: ignore[arg-type]


@pytest.mark.transports("nats")
async def test_a_burst_of_published_captures_is_stored_whole(
    transport: str, bus: MemoryBus
) -> None:
    # Far more at once than two handlers have room for: none may be shed or lost.
    mem = bus.agent(workflow_id="wf_burst", agent_id="runner")
    runs = 3000
    sent = await asyncio.gather(
        *(send_capture(mem, "probe", {"i": i}, f"out {i}", False, 0.1) for i in range(runs))
    )
    assert all(sent)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while (total := (await mem.describe()).total) < runs:
        assert loop.time() < deadline, f"{total} of {runs} stored"
        await asyncio.sleep(0.25)
    assert total == runs
    listed = await mem.list(types=["trace"], limit=1)
    assert listed.total == runs
