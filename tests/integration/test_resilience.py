"""Outages: Redis down means `unavailable` (and recovery after), NATS restarts reconnect.

These tests stop servers, so they run on an embedded stack of their own, never the session's.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from stacks import private_stack

from bus import MemoryBus, Unavailable
from deploy.embedded import EmbeddedStack


@pytest.fixture
async def own_stack() -> AsyncIterator[EmbeddedStack]:
    async with private_stack("hash") as stack:
        yield stack


async def _eventually(check: Callable[[], Coroutine[Any, Any, bool]], timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def test_redis_down_replies_unavailable_then_recovers(own_stack: EmbeddedStack) -> None:
    bus = await MemoryBus.connect(own_stack.nats_url, namespace="outage")
    mem = bus.agent(workflow_id="wf_1")
    kept = await mem.add("knowledge", "written before the outage")

    own_stack.stop_server("redis")
    with pytest.raises(Unavailable) as err:
        await mem.add("knowledge", "written during the outage")
    assert "retry" in err.value.message
    with pytest.raises(Unavailable):
        await mem.search("outage")

    await asyncio.to_thread(own_stack.start_redis)

    async def serving() -> bool:
        try:
            await mem.add("knowledge", "written after the outage")
            return True
        except Unavailable:
            return False

    await _eventually(serving)
    # Not persisted (tests run Redis without a data file), so only post-outage data remains;
    # what matters is that the handler serves again, index re-created on demand.
    listed = await mem.list()
    assert [m.content for m in listed.memories] == ["written after the outage"]
    assert kept.id not in [m.id for m in listed.memories]
    await bus.close()


async def test_handler_reconnects_after_nats_restarts(own_stack: EmbeddedStack) -> None:
    own_stack.stop_server("nats")
    await asyncio.to_thread(own_stack.start_nats)
    bus = await MemoryBus.connect(own_stack.nats_url, namespace="renats", timeout=2)
    mem = bus.agent()

    async def serving() -> bool:
        try:
            await mem.describe()
            return True
        except (Unavailable, TimeoutError):
            return False

    await _eventually(serving)
    added = await mem.add("knowledge", "after the NATS restart")
    assert (await mem.get([added.id])).memories[0].content == "after the NATS restart"
    await bus.close()


async def test_connecting_to_a_nats_that_is_not_there_fails_in_time() -> None:
    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(Unavailable, match="did not answer"):
        await MemoryBus.connect(f"nats://127.0.0.1:{port}", connect_within=0.5)
    assert loop.time() - started < 5
