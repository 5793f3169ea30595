"""Secrets on write (PROTOCOL.md v3): found in content, title, narrative, facts, the strings
of metadata and a capture's arguments and output before anything is stored or embedded;
redacted by default, refused with MEMBUS_SECRETS=block, stored as sent with off. The
samples are built from parts so that no key-shaped string sits in the repository."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import msgspec
import pytest

from bus import AgentMemory, MemoryBus
from bus.errors import InvalidRequest
from handlers.dispatch import dispatch

OPENAI = "sk-" + "proj-" + "Zq8xLm2Pv7Rt4Wn9Yb3Kc6Hd1Jf5Gs0AeU"
JWT = "ey" + "JhbGciOiJIUzI1NiJ9." + "ey" + "JzdWIiOiIxMjM0NTY3ODkwIn0." + "Zq8xLm2Pv7Rt4Wn9Yb3K"
PEM = (
    "-----BEGIN " + "PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
)
DSN = "postgres://app:" + "hunter2-Pa55" + "@db.internal:5432/main"

pytestmark = pytest.mark.transports("in_process", "nats")


async def test_an_added_secret_is_stored_redacted_and_the_reply_names_its_kind(
    wf123: AgentMemory,
) -> None:
    reply = await wf123.add("knowledge", f"the staging key is {OPENAI}, db at {DSN}")
    assert reply.redacted == ["api_key", "url_password"]
    (stored,) = (await wf123.get([reply.id])).memories
    assert stored.content == (
        "the staging key is [redacted:api_key],"
        " db at postgres://app:[redacted:url_password]@db.internal:5432/main"
    )
    # Nothing of the key is searchable: it never reached the index.
    assert (await wf123.search(OPENAI, mode="text")).results == []


async def test_title_narrative_and_facts_are_redacted_and_content_composed_from_them(
    wf123: AgentMemory,
) -> None:
    reply = await wf123.add(
        "knowledge",
        title=f"Login token {JWT}",
        narrative=f"The service signs with\n{PEM}\nand nothing else.",
        facts=[f"backup key {OPENAI}", "rotation is monthly"],
    )
    assert reply.redacted == ["jwt", "private_key", "api_key"]
    (m,) = (await wf123.get([reply.id])).memories
    assert m.title == "Login token [redacted:jwt]"
    assert m.narrative == "The service signs with\n[redacted:private_key]\nand nothing else."
    assert m.facts == ["backup key [redacted:api_key]", "rotation is monthly"]
    assert m.content.startswith("Login token [redacted:jwt]\n\nThe service signs with\n")
    assert OPENAI not in m.content and "PRIVATE KEY" not in m.content


async def test_strings_in_metadata_are_redacted_and_its_shape_kept(wf123: AgentMemory) -> None:
    # Adapters (LangGraph's store, sessions) keep whole values in metadata.
    meta = {"env": "staging", "auth": {"keys": [f"openai {OPENAI}", 3]}, "dsn": DSN, "n": 1}
    reply = await wf123.add("knowledge", "service settings", metadata=meta)
    assert reply.redacted == ["api_key", "url_password"]
    (m,) = (await wf123.get([reply.id])).memories
    assert m.metadata == {
        "env": "staging",
        "auth": {"keys": ["openai [redacted:api_key]", 3]},
        "dsn": "postgres://app:[redacted:url_password]@db.internal:5432/main",
        "n": 1,
    }


async def test_a_write_without_secrets_has_no_redacted_field(bus: MemoryBus, bus_client) -> None:
    if bus_client is None:
        raw = await bus.nc.request(
            f"mem.{bus.namespace}.add",
            json.dumps({"type": "knowledge", "content": "nothing secret here"}).encode(),
            timeout=5,
        )
        body = json.loads(raw.data)
    else:
        data, error = await dispatch(
            "add",
            f"mem.{bus.namespace}.add",
            b'{"type": "knowledge", "content": "nothing secret here"}',
            bus_client.deps,
        )
        assert error is None
        body = json.loads(data)
    assert body["success"] is True and "redacted" not in body


async def test_an_update_is_redacted_too(wf123: AgentMemory) -> None:
    added = await wf123.add("knowledge", "the key is not set yet")
    reply = await wf123.update(added.id, content=f"the key is {OPENAI}")
    assert reply.redacted == ["api_key"]
    (m,) = (await wf123.get([added.id])).memories
    assert m.content == "the key is [redacted:api_key]"
    history = await wf123.history(added.id)
    assert OPENAI not in msgspec.json.encode(history).decode()


async def test_a_capture_redacts_its_arguments_and_output(wf123: AgentMemory) -> None:
    reply = await wf123.capture(
        "http_get",
        args={"url": "https://api.example.com", "headers": {"Authorization": f"Bearer {JWT}"}},
        output=f"ok, token refreshed: {OPENAI}",
    )
    assert set(reply.redacted) >= {"jwt", "api_key"}
    (m,) = (await wf123.get([reply.id])).memories
    assert JWT not in m.content and OPENAI not in m.content
    assert "[redacted:" in (m.narrative or "")


@pytest.mark.transports("nats")
async def test_the_added_event_carries_the_redacted_text(bus: MemoryBus) -> None:
    sub = await bus.nc.subscribe(f"mem.{bus.namespace}.events.>")
    await bus.nc.flush()
    await bus.agent(workflow_id="wf_s").add("knowledge", f"key {OPENAI}")
    msg = await sub.next_msg(timeout=5)
    assert OPENAI.encode() not in msg.data and b"[redacted:api_key]" in msg.data
    await sub.unsubscribe()


@pytest.mark.transports("in_process")
async def test_block_refuses_the_write_naming_kind_and_field_and_writes_nothing(
    bus: MemoryBus, bus_client
) -> None:
    deps = bus_client.deps
    blocking = dataclasses.replace(
        deps, settings=msgspec.structs.replace(deps.settings, secrets="block")
    )
    bus_client.deps = blocking
    try:
        mem = bus.agent(workflow_id="wf_b")
        with pytest.raises(InvalidRequest, match=r"`facts` holds .*\(api_key\)"):
            await mem.add("knowledge", title="Keys", facts=["fine", f"bad {OPENAI}"])
        with pytest.raises(InvalidRequest, match=r"`output` holds .*\(jwt\)"):
            await mem.capture("login", output=f"token {JWT}")
        with pytest.raises(InvalidRequest, match=r"`metadata` holds .*\(jwt\)"):
            await mem.add("knowledge", "settings", metadata={"deep": [{"token": JWT}]})
        kept = await mem.add("knowledge", "no secret at all")
        assert kept.redacted is msgspec.UNSET
        assert [m.id for m in (await mem.list()).memories] == [kept.id]
    finally:
        bus_client.deps = deps


@pytest.mark.transports("in_process")
async def test_off_stores_as_sent(bus: MemoryBus, bus_client) -> None:
    deps = bus_client.deps
    bus_client.deps = dataclasses.replace(
        deps, settings=msgspec.structs.replace(deps.settings, secrets="off")
    )
    try:
        mem = bus.agent(workflow_id="wf_o")
        added = await mem.add("knowledge", f"key {OPENAI}")
        assert added.redacted is msgspec.UNSET
        (m,) = (await mem.get([added.id])).memories
        assert m.content == f"key {OPENAI}"
    finally:
        bus_client.deps = deps
    await asyncio.sleep(0)
