"""Erasure (PROTOCOL v4, "Erasure"): `delete` with `erase` leaves no byte of the memories'
text in Redis or in the bus's JetStream streams, keeps their history as tombstones, and is
full trust only.

The handler here runs in this process with what a deployment has and the session's handler
processes lack: an embedding cache in Redis (around the hash embedder), the durable
consumer, and the JetStream access that erasure scrubs.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from conftest import Servers
from inprocess import InProcess
from nats.aio.client import Client as NatsClient
from nats.js.errors import NotFoundError
from redisvl.extensions.cache.embeddings import EmbeddingsCache

from bus import Forbidden, MemoryBus
from bus.webhook import consumer_config, ensure_stream, stream_name
from contracts.messages import Event
from contracts.subjects import event_subject
from handlers.durable import DurableWriteConsumer
from handlers.embed import HashEmbedder
from handlers.embed.cache import CachedEmbedder, entry_key
from handlers.service import make_deps, redis_client
from handlers.settings import load_settings
from handlers.store.keys import EMBED_CACHE
from handlers.store.sessions import session_key
from handlers.streams import Streams


@contextlib.asynccontextmanager
async def handler_with_everything(servers: Servers) -> AsyncIterator[InProcess]:
    settings = load_settings({"MEMBUS_EMBEDDER": "hash", "MEMBUS_REDIS_URL": servers.redis_url})
    client = redis_client(servers.redis_url)
    nc = await nats.connect(servers.nats_url)
    inner = HashEmbedder(settings.hash_dimension)
    cache = EmbeddingsCache(name=EMBED_CACHE, ttl=600, async_redis_client=client)
    embedder = CachedEmbedder(inner, cache)
    deps = make_deps(
        settings, client, embedder, nc.publish, nc.max_payload, streams=Streams(nc.jetstream())
    )
    durable = DurableWriteConsumer(nc, deps)
    assert await durable.start()
    stop = asyncio.Event()
    running = asyncio.create_task(durable.run(stop))
    try:
        yield InProcess(nc, deps)
    finally:
        stop.set()
        await running
        await durable.close()
        await embedder.close()
        await deps.store.settle()
        await deps.store.replicas.aclose()
        await nc.drain()
        await client.aclose()


@pytest.fixture
async def here(servers: Servers) -> AsyncIterator[InProcess]:
    async with handler_with_everything(servers) as handler:
        yield handler


@pytest.fixture
async def ebus(here: InProcess, ns: str) -> AsyncIterator[MemoryBus]:
    b = await MemoryBus.connect(namespace=ns, nc=here)  # type: ignore[arg-type]
    yield b
    await b.close()


@contextlib.asynccontextmanager
async def webhook_stream(nc: NatsClient, ns: str) -> AsyncIterator[str]:
    """The namespace's webhook event stream, with a consumer that takes nothing: its events
    stay, as for a webhook whose receiver is down."""
    js = nc.jetstream()
    subject = f"mem.{ns}.events.>"
    info = await ensure_stream(js, ns, subject)
    name = info.config.name or stream_name(ns)
    await js.add_consumer(name, consumer_config("erasure-test", subject, "http://down.invalid"))
    try:
        yield name
    finally:
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(name)


async def every_redis_value(client: aioredis.Redis) -> AsyncIterator[tuple[bytes, bytes]]:
    """Every key of Redis and its value, dumped as bytes by its type."""
    async for key in client.scan_iter(count=1000):
        kind = (await client.type(key)).decode()
        value: Any
        if kind == "string":
            value = await client.get(key)
        elif kind == "hash":
            value = await client.hgetall(key)
        elif kind == "list":
            value = await client.lrange(key, 0, -1)
        elif kind == "set":
            value = await client.smembers(key)
        elif kind == "zset":
            value = await client.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            value = await client.xrange(key)
        elif kind == "none":
            continue  # expired since the SCAN
        else:  # a module's type (JSON, ...): its serialized form
            value = await client.dump(key)
        yield key, repr(value).encode() if not isinstance(value, bytes) else value


async def every_stream_message(nc: NatsClient) -> AsyncIterator[tuple[str, bytes]]:
    """Every message of every JetStream stream: its subject, headers and body."""
    js = nc.jetstream()
    for info in await js.streams_info():
        name = info.config.name or ""
        seq = max(info.state.first_seq, 1)
        while seq <= info.state.last_seq:
            try:
                msg = await js.get_msg(name, seq, subject=">", next=True)
            except NotFoundError:
                break
            yield (
                name,
                (msg.subject or "").encode() + repr(msg.headers).encode() + (msg.data or b""),
            )
            seq = (msg.seq or seq) + 1


async def hits(servers: Servers, nc: NatsClient, marker: str) -> list[str]:
    needle = marker.encode()
    found = []
    client = aioredis.Redis.from_url(servers.redis_url)
    try:
        async for key, value in every_redis_value(client):
            if needle in key or needle in value:
                found.append(f"redis {key!r}")
    finally:
        await client.aclose()
    async for stream, raw in every_stream_message(nc):
        if needle in raw:
            found.append(f"stream {stream}")
    return found


async def next_event(sub: Any, action: str, request_id: str | None = None) -> Event:
    """The next event of `action` (made by that durable write, if given)."""
    while True:
        event = msgspec.json.decode((await sub.next_msg(timeout=10)).data, type=Event)
        if event.action == action and request_id in (None, event.request_id):
            return event


async def test_an_erased_marker_is_nowhere_in_redis_or_jetstream(
    ebus: MemoryBus, here: InProcess, servers: Servers, ns: str
) -> None:
    marker = f"zq{uuid.uuid4().hex}"
    mem = ebus.agent(workflow_id="wf_e", agent_id="eraser")
    nc = here.nc
    events = await nc.subscribe(f"mem.{ns}.events.>")
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(events.unsubscribe)
        stream = await stack.enter_async_context(webhook_stream(nc, ns))
        plain = await mem.add(
            "knowledge",
            f"The {marker} plan starts on Monday",
            source=f"notes/{marker}.md",
            metadata={"origin": f"meeting about {marker}", "n": 1},
        )
        observed = await mem.add(
            "knowledge",
            title=f"Observation of {marker}",
            facts=[f"{marker} fact one", "plain fact"],
            narrative=f"It went {marker}-wards",
        )
        await mem.update(plain.id, content=f"The {marker} plan starts on Tuesday")
        durable = await mem.durable.add("context", f"durable {marker} gamma")
        await next_event(events, "added", durable.request_id)
        captured = await mem.capture("grep", args={"pattern": marker}, output=f"found {marker}")
        durable_capture = await mem.durable.capture("rg", args={"q": marker}, output=marker)
        await next_event(events, "added", durable_capture.request_id)
        await mem.recall(f"what about the {marker} plan", session_id="s-erase")
        found = await mem.search(f"{marker} plan")
        assert plain.id in {r.id for r in found.results}
        listed = await mem.list(limit=100)
        ids = [m.id for m in listed.memories]
        assert {plain.id, observed.id, captured.id} <= set(ids)
        assert len(ids) == 5  # two adds, a durable add, two captures
        assert await hits(servers, nc, marker), "the marker was written somewhere"
        # Kept by hash, not by text: the cache entries and the session's ids.
        rds = here.deps.store.client
        # Those this handler embedded: the durable writes may be taken by the session's
        # handler processes too (one queue of consumers), which cache nothing.
        here_made = {plain.id, observed.id, captured.id}
        cached = [
            entry_key(EMBED_CACHE, m.content, "hash/384")
            for m in listed.memories
            if m.id in here_made
        ]
        await here.deps.embedder.close()  # the cache writes that follow replies, done
        assert all([await rds.exists(k) for k in cached])
        session = session_key(ns, "s-erase")
        assert set(ids) & {k.decode() for k in await rds.hkeys(session)}

        reply = await mem.delete(ids, erase=True)

        assert (reply.deleted, reply.missing, reply.erased) == (5, [], 5)
        assert reply.erased_messages and reply.erased_messages >= 5  # the webhook's events
        assert reply.scan_complete is True
        assert await hits(servers, nc, marker) == []
        assert not any([await rds.exists(k) for k in cached])
        assert not set(ids) & {k.decode() for k in await rds.hkeys(session)}
        erased = await next_event(events, "deleted")
        assert (erased.erased, erased.preview) == (True, "")
        info = await nc.jetstream().stream_info(stream)
        assert info.state.messages >= 1  # the erasure's own `deleted` events, without text


async def test_an_erased_memory_keeps_a_tombstone_history_naming_who_and_when(
    ebus: MemoryBus,
) -> None:
    mem = ebus.agent(workflow_id="wf_e", agent_id="writer")
    added = await mem.add("knowledge", "Dana's phone number is in the vault")
    await mem.update(added.id, content="Dana's phone number moved", importance=0.9)
    eraser = ebus.agent(agent_id="dpo")

    reply = await eraser.delete([added.id], erase=True)
    history = await mem.history(added.id)

    assert (reply.deleted, reply.erased) == (1, 1)
    events = [e.event for e in history.entries]
    assert events == ["added", "updated", "erased"]
    last = history.entries[-1]
    assert last.agent_id == "dpo" and last.at is not None and last.changes == {}
    # The update's text is gone; its importance change (no text) stays.
    assert set(history.entries[1].changes) == {"importance"}
    assert (await mem.get([added.id])).memories == []


async def test_erase_after_a_delete_scrubs_the_history_left_and_reports_the_id_missing(
    ebus: MemoryBus,
) -> None:
    mem = ebus.agent(workflow_id="wf_e")
    added = await mem.add("knowledge", "first version")
    await mem.update(added.id, content="second version")
    assert (await mem.delete([added.id])).deleted == 1

    reply = await mem.delete([added.id, "01JZ8Q4M3V7T2K9D5X6R1N0BCA"], erase=True)
    history = await mem.history(added.id)

    assert (reply.deleted, reply.missing) == (0, [added.id, "01JZ8Q4M3V7T2K9D5X6R1N0BCA"])
    assert reply.erased == 1  # the history an earlier delete left
    assert [e.event for e in history.entries] == ["added", "updated", "deleted", "erased"]
    assert all("content" not in e.changes for e in history.entries)


async def test_erase_of_a_missing_id_answers_as_delete_does(ebus: MemoryBus) -> None:
    mem = ebus.agent()
    missing = "01JZ8Q4M3V7T2K9D5X6R1N0BCB"

    plain = await mem.delete([missing])
    erased = await mem.delete([missing], erase=True)

    assert (plain.deleted, plain.missing) == (erased.deleted, erased.missing) == (0, [missing])
    assert erased.erased == 0 and erased.erased_messages == 0
    assert plain.erased is msgspec.UNSET  # a plain delete's reply is as before v4


async def test_a_reduced_trust_erase_is_refused_and_erases_nothing(ebus: MemoryBus) -> None:
    inner = MemoryBus(ebus.nc, ebus.namespace, ebus.timeout, owns=False, trust="inner")
    mem = inner.agent(workflow_id="wf_e")
    added = await mem.add("knowledge", "a shared note")

    with pytest.raises(Forbidden) as refused:
        await mem.delete([added.id], erase=True)

    assert "full trust" in refused.value.message
    assert [m.id for m in (await mem.get([added.id])).memories] == [added.id]
    assert (await mem.delete([added.id])).deleted == 1  # a plain delete is allowed


async def test_an_event_published_just_after_the_streams_were_read_is_erased_too(
    here: InProcess, ebus: MemoryBus, servers: Servers, ns: str
) -> None:
    # A write whose script ran just before the erasure's publishes its event (a preview of
    # its text) late: here, right after the erasure first lists the streams.
    marker = f"late-{uuid.uuid4().hex}"
    mem = ebus.agent(agent_id="writer")
    async with webhook_stream(here.nc, ns):  # type: ignore[arg-type]
        added = await mem.add("fact", f"first text {marker}")
        streams = here.deps.streams
        assert streams is not None
        listed = streams._every_stream
        late = Event(
            action="updated",
            id=added.id,
            type="fact",
            workflow_id=None,
            agent_id="writer",
            at=datetime.now(UTC),
            preview=f"second text {marker}",
        )
        calls = 0

        async def list_then_publish() -> list[Any]:
            nonlocal calls
            calls += 1
            infos = await listed()
            if calls == 1:
                subject = event_subject(ns, None, "fact", "updated")
                await here.nc.publish(subject, msgspec.json.encode(late))
                await here.nc.flush()
            return infos

        streams._every_stream = list_then_publish  # type: ignore[method-assign]
        try:
            await mem.delete([added.id], erase=True)
        finally:
            streams._every_stream = listed  # type: ignore[method-assign]
        assert await hits(servers, here.nc, marker) == []  # type: ignore[arg-type]


async def test_a_message_gone_between_the_erasures_read_and_its_delete_fails_nothing(
    here: InProcess, ebus: MemoryBus, servers: Servers, ns: str
) -> None:
    # A durable write of the memory taken from the work queue (acknowledged, so removed)
    # after the erasure read it and before it deletes it: JetStream then answers the delete
    # "no message found" (code 500, err_code 10057), which is no failure of NATS.
    marker = f"gone-{uuid.uuid4().hex}"
    mem = ebus.agent(agent_id="writer")
    async with webhook_stream(here.nc, ns) as stream:  # type: ignore[arg-type]
        added = await mem.add("fact", f"first text {marker}")
        await mem.update(added.id, content=f"second text {marker}")
        streams = here.deps.streams
        assert streams is not None
        js = streams.js
        read = js.get_msg

        async def read_then_lose(name: str, seq: int, **kwargs: Any) -> Any:
            msg = await read(name, seq, **kwargs)
            if name == stream:
                await js.delete_msg(name, msg.seq)  # as an acknowledgement would
            return msg

        js.get_msg = read_then_lose  # type: ignore[method-assign]
        try:
            reply = await mem.delete([added.id], erase=True)
        finally:
            js.get_msg = read  # type: ignore[method-assign]
        assert (reply.deleted, reply.erased, reply.scan_complete) == (1, 1, True)
        assert await hits(servers, here.nc, marker) == []  # type: ignore[arg-type]


async def test_a_webhook_stream_is_read_whole_across_the_gaps_earlier_erasures_left(
    here: InProcess, ebus: MemoryBus, servers: Servers, ns: str
) -> None:
    # A namespace's own stream is read by sequence, many at once; deleted messages are gaps.
    mem = ebus.agent(agent_id="writer")
    async with webhook_stream(here.nc, ns):  # type: ignore[arg-type]
        markers = [f"gap-{i}-{uuid.uuid4().hex}" for i in range(3)]
        added = [await mem.add("fact", f"text {m}") for m in markers]
        await mem.add("fact", "a memory that stays")
        for i in range(200):  # more events than one window of reads
            await mem.update(added[1].id, content=f"text {markers[1]} revised {i}")
        first = await mem.delete([added[0].id], erase=True)
        second = await mem.delete([added[1].id], erase=True)
        third = await mem.delete([added[2].id], erase=True)
        assert [r.erased_messages for r in (first, second, third)] == [1, 201, 1]
        assert all(r.scan_complete for r in (first, second, third))
        for marker in markers:
            assert await hits(servers, here.nc, marker) == []  # type: ignore[arg-type]
