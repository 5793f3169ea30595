"""Durable writes (PROTOCOL "Durable writes"): `memq.<ns>.<op>` through the JetStream stream
MEMBUS_WRITES and the handlers' shared consumer, applied once, reported by events that carry
the request id, rejected with a `rejected` event when they can never succeed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
import nats
import pytest
from inprocess import InProcess
from nats.aio.subscription import Subscription
from nats.js.errors import NotFoundError, ServiceUnavailableError
from stacks import private_stack

from bus import Accepted, MemoryBus
from contracts.messages import Event, RejectedEvent, UpdateRequest
from contracts.subjects import DURABLE_CONSUMER, DURABLE_STREAM
from handlers.dispatch import dispatch
from handlers.ops.deps import DurableWrite

pytestmark = pytest.mark.transports("nats")


@contextlib.asynccontextmanager
async def events(bus: MemoryBus, subject: str = ">") -> AsyncIterator[Subscription]:
    sub = await bus.nc.subscribe(f"mem.{bus.namespace}.events.{subject}")
    await bus.nc.flush()
    try:
        yield sub
    finally:
        await sub.unsubscribe()


async def next_event(sub: Subscription, timeout: float = 10) -> Event:
    return msgspec.json.decode((await sub.next_msg(timeout=timeout)).data, type=Event)


async def test_a_durable_add_is_applied_once_and_its_event_names_the_request(
    bus: MemoryBus,
) -> None:
    mem = bus.agent(workflow_id="wf_d", agent_id="writer")
    async with events(bus, "wf_d.>") as sub:
        accepted = await mem.durable.add("context", "written through JetStream")
        assert isinstance(accepted, Accepted)
        assert accepted.stream == "MEMBUS_WRITES" and not accepted.duplicate
        event = await next_event(sub)
    assert (event.action, event.request_id) == ("added", accepted.request_id)
    got = await mem.get([event.id])
    assert [m.content for m in got.memories] == ["written through JetStream"]


async def test_a_retried_publish_with_the_same_request_id_is_applied_once(
    bus: MemoryBus,
) -> None:
    mem = bus.agent(workflow_id="wf_d")
    async with events(bus, "wf_d.>") as sub:
        first = await mem.durable("req-once-1").add("context", "once only")
        again = await mem.durable("req-once-1").add("context", "once only")
        assert again.duplicate and again.seq == first.seq
        event = await next_event(sub)
        with pytest.raises(nats.errors.TimeoutError):
            await sub.next_msg(timeout=1.0)
    assert event.request_id == "req-once-1"
    assert (await mem.describe()).total == 1


async def test_durable_update_delete_and_capture(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_d", agent_id="writer")
    kept = await mem.add("context", "before the update")
    async with events(bus, "wf_d.>") as sub:
        await mem.durable.update(kept.id, content="after the update")
        assert (await next_event(sub)).action == "updated"
        captured = await mem.durable.capture("grep", args={"path": "a.py"}, output="ok")
        assert isinstance(captured, Accepted)
        trace = await next_event(sub)
        assert (trace.type, trace.request_id) == ("trace", captured.request_id)
        await mem.durable.delete([kept.id, trace.id])
        deleted = {(await next_event(sub)).id, (await next_event(sub)).id}
    assert deleted == {kept.id, trace.id}
    assert (await mem.describe()).total == 0


async def test_a_write_that_can_never_succeed_is_rejected_not_retried(bus: MemoryBus) -> None:
    mem = bus.agent(workflow_id="wf_d")
    async with events(bus, "_rejected.>") as sub:
        accepted = await mem.durable.update("01NOSUCHMEMORY000000000000", content="x")
        msg = await sub.next_msg(timeout=10)
        rejected = msgspec.json.decode(msg.data, type=RejectedEvent)
        assert msg.subject == f"mem.{bus.namespace}.events._rejected.update.rejected"
        assert (rejected.request_id, rejected.code) == (accepted.request_id, "not_found")
        # Raw bytes that are no request at all: rejected as invalid_request.
        js = bus.nc.jetstream()
        await js.publish(
            f"memq.{bus.namespace}.add", b"{not json", headers={"Nats-Msg-Id": "bad-json-1"}
        )
        bad = msgspec.json.decode((await sub.next_msg(timeout=10)).data, type=RejectedEvent)
        assert (bad.request_id, bad.code) == ("bad-json-1", "invalid_request")
        with pytest.raises(nats.errors.TimeoutError):  # not redelivered
            await sub.next_msg(timeout=1.5)


async def test_durable_writes_keep_the_callers_trust(bus: MemoryBus) -> None:
    inner = MemoryBus(bus.nc, bus.namespace, bus.timeout, owns=False, trust="inner")
    mem = inner.agent(workflow_id="wf_d")
    async with events(bus, "wf_d.>") as sub:
        await mem.durable.add("context", "for the inner circle")
        event = await next_event(sub)
    assert event.store == "shared"
    familiar = MemoryBus(bus.nc, bus.namespace, bus.timeout, owns=False, trust="familiar")
    async with events(bus, "_rejected.>") as sub:
        await familiar.agent().durable.add("context", "into private", store="private")
        rejected = msgspec.json.decode((await sub.next_msg(timeout=10)).data, type=RejectedEvent)
    assert rejected.code == "forbidden"


@pytest.mark.processes  # a stack of its own
async def test_writes_wait_out_a_redis_outage_and_a_redelivered_write_is_not_applied_twice() -> (
    None
):
    # A short JetStream duplicate window, so that a re-publish reaches the handler, which
    # must then recognise the request id itself.
    env = {"MEMBUS_DURABLE_DUPLICATE_WINDOW_S": "0.5"}
    async with private_stack("hash", env=env) as stack:
        bus = await MemoryBus.connect(stack.nats_url, namespace="outage")
        try:
            mem = bus.agent(workflow_id="wf_o")
            async with events(bus, "wf_o.>") as sub:
                stack.stop_server("redis")
                sent = [
                    await mem.durable.add("context", f"written while Redis is down {i}")
                    for i in range(5)
                ]
                await asyncio.sleep(1.0)  # the handler tries, finds Redis down, backs off
                await asyncio.to_thread(stack.start_redis)
                seen = {(await next_event(sub, timeout=60)).request_id for _ in sent}
                assert seen == {a.request_id for a in sent}

                await asyncio.sleep(1.0)  # past JetStream's duplicate window
                again = await mem.durable(sent[0].request_id).add(
                    "context", "written while Redis is down 0"
                )
                assert not again.duplicate  # JetStream took it: the handler must skip it
                with pytest.raises(nats.errors.TimeoutError):
                    await sub.next_msg(timeout=2.0)
            listed = await mem.list(limit=20)
            assert sorted(m.content for m in listed.memories) == sorted(
                f"written while Redis is down {i}" for i in range(5)
            )
        finally:
            await bus.close()


async def settled(bus: MemoryBus, timeout: float = 60) -> None:
    """Until the handlers' shared consumer has every write in the stream acknowledged."""
    js = bus.nc.jetstream()
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            info: object = await js.consumer_info(DURABLE_STREAM, DURABLE_CONSUMER)
        except (NotFoundError, ServiceUnavailableError, nats.errors.TimeoutError) as exc:
            info = exc  # a cluster electing the consumer's leader after losing a server
        else:
            if info.num_pending == 0 and info.num_ack_pending == 0:  # type: ignore[attr-defined]
                return
        assert asyncio.get_running_loop().time() < deadline, info
        await asyncio.sleep(0.05)


async def test_the_last_acknowledged_write_to_a_memory_wins(bus: MemoryBus) -> None:
    # One writer, each update acknowledged before the next is sent, through two handlers
    # that pull batches from the one consumer: each field ends as its last write set it.
    mem = bus.agent(workflow_id="wf_d")
    for trial in range(4):
        kept = await mem.add("context", f"trial {trial} version start")
        for i in range(30):
            if i % 3 == 2:
                await mem.durable.update(kept.id, tags=[f"t{i}"])
            else:
                await mem.durable.update(kept.id, content=f"trial {trial} version {i}")
        await mem.durable.update(kept.id, importance=0.25)
        await settled(bus)
        [got] = (await mem.get([kept.id])).memories
        assert (got.content, got.tags, got.importance) == (
            f"trial {trial} version 28",
            ["t29"],
            0.25,
        ), trial


async def test_a_write_applied_late_changes_nothing_a_later_one_set(
    bus: MemoryBus, in_process: InProcess
) -> None:
    mem = bus.agent(workflow_id="wf_d")
    kept = await mem.add("context", "first words", tags=["first"])
    subject = f"memq.{bus.namespace}.update"
    early = UpdateRequest(id=kept.id, content="early words", tags=["early"])
    late = UpdateRequest(id=kept.id, content="late words")
    deps = in_process.deps
    # The later write (sequence 8) is applied first, as another handler may apply it.
    for seq, body in ((8, late), (7, early)):
        write = DurableWrite(f"req-{seq}", deps.clock(), (1, seq))
        _, error = await dispatch("update", subject, msgspec.json.encode(body), deps, write)
        assert error is None
    [got] = (await mem.get([kept.id])).memories
    assert (got.content, got.tags) == ("late words", ["early"])
    # Applied again, the early write still changes nothing the later one set.
    write = DurableWrite("req-7", deps.clock(), (1, 7))
    _, error = await dispatch("update", subject, msgspec.json.encode(early), deps, write)
    assert error is None
    [again] = (await mem.get([kept.id])).memories
    assert (again.content, again.tags) == ("late words", ["early"])
    # A stream made anew (a later creation time) starts over at sequence 1, and wins.
    write = DurableWrite("req-new", deps.clock(), (2, 1))
    renewed = msgspec.json.encode(UpdateRequest(id=kept.id, content="after a new stream"))
    _, error = await dispatch("update", subject, renewed, deps, write)
    assert error is None
    assert (await mem.get([kept.id])).memories[0].content == "after a new stream"
    history = await mem.history(kept.id)
    assert [e.event for e in history.entries] == ["added", "updated", "updated", "updated"]


async def test_a_rejected_writes_event_quotes_no_secret_of_its_request(bus: MemoryBus) -> None:
    # The error quotes an unknown field's name; the event is kept by a webhook's stream.
    secret = "sk-proj-" + "a1B2c3D4e5" * 4
    js = bus.nc.jetstream()
    async with events(bus, "_rejected.>") as sub:
        body = msgspec.json.encode({"type": "fact", "content": "x", secret: 1})
        await js.publish(f"memq.{bus.namespace}.add", body, headers={"Nats-Msg-Id": "quoted-1"})
        msg = await sub.next_msg(timeout=10)
    rejected = msgspec.json.decode(msg.data, type=RejectedEvent)
    assert (rejected.request_id, rejected.code) == ("quoted-1", "invalid_request")
    assert "Unknown field" in rejected.error and "[redacted:api_key]" in rejected.error
    assert secret not in msg.data.decode()
