"""Faults with real processes: a handler SIGKILLed during durable and during
request/reply writes (SIGSTOPped first until writes are provably in its hands), Redis and
NATS stopped (SIGTERM) or killed (SIGKILL) and restarted during writes, a handler started
while Redis is down. Each test ends with: every acknowledged write is there exactly once
(and nothing that was never sent is there).

"Acknowledged" is a request/reply add that got its reply, or a durable add that got
JetStream's `Accepted`. A write that raised (timeout, unavailable) may or may not be there,
but never twice. "Exactly once" is checked on the store after the durable consumer has no
write left (the stream is a work queue: empty once every write is acknowledged): one memory
per content marker, each with `mention_count == 1` (a durable write applied twice would count
a mention on its first memory, exact dedup being on).

Each test runs its own embedded stack with persistence on (`persist=True`: Redis with
`--appendonly yes`, appendfsync everysec; JetStream file store with `sync_interval: always`),
never the session's. Figures (acknowledged, failed, applied, recovery time) are printed
(`pytest -s`); servers' and handlers' logs go to .membus/test-logs/faults/<test>/.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
import pytest
import redis

from bus import AgentMemory, BusError, MemoryBus, Unavailable
from contracts.messages import Memory
from contracts.subjects import DURABLE_CONSUMER, DURABLE_STREAM
from deploy.embedded import EmbeddedStack, wait_for_handlers

# Each test starts servers or handler processes of its own.
pytestmark = pytest.mark.processes


TYPE = "decision"  # workflow-scoped and permanent: nothing expires during a test
HANDLER_ENV = {"MEMBUS_EMBEDDER": "hash"}
LOG_DIR = Path(os.environ.get("MEMBUS_TEST_LOG_DIR", ".membus/test-logs")) / "faults"
# What a write may raise while a process is down: it was then not acknowledged.
FAULT_ERRORS = (BusError, nats.errors.Error, asyncio.TimeoutError)
SETTLE_S = 60.0  # a killed handler's writes come back after the consumer's ack_wait (30 s)


# --- the stack and its processes ------------------------------------------------------------


@contextlib.asynccontextmanager
async def fault_stack(
    request: pytest.FixtureRequest, handlers: int, *, redis_up: bool = True
) -> AsyncIterator[EmbeddedStack]:
    """Servers with persistence on and `handlers` handler processes, all of this test's."""
    stack = EmbeddedStack.temporary()
    stack.persist = True
    stack.log_dir = LOG_DIR / request.node.name
    shutil.rmtree(stack.log_dir, ignore_errors=True)
    try:
        stack.start_servers()
        if not redis_up:
            stack.stop_server("redis")
        procs = stack.start_handlers(handlers, HANDLER_ENV)
        await wait_for_handlers(stack.nats_url, handlers, procs, timeout=60)
        yield stack
    finally:
        # The test is over: SIGTERM every handler at once and SIGKILL those still running
        # after a few seconds (stop() would give each in turn 15 s).
        for proc in stack.handlers:
            proc.terminate()
        deadline = time.monotonic() + 5
        for proc in stack.handlers:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stack.handlers.clear()
        stack.stop()


@contextlib.asynccontextmanager
async def connected(
    stack: EmbeddedStack, namespace: str, **options: Any
) -> AsyncIterator[MemoryBus]:
    bus = await MemoryBus.connect(stack.nats_url, namespace=namespace, **options)
    try:
        yield bus
    finally:
        try:
            await asyncio.wait_for(bus.close(), 10)
        except (nats.errors.Error, TimeoutError):  # NATS down after a failure: just close
            await bus.nc.close()


def kill_handler(stack: EmbeddedStack, proc: Any) -> None:
    """SIGKILL: no drain, its unacknowledged durable writes stay with the consumer."""
    proc.kill()
    proc.wait()
    stack.handlers.remove(proc)


async def durable_writes_held(bus: MemoryBus, victim: Any) -> int:
    """SIGSTOP `victim` until writes are provably in its hands: the consumer's ack floor
    stays put for half a second while writes are pending (the other handler applies one in
    milliseconds). The number pending then; a handler that held none is let go on and tried
    again, so the kill that follows always catches writes in flight."""
    for _ in range(5):
        victim.send_signal(signal.SIGSTOP)
        floor, since = -1, time.monotonic()
        deadline = since + 3
        while time.monotonic() < deadline:
            info = await consumer(bus)
            if info.ack_floor.stream_seq != floor:
                floor, since = info.ack_floor.stream_seq, time.monotonic()
            elif info.num_ack_pending > 0 and time.monotonic() - since >= 0.5:
                return int(info.num_ack_pending)
            await asyncio.sleep(0.1)
        victim.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.3)
    raise AssertionError("the handler never held a durable write")


async def requests_held(writes: Writes, victim: Any) -> None:
    """SIGSTOP `victim` until every writer waits on it: no reply for half a second (the
    other handler answers in milliseconds)."""
    victim.send_signal(signal.SIGSTOP)
    await until(
        lambda: time.monotonic() - max(writes.acked.values()) >= 0.5,
        5,
        "every writer waiting on the stopped handler",
    )


def stop_server(stack: EmbeddedStack, name: str, how: str) -> None:
    if how == "SIGTERM":
        stack.stop_server(name)
    else:
        proc = stack.servers.pop(name)
        proc.kill()
        proc.wait()


# --- writes and what became of them ---------------------------------------------------------


@dataclass
class Writes:
    """Adds of distinct content markers `<prefix>-<n>` and their outcome."""

    prefix: str
    durable: bool
    acked: dict[str, float] = field(default_factory=dict)  # marker: when it was acknowledged
    failed: dict[str, str] = field(default_factory=dict)  # marker: what it raised
    ids: dict[str, str] = field(default_factory=dict)  # marker: the id its reply named

    @property
    def sent(self) -> set[str]:
        return set(self.acked) | set(self.failed)

    def acked_after(self, moment: float) -> int:
        return sum(1 for at in self.acked.values() if at > moment)


async def add_one(mem: AgentMemory, writes: Writes, n: int) -> bool:
    """Add marker `n`; True when it was acknowledged."""
    marker = f"{writes.prefix}-{n:04d}"
    try:
        if writes.durable:
            await mem.durable(marker).add(TYPE, marker)
        else:
            writes.ids[marker] = (await mem.add(TYPE, marker)).id
    except FAULT_ERRORS as exc:
        writes.failed[marker] = type(exc).__name__
        return False
    writes.acked[marker] = time.monotonic()
    return True


async def write(
    mem: AgentMemory,
    writes: Writes,
    stop: asyncio.Event,
    limit: int,
    concurrency: int,
    pace_s: float = 0.0,
) -> None:
    """Add markers with `concurrency` writers until `limit` are sent or `stop` is set."""
    numbers = itertools.count(len(writes.sent))

    async def writer() -> None:
        while not stop.is_set() and (n := next(numbers)) < limit:
            await add_one(mem, writes, n)
            if pace_s:
                await asyncio.sleep(pace_s)

    await asyncio.gather(*(writer() for _ in range(concurrency)))


class Events:
    """Counts the namespace's events, by action and by durable request id."""

    def __init__(self) -> None:
        self.actions: Counter[str] = Counter()
        self.requests: Counter[tuple[str, str]] = Counter()

    @classmethod
    async def follow(cls, bus: MemoryBus) -> Events:
        events = cls()
        await bus.nc.subscribe(f"mem.{bus.namespace}.events.>", cb=events._on)
        await bus.nc.flush()
        return events

    async def _on(self, msg: Any) -> None:
        body = msgspec.json.decode(msg.data)
        action = body.get("action") or "rejected"
        self.actions[action] += 1
        if body.get("request_id"):
            self.requests[(action, body["request_id"])] += 1

    @property
    def repeated(self) -> dict[tuple[str, str], int]:
        """Durable writes whose event came more than once (an apply repeated)."""
        return {key: n for key, n in self.requests.items() if n > 1}


async def until(check: Callable[[], bool | Awaitable[bool]], timeout: float, what: str) -> float:
    """Poll `check` until true (a fault error counts as not yet); the seconds it took."""
    started = time.monotonic()
    while True:
        with contextlib.suppress(*FAULT_ERRORS):
            done = check()
            if done if isinstance(done, bool) else await done:
                return time.monotonic() - started
        assert time.monotonic() - started < timeout, f"not within {timeout}s: {what}"
        await asyncio.sleep(0.1)


async def stored(mem: AgentMemory) -> list[Memory]:
    found: list[Memory] = []
    while True:
        page = await mem.list(limit=200, offset=len(found))
        found += page.memories
        if len(page.memories) < 200:
            return found


async def consumer(bus: MemoryBus) -> Any:
    return await bus.nc.jetstream().consumer_info(DURABLE_STREAM, DURABLE_CONSUMER)


async def redeliveries(bus: MemoryBus) -> int:
    """Deliveries beyond the first of each write so far (the consumer's sequence counts
    every delivery, the stream's each write once)."""
    stream = await bus.nc.jetstream().stream_info(DURABLE_STREAM)
    return int((await consumer(bus)).delivered.consumer_seq - stream.state.last_seq)


def running_nats_config(stack: EmbeddedStack) -> str:
    """The configuration file the running nats-server was started with (`-c`)."""
    argv = Path(f"/proc/{stack.servers['nats'].pid}/cmdline").read_bytes().split(b"\0")
    return Path(argv[argv.index(b"-c") + 1].decode()).read_text()


def handler_log_events(stack: EmbeddedStack, event: str) -> int:
    """How often the handlers of this test logged `event` (e.g. durable.duplicate)."""
    assert stack.log_dir is not None
    needle = f'"event": "{event}"'
    return sum(
        line.count(needle)
        for path in stack.log_dir.glob("handler-*.log")
        for line in path.read_text().splitlines()
    )


async def drained(bus: MemoryBus) -> bool:
    """No durable write left: none in the work-queue stream, none pending or unacknowledged."""
    stream = await bus.nc.jetstream().stream_info(DURABLE_STREAM)
    info = await consumer(bus)
    return stream.state.messages == 0 and info.num_pending == 0 and info.num_ack_pending == 0


async def settle(bus: MemoryBus, mem: AgentMemory, *writes: Writes) -> float:
    """Wait until the consumer is drained and every acknowledged write is listed."""
    acked = set().union(*(set(w.acked) for w in writes))

    async def done() -> bool:
        return await drained(bus) and acked <= {m.content for m in await stored(mem)}

    return await until(done, SETTLE_S, "every acknowledged write applied")


async def assert_exactly_once(mem: AgentMemory, *writes: Writes) -> Counter[str]:
    """Every acknowledged write there once, a failed one at most once, nothing else."""
    memories = await stored(mem)
    counts = Counter(m.content for m in memories)
    acked = set().union(*(set(w.acked) for w in writes))
    sent = set().union(*(w.sent for w in writes))
    assert {c: n for c, n in counts.items() if n > 1} == {}, "a write stored twice"
    assert sorted(acked - counts.keys()) == [], "acknowledged writes lost"
    assert sorted(counts.keys() - sent) == [], "memories nobody wrote"
    assert {m.content: m.mention_count for m in memories if m.mention_count != 1} == {}, (
        "a write applied twice (a mention counted on its own memory)"
    )
    assert (await mem.describe()).total == len(memories)
    return counts


def report(name: str, **figures: object) -> None:
    print(f"\nFAULT {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def failures(*writes: Writes) -> dict[str, int]:
    return dict(Counter(e for w in writes for e in w.failed.values()))


# --- the tests ------------------------------------------------------------------------------


async def test_a_handler_killed_during_durable_writes_loses_none_and_applies_none_twice(
    request: pytest.FixtureRequest,
) -> None:
    async with fault_stack(request, 2) as stack, connected(stack, "killdurable") as bus:
        mem = bus.agent(workflow_id="wf_k")
        events = await Events.follow(bus)
        writes = Writes("durable", durable=True)
        stop = asyncio.Event()
        writer = asyncio.create_task(write(mem, writes, stop, 600, 8, pace_s=0.05))
        try:
            # Kill one of the two handlers mid-stream, with writes in its hands.
            await until(lambda: events.actions["added"] >= 150, 20, "150 writes applied")
            victim = stack.handlers[0]
            at_kill = await durable_writes_held(bus, victim)
            kill_handler(stack, victim)
            killed = time.monotonic()
            replacement = stack.start_handlers(1, HANDLER_ENV)
            await writer
        finally:
            stop.set()
            await writer
        await wait_for_handlers(stack.nats_url, 2, replacement, timeout=60)
        await settle(bus, mem, writes)
        recovery = time.monotonic() - killed
        counts = await assert_exactly_once(mem, writes)
        assert len(writes.acked) == 600 and not writes.failed  # NATS stayed up throughout
        assert events.repeated == {}
        report(
            request.node.name,
            acknowledged=len(writes.acked),
            applied=len(counts),
            duplicates=0,
            pending_at_kill=at_kill,
            redeliveries=await redeliveries(bus),
            skipped_as_applied=handler_log_events(stack, "durable.duplicate"),
            added_events=events.actions["added"],
            settled_after_kill_s=round(recovery, 1),
        )


async def test_a_handler_killed_during_request_reply_writes_keeps_every_replied_add_once(
    request: pytest.FixtureRequest,
) -> None:
    async with (
        fault_stack(request, 2) as stack,
        connected(stack, "killreply", timeout=2.0) as bus,
    ):
        mem = bus.agent(workflow_id="wf_k")
        writes = Writes("reply", durable=False)
        stop = asyncio.Event()
        writer = asyncio.create_task(write(mem, writes, stop, 300, 8))
        try:
            await until(lambda: len(writes.acked) >= 100, 20, "100 adds replied")
            victim = stack.handlers[0]
            await requests_held(writes, victim)  # so that the kill catches requests in hand
            kill_handler(stack, victim)
            killed = time.monotonic()
            replacement = stack.start_handlers(1, HANDLER_ENV)
            await writer
        finally:
            stop.set()
            await writer
        await wait_for_handlers(stack.nats_url, 2, replacement, timeout=60)
        settled = await settle(bus, mem, writes)
        counts = await assert_exactly_once(mem, writes)
        assert len(writes.acked) >= 200  # the other handler kept serving
        assert writes.failed  # those in the killed handler's hands
        # A reply that did come names the memory that holds its marker.
        by_id = {m.id: m.content for m in await stored(mem)}
        assert {marker: by_id.get(i) for marker, i in writes.ids.items()} == {
            marker: marker for marker in writes.ids
        }
        report(
            request.node.name,
            acknowledged=len(writes.acked),
            failed=failures(writes),
            failed_but_stored=len(set(writes.failed) & counts.keys()),
            applied=len(counts),
            duplicates=0,
            acked_after_kill=writes.acked_after(killed),
            settled_s=round(settled, 1),
        )


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
async def test_redis_restarted_during_writes_keeps_every_acknowledged_write_once(
    request: pytest.FixtureRequest, how: str
) -> None:
    async with fault_stack(request, 2) as stack, connected(stack, "redisrestart") as bus:
        with redis.Redis.from_url(stack.redis_url) as rds:
            config = rds.config_get("appendonly") | rds.config_get("appendfsync")
        assert config == {"appendonly": "yes", "appendfsync": "everysec"}
        mem = bus.agent(workflow_id="wf_r")
        # Written before the restart: only the AOF brings these back.
        before = [Writes("before-reply", durable=False), Writes("before-durable", durable=True)]
        never = asyncio.Event()
        await asyncio.gather(*(write(mem, w, never, 50, 4) for w in before))
        await settle(bus, mem, *before)

        during = [Writes("reply", durable=False), Writes("durable", durable=True)]
        replies, durables = during
        stop = asyncio.Event()
        writers = asyncio.gather(*(write(mem, w, stop, 2000, 4, pace_s=0.01) for w in during))
        try:
            await until(lambda: len(replies.acked) >= 30, 20, "writes under way")
            stop_server(stack, "redis", how)
            down = time.monotonic()
            # Down until the writers saw it: a request/reply add answered `unavailable`, and
            # durable writes accepted meanwhile (they wait in the stream).
            accepted = len(durables.acked)
            await until(
                lambda: bool(replies.failed) and len(durables.acked) >= accepted + 20,
                15,
                "writes while Redis is down",
            )
            await asyncio.to_thread(stack.start_redis)
            up = time.monotonic()
            await until(lambda: replies.acked_after(up) >= 20, 30, "request/reply serving again")
            served_again = time.monotonic() - up
        finally:
            stop.set()
            await writers
        await settle(bus, mem, *before, *during)
        settled = time.monotonic() - up
        counts = await assert_exactly_once(mem, *before, *during)
        assert all(w.acked and not w.failed for w in before)
        assert not durables.failed  # JetStream takes durable writes whatever Redis does
        report(
            request.node.name,
            before_restart=sum(len(w.acked) for w in before),
            acknowledged_reply=len(replies.acked),
            acknowledged_durable=len(durables.acked),
            durable_accepted_while_down=sum(1 for t in durables.acked.values() if down < t < up),
            failed=failures(*during),
            failed_but_stored=len(set(replies.failed) & counts.keys()),
            applied=len(counts),
            duplicates=0,
            redeliveries=await redeliveries(bus),
            durable_retries=handler_log_events(stack, "durable.retry"),
            redis_down_s=round(up - down, 1),
            reply_serving_after_s=round(served_again, 1),
            settled_after_restart_s=round(settled, 1),
        )


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
async def test_nats_restarted_during_durable_writes_keeps_every_accepted_write_once(
    request: pytest.FixtureRequest, how: str
) -> None:
    async with (
        fault_stack(request, 2) as stack,
        connected(stack, "natsrestart", timeout=2.0, reconnect_time_wait=0.5) as bus,
    ):
        # JetStream fsyncs each write before it acknowledges it.
        assert "sync_interval: always" in running_nats_config(stack)
        mem = bus.agent(workflow_id="wf_n")
        events = await Events.follow(bus)
        writes = Writes("durable", durable=True)
        stop = asyncio.Event()
        writer = asyncio.create_task(write(mem, writes, stop, 2000, 4, pace_s=0.01))
        try:
            await until(lambda: len(writes.acked) >= 50, 20, "writes under way")
            stop_server(stack, "nats", how)
            down = time.monotonic()
            await asyncio.sleep(1.0)  # the outage: clients and handlers see NATS gone
            await asyncio.to_thread(stack.start_nats)
            up = time.monotonic()
            await until(lambda: writes.acked_after(up) >= 50, 30, "durable writes accepted again")
            accepting_again = time.monotonic() - up
        finally:
            stop.set()
            await writer
        await wait_for_handlers(stack.nats_url, 2, stack.handlers, timeout=30)
        await settle(bus, mem, writes)
        settled = time.monotonic() - up
        after = Writes("after", durable=False)  # request/reply serves again too
        assert await add_one(mem, after, 0)
        counts = await assert_exactly_once(mem, writes, after)
        report(
            request.node.name,
            acknowledged=len(writes.acked),
            failed=failures(writes),
            failed_but_stored=len(set(writes.failed) & counts.keys()),
            applied=len(counts.keys() & writes.sent),
            duplicates=0,
            skipped_as_applied=handler_log_events(stack, "durable.duplicate"),
            repeated_events=len(events.repeated),
            nats_down_s=round(up - down, 1),
            accepting_after_s=round(accepting_again, 1),
            settled_after_restart_s=round(settled, 1),
        )


async def test_a_handler_started_while_redis_is_down_serves_once_redis_is_back(
    request: pytest.FixtureRequest,
) -> None:
    async with (
        fault_stack(request, 1, redis_up=False) as stack,  # it answers $SRV.PING regardless
        connected(stack, "noredis") as bus,
    ):
        mem = bus.agent(workflow_id="wf_s")
        events = await Events.follow(bus)
        with pytest.raises(Unavailable):
            await mem.add(TYPE, "refused: Redis is down")
        with pytest.raises(Unavailable):
            await mem.describe()
        writes = Writes("durable", durable=True)
        await write(mem, writes, asyncio.Event(), 20, 4)
        assert len(writes.acked) == 20 and not writes.failed
        # The handler tries them, finds Redis down, and lets them come back later.
        await until(
            lambda: _redelivered(bus, 1), 15, "the handler retried a write while Redis is down"
        )
        waiting = await consumer(bus)
        assert waiting.num_pending + waiting.num_ack_pending == 20
        await asyncio.to_thread(stack.start_redis)
        up = time.monotonic()
        after = Writes("after", durable=False)
        serving = await until(
            lambda: add_one(mem, after, len(after.sent)), 30, "request/reply adds served"
        )
        await settle(bus, mem, writes, after)
        settled = time.monotonic() - up
        counts = await assert_exactly_once(mem, writes, after)
        assert events.repeated == {}
        report(
            request.node.name,
            acknowledged=len(writes.acked),
            applied=len(counts.keys() & writes.sent),
            refused_after_redis_up=len(after.failed),
            duplicates=0,
            redelivered_while_down=waiting.num_redelivered,
            durable_retries=handler_log_events(stack, "durable.retry"),
            reply_serving_after_s=round(serving, 1),
            settled_after_redis_up_s=round(settled, 1),
        )


async def _redelivered(bus: MemoryBus, at_least: int) -> bool:
    return (await consumer(bus)).num_redelivered >= at_least
