"""Outages: Redis down or loading its data means `unavailable` (and recovery after), NATS
restarts reconnect.

These tests stop servers, so they run on an embedded stack of their own, never the session's.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from slow_loading import LOAD_SLOWLY, fill_for_slow_loading
from stacks import private_stack

from bus import BusError, MemoryBus, Unavailable
from deploy.demo import run_demo
from deploy.embedded import EmbeddedStack, wait_for_handlers

# Each test starts servers or handler processes of its own.
pytestmark = pytest.mark.processes


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


async def test_every_reply_while_redis_goes_down_is_a_success_or_unavailable() -> None:
    # Mixed requests in flight through two handlers while Redis stops, over and over: a
    # failure at whatever moment it hits (connecting, mid-command, mid-pipeline, a script,
    # a lock, an index check) is `unavailable`, never `internal`.
    async with private_stack("hash") as stack:
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": "hash"})
        await wait_for_handlers(stack.nats_url, 2, [*stack.handlers, *procs], timeout=60)
        bus = await MemoryBus.connect(stack.nats_url, namespace="flaky", timeout=10)
        mem = bus.agent(workflow_id="wf_1", agent_id="probe", session_id="s1")
        codes: Counter[str] = Counter()
        rng = random.Random(7)

        async def one(i: int, ids: list[str]) -> None:
            try:
                match i % 9:
                    case 0:
                        await mem.add("knowledge", f"note {i} about rivers and kayaks")
                    case 1:
                        await mem.search("kayak river", limit=5)
                    case 2:
                        await mem.get(ids[:3])
                    case 3:
                        await mem.list(limit=5)
                    case 4:
                        await mem.describe()
                    case 5:
                        await mem.recall("where do we kayak?")
                    case 6:
                        await mem.update(ids[i % len(ids)], importance=0.5)
                    case 7:
                        await mem.timeline(ids[0])
                    case _:
                        await mem.add("decision", f"use kayak {i}", dedup="semantic")
                codes["ok"] += 1
            except BusError as exc:
                codes[exc.code] += 1

        for _round in range(8):
            ids = [(await mem.add("knowledge", f"kayak trip {j}")).id for j in range(3)]
            burst = [asyncio.ensure_future(one(i, ids)) for i in range(90)]
            await asyncio.sleep(rng.uniform(0.0, 0.03))
            await asyncio.to_thread(stack.stop_server, "redis")
            await asyncio.gather(*burst)
            await asyncio.to_thread(stack.start_redis)

            async def serving() -> bool:
                try:
                    await mem.describe()
                    return True
                except Unavailable:
                    return False

            await _eventually(serving)
        await bus.close()
    assert set(codes) <= {"ok", "unavailable", "not_found"}, codes
    assert codes["unavailable"] > 0, codes


@pytest.fixture
async def persisted_stack() -> AsyncIterator[EmbeddedStack]:
    """Servers of their own, Redis persisted (as `deploy up` runs it), and one handler."""
    stack = EmbeddedStack.temporary()
    stack.persist = True
    try:
        stack.start_servers()
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": "hash"})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=60)
        yield stack
    finally:
        stack.stop()


async def _restart_redis_loading_slowly(
    stack: EmbeddedStack, keys: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[asyncio.Future[Any], list[str]]:
    """Stop Redis, then start it again on a data set that takes about `keys` ms to load;
    the start (a thread: it returns once Redis has loaded) and what the stack said."""
    await asyncio.to_thread(fill_for_slow_loading, stack.redis_port, keys)
    await asyncio.to_thread(stack.stop_server, "redis")
    monkeypatch.setenv("MEMBUS_REDIS_OPTIONS", LOAD_SLOWLY)
    said: list[str] = []
    stack.say = said.append
    return asyncio.ensure_future(asyncio.to_thread(stack.start_redis)), said


async def _refusals_until(
    done: asyncio.Future[Any], call: Callable[[], Coroutine[Any, Any, Any]]
) -> list[str]:
    """Call `call` every 0.1 s until `done`: the messages of its `unavailable` answers (any
    other error fails the test)."""
    refused = []
    while not done.done():
        try:
            await call()
        except Unavailable as exc:
            refused.append(exc.message)
        await asyncio.sleep(0.1)
    await done
    return refused


async def test_a_handler_answers_unavailable_while_redis_loads_its_data_then_serves(
    persisted_stack: EmbeddedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis restarted on a data set that takes seconds to load answers LOADING to every
    # command until then: the handler says so (`unavailable`, safe to retry), and serves
    # again by itself once Redis has loaded, with what was written before.
    stack = persisted_stack
    (handler,) = stack.handlers
    async with await MemoryBus.connect(stack.nats_url, namespace="loading", timeout=10) as bus:
        mem = bus.agent(workflow_id="wf_1")
        kept = await mem.add("knowledge", "written before Redis restarted")
        starting, said = await _restart_redis_loading_slowly(stack, 5000, monkeypatch)

        refused = await _refusals_until(starting, lambda: mem.get([kept.id]))

        assert any("is loading" in line for line in said), said  # the load took a while
        loading = [m for m in refused if "loading its data from disk" in m]
        assert len(loading) >= 5, refused
        assert "retry" in loading[0]

        async def serving() -> bool:
            try:
                got = await mem.get([kept.id])
            except Unavailable:
                return False
            return [m.content for m in got.memories] == ["written before Redis restarted"]

        await _eventually(serving, timeout=10)
        hits = await mem.search("written before Redis restarted", limit=1)
        assert [h.id for h in hits.results] == [kept.id]
    assert handler.poll() is None  # never restarted


async def test_a_handler_started_while_redis_loads_serves_once_it_has_loaded(
    persisted_stack: EmbeddedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A handler whose start-up (key layout, scripts, a namespace's index) meets a loading
    # Redis neither exits nor keeps a broken state: it answers `unavailable` meanwhile.
    stack = persisted_stack
    async with await MemoryBus.connect(stack.nats_url, namespace="loading", timeout=10) as bus:
        mem = bus.agent(workflow_id="wf_1")
        kept = await mem.add("knowledge", "written before the handler restarted")
        await asyncio.to_thread(stack.stop_handler, stack.handlers[0])
        starting, _ = await _restart_redis_loading_slowly(stack, 9000, monkeypatch)
        procs = stack.start_handlers(1, {"MEMBUS_EMBEDDER": "hash"})
        await wait_for_handlers(stack.nats_url, 1, procs, timeout=60)
        assert not starting.done(), "Redis loaded before the handler started: load more keys"

        refused = await _refusals_until(starting, lambda: mem.search("written before", limit=1))

        assert any("loading its data from disk" in m for m in refused), refused

        async def serving() -> bool:
            try:
                hits = await mem.search("written before the handler restarted", limit=1)
            except Unavailable:
                return False
            return [h.id for h in hits.results] == [kept.id]

        await _eventually(serving, timeout=10)
        added = await mem.add("knowledge", "written after Redis loaded")
        assert (await mem.get([added.id])).memories[0].content == "written after Redis loaded"
    assert procs[0].poll() is None


async def test_the_demo_retries_while_redis_loads_its_data(
    persisted_stack: EmbeddedStack,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # `unavailable` is safe to retry: the demo (`make up`'s) sends again what a Redis still
    # loading its data refused, a bounded number of times, and runs to its end.
    stack = persisted_stack
    starting, _ = await _restart_redis_loading_slowly(stack, 4000, monkeypatch)
    await run_demo(stack.nats_url)
    assert starting.done()
    out = capfd.readouterr().out
    assert "add: unavailable, retrying in 0.5 s: The memory store (Redis) is loading" in out
    assert "== observer saw" in out
