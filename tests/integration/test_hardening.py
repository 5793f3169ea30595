"""Regressions from an adversarial review: each test is one way the service
failed under hostile or heavy traffic, now answered properly."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import msgspec
import pytest
from stacks import private_stack

import handlers.ops.writes as writes
from bus import InvalidRequest, MemoryBus, Unavailable
from contracts.messages import ClearByTypeReply


async def _raw(bus: MemoryBus, op: str, body: dict) -> dict:
    msg = await bus.nc.request(f"mem.{bus.namespace}.{op}", json.dumps(body).encode(), timeout=5)
    return msgspec.json.decode(msg.data)


async def test_a_workflow_id_or_tag_of_underscore_is_found_and_cleared(bus: MemoryBus) -> None:
    # `_` alone was a RediSearch syntax error: writable, but never found or cleared.
    mem = bus.agent(workflow_id="_")
    added = await mem.add("context", "underscore workflow note", tags=["_", "a_b"])
    other = await bus.agent(workflow_id="x").add("context", "another workflow", tags=["a"])

    found = await mem.search("underscore workflow note", scope="workflow")
    assert [r.id for r in found.results] == [added.id]
    listed = await mem.list(tags=["_"], scope="workflow")
    assert [m.id for m in listed.memories] == [added.id]
    assert (await bus.agent().list(tags=["a_b"], scope="general")).memories == []

    cleared = await mem.clear_by_type("context")
    assert cleared.deleted == 1
    got = await bus.agent().get([added.id, other.id])
    assert got.missing == [added.id]


async def test_nul_in_content_is_refused_and_nothing_is_stored(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_nul")
    with pytest.raises(InvalidRequest, match="NUL"):
        await mem.add("knowledge", "before\x00after the nul")
    reply = await _raw(bus, "add", {"type": "knowledge", "content": "ok", "title": "a\u0000b"})
    assert reply["code"] == "invalid_request" and "NUL" in reply["error"]
    assert (await mem.describe()).total == 0


async def test_a_captured_tool_output_with_nul_is_stored_and_found(bus: MemoryBus) -> None:
    # A tool's output is what it is: capture keeps it (NUL as a space) instead of failing.
    mem = bus.agent(workflow_id="wf_cap")
    reply = await _raw(
        bus,
        "capture",
        {"tool": "hexdump", "output": "header\x00zebracorn trailer", "workflow_id": "wf_cap"},
    )
    assert reply["success"] is True, reply
    found = await mem.search("zebracorn", types=["trace"], mode="text")
    assert [r.id for r in found.results] == [reply["id"]]
    assert "header zebracorn" in (await mem.get([reply["id"]])).memories[0].content


async def test_clear_by_type_works_in_bounded_calls_that_report_what_remains(
    bus: MemoryBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A budget of 0 s: each call deletes one batch (its minimum) and stops.
    monkeypatch.setattr(writes, "CLEAR_BUDGET_S", 0.0)
    monkeypatch.setattr(writes, "CLEAR_BATCH", 10)
    mem = bus.agent(workflow_id="wf_clear")
    for i in range(25):
        await mem.add("context", f"scratch note {i}", dedup="none")
    await mem.add("knowledge", "kept")

    body = {"type": "context", "workflow_id": "wf_clear"}
    first = msgspec.convert(await _raw(bus, "clear_by_type", body), ClearByTypeReply)
    assert (first.deleted, first.remaining) == (10, 15)
    # The SDK repeats until nothing remains.
    rest = await mem.clear_by_type("context")
    assert (rest.deleted, rest.remaining) == (15, 0)
    left = await mem.list()
    assert [m.content for m in left.memories] == ["kept"]


async def test_hundreds_of_concurrent_semantic_dedup_adds_all_succeed(bus: MemoryBus) -> None:
    # Waiters polled the scope's lock every 2 ms: 300 adds gave 214 `unavailable`.
    mem = bus.agent(workflow_id="wf_dedup")
    texts = [f"distinct fact number {i} about topic {i * 7919 % 1000}" for i in range(300)]
    results = await asyncio.gather(
        *(mem.add("context", t, dedup="semantic") for t in texts), return_exceptions=True
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert failures == []
    assert (await mem.describe()).total == len({r.id for r in results})  # type: ignore[union-attr]


@pytest.mark.processes  # a stack of its own
async def test_overload_is_answered_busy_before_the_callers_timeout() -> None:
    # One handler that runs 2 requests at once and lets 4 wait 0.2 s: a burst of 300
    # searches is answered, some `unavailable` ("busy"), none left to the caller's timeout.
    env = {"MEMBUS_MAX_INFLIGHT": "2", "MEMBUS_MAX_WAITING": "4", "MEMBUS_QUEUE_WAIT_S": "0.2"}
    async with private_stack("hash", env=env) as stack:
        bus = await MemoryBus.connect(stack.nats_url, namespace="burst", timeout=5)
        try:
            mem = bus.agent(workflow_id="wf_burst")
            await mem.add("knowledge", "something to find")
            outcomes = await asyncio.gather(
                *(mem.search("something") for _ in range(300)), return_exceptions=True
            )
            kinds = Counter(type(o).__name__ for o in outcomes)
            busy = [o for o in outcomes if isinstance(o, Unavailable)]
            assert set(kinds) <= {"SearchReply", "Unavailable"}, kinds
            assert busy and all("busy" in b.message for b in busy)
            assert kinds["SearchReply"] >= 6
            # Once the burst is over, the handler serves as before.
            assert (await mem.search("something")).results
        finally:
            await bus.close()


@pytest.mark.processes  # a stack of its own
async def test_idle_pooled_connections_survive_a_redis_restart() -> None:
    # redis-py's synchronous Retry was given to the asyncio pool, which ignored it: each idle
    # connection failed one request after Redis came back (126 of 200 gets `unavailable`).
    async with private_stack("hash") as stack:
        bus = await MemoryBus.connect(stack.nats_url, namespace="restart", timeout=5)
        try:
            mem = bus.agent()
            kept = await mem.add("knowledge", "a memory")
            # Open many pooled connections in the handler.
            for _ in range(3):
                await asyncio.gather(*(mem.get([kept.id]) for _ in range(200)))

            stack.stop_server("redis")
            await asyncio.to_thread(stack.start_redis)
            deadline = asyncio.get_running_loop().time() + 20
            while True:  # one request sees the outage and the handler recovers
                try:
                    await mem.get([kept.id])
                    break
                except Unavailable:
                    assert asyncio.get_running_loop().time() < deadline
                    await asyncio.sleep(0.1)

            outcomes = await asyncio.gather(
                *(mem.get([kept.id]) for _ in range(200)), return_exceptions=True
            )
            assert [o for o in outcomes if isinstance(o, BaseException)] == []
        finally:
            await bus.close()


async def test_a_durable_add_applied_again_changes_nothing(bus: MemoryBus, bus_client) -> None:
    # A handler that dies between a durable write and its done-mark leaves the write to be
    # applied again: the memory (its id derived from the request id) must not be counted as
    # a mention of itself, whatever the dedup mode, nor announced twice.
    from handlers.dispatch import dispatch
    from handlers.ops.deps import DurableWrite

    sub = await bus.nc.subscribe(f"mem.{bus.namespace}.events.wf_again.>")
    await bus.nc.flush()
    for dedup in ("exact", "semantic", "none"):
        body = {"type": "context", "content": f"applied twice, {dedup}", "workflow_id": "wf_again"}
        raw = json.dumps({**body, "dedup": dedup}).encode()
        write = DurableWrite(f"req-again-{dedup}", 1_760_000_000_000)
        for _ in range(2):
            _, error = await dispatch(
                "add", f"memq.{bus.namespace}.add", raw, bus_client.deps, write
            )
            assert error is None
    listed = await bus.agent(workflow_id="wf_again").list(limit=10)
    assert sorted((m.content, m.mention_count) for m in listed.memories) == [
        ("applied twice, exact", 1),
        ("applied twice, none", 1),
        ("applied twice, semantic", 1),
    ]
    await bus.nc.flush()
    await asyncio.sleep(0.2)
    assert sub.pending_msgs == 3  # one `added` each
    await sub.unsubscribe()
