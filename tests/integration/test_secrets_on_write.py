"""Secrets on write (PROTOCOL.md v3, and v4 "Secrets: every stored text"): found in every
text a write stores or announces (an add's content, title, narrative, facts, source, tags,
related files and people, metadata keys and strings; a capture's tool, arguments and output;
every text of a state and a workspace; reconcile's facts) before anything is stored or
embedded; redacted by default, refused with MEMBUS_SECRETS=block, stored as sent with off.
What is checked is what was kept (reads, search, events, every Redis key of the namespace,
the embedding cache), not only the reply. The samples are built from parts so that no
key-shaped string sits in the repository."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Iterator

import msgspec
import pytest
import redis.asyncio as aioredis
from inprocess import InProcess
from redisvl.extensions.cache.embeddings import EmbeddingsCache

from bus import AgentMemory, MemoryBus
from bus.errors import InvalidRequest
from contracts.messages import ReconcileFact
from handlers.dispatch import dispatch
from handlers.embed.cache import CachedEmbedder, cache_model, entry_key
from handlers.store import keys

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


# --------------------------------------------------------------------------- v4: every text

ALNUM = "Zq8xLm2Pv7Rt4Wn9Yb3Kc6Hd1Jf5Gs0AeU"
GITHUB = "gh" + "p_" + ALNUM + "AB"
# What no stored byte may hold: a piece of each key's random part (as sent, and lower-cased
# as a tag is), and the passwords below.
TRACES = (ALNUM[:20], ALNUM[:20].lower(), "Zx9/Qw+8", "p@ss-w0rd")
# v4's shapes: a URL password holding `/` and `+`, one holding `@`, a key glued to a label,
# a lower-case PEM header, a base64-encoded PEM block, a zero-width space inside a key.
SLASHED_DSN = "postgres://app:" + "Zx9/Qw+8" + "@db.internal:5432/main"
AT_DSN = "redis://app:" + "p@ss-w0rd" + "@cache:6379/0"
GLUED = "OPENAI_KEY_" + OPENAI
LOWER_PEM = PEM.lower()
ENCODED_PEM = base64.b64encode((PEM + "\n").encode()).decode()
HIDDEN = OPENAI[:10] + "\u200b" + OPENAI[10:]
# Near misses that must come back as sent.
KEPT = (
    "ULID 01HZX3Y7Q8K9M2N4P6R8S0T2V4, uuid 550e8400-e29b-41d4-a716-446655440000,"
    " sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855,"
    " commit 9fceb02d0ae598e95dc970b74767f19372d61af8, task-refactor-the-login-flow-now,"
    " https://example.com:8443/docs/@team, ops@example.com, "
    + base64.b64encode(
        b"-----BEGIN PUBLIC KEY-----\nMIIBIjANBg\n-----END PUBLIC KEY-----\n"
    ).decode()
    + ", ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC"
    + "Pu8bLiC4Ke7yXs" * 5
    + " me@laptop"
)


async def _stored(rds: aioredis.Redis, key_ns: str) -> bytes:
    """Every byte the namespace keeps in Redis: key names and values, whatever the type."""
    out: list[bytes] = []
    async for key in rds.scan_iter(match=keys.ns_prefix(key_ns) + "*"):
        out.append(key)
        kind = (await rds.type(key)).decode()
        if kind == "string":
            out.append(await rds.get(key) or b"")
        elif kind == "hash":
            for field, value in (await rds.hgetall(key)).items():
                out += [field, value]
        elif kind == "list":
            out += await rds.lrange(key, 0, -1)
        elif kind == "set":
            out += list(await rds.smembers(key))
        elif kind == "zset":
            out += await rds.zrange(key, 0, -1)
        elif kind == "stream":
            for _, entry in await rds.xrange(key):
                for field, value in entry.items():
                    out += [field, value]
        else:
            raise AssertionError(f"{key!r} is a {kind}: read it here too")
    return b"\n".join(out)


def _assert_no_trace(data: bytes | str) -> None:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    for trace in TRACES:
        assert trace not in text, f"{trace!r} was kept"


@contextlib.contextmanager
def _mode(bus_client: InProcess, mode: str) -> Iterator[None]:
    deps = bus_client.deps
    bus_client.deps = dataclasses.replace(
        deps, settings=msgspec.structs.replace(deps.settings, secrets=mode)
    )
    try:
        yield
    finally:
        bus_client.deps = deps


@contextlib.asynccontextmanager
async def _events(bus: MemoryBus, nc) -> AsyncIterator[list[bytes]]:
    """The bodies of the namespace's events published while inside."""
    got: list[bytes] = []

    async def keep(msg) -> None:
        got.append(msg.data)

    sub = await nc.subscribe(f"mem.{bus.namespace}.events.>", cb=keep)
    await nc.flush()
    try:
        yield got
    finally:
        await asyncio.sleep(0.2)  # the last event's delivery, not a timing assertion
        await nc.flush()
        await sub.unsubscribe()


@pytest.mark.transports("in_process")
async def test_every_text_of_an_add_is_redacted_where_it_is_kept(
    bus: MemoryBus, rds: aioredis.Redis, key_ns: str, nc
) -> None:
    mem = bus.agent(workflow_id="wf_every")
    async with _events(bus, nc) as events:
        reply = await mem.add(
            "knowledge",
            "the deploy notes",
            source=f"copied from {SLASHED_DSN}",
            tags=["deploy", GITHUB],
            related_files=[f"/tmp/{OPENAI}.env"],
            related_people=[f"ops {JWT}"],
            metadata={GITHUB: "the key as a key", "dsn": AT_DSN},
        )
    assert reply.redacted == ["url_password", "api_key", "jwt"]
    (m,) = (await mem.get([reply.id])).memories
    assert m.source == "copied from postgres://app:[redacted:url_password]@db.internal:5432/main"
    assert m.tags == ["deploy", "redacted:api_key"]
    assert m.related_files == ["/tmp/[redacted:api_key].env"]
    assert m.related_people == ["ops [redacted:jwt]"]
    assert m.metadata == {
        "[redacted:api_key]": "the key as a key",
        "dsn": "redis://app:[redacted:url_password]@cache:6379/0",
    }
    # The redacted tag is a tag like any other.
    assert [
        r.id for r in (await mem.search("deploy notes", tags=["redacted:api_key"])).results
    ] == [reply.id]
    _assert_no_trace(await _stored(rds, key_ns))
    assert events  # the added event was seen, and holds nothing of them
    _assert_no_trace(b"".join(events))


@pytest.mark.transports("in_process")
async def test_the_new_shapes_are_redacted_and_near_misses_kept_through_the_bus(
    bus: MemoryBus, rds: aioredis.Redis, key_ns: str
) -> None:
    mem = bus.agent(workflow_id="wf_shapes")
    text = "\n".join([SLASHED_DSN, AT_DSN, GLUED, LOWER_PEM, f"tls.key: {ENCODED_PEM}", HIDDEN])
    reply = await mem.add("knowledge", text)
    assert reply.redacted == ["private_key", "api_key", "url_password"]
    (m,) = (await mem.get([reply.id])).memories
    assert m.content.splitlines() == [
        "postgres://app:[redacted:url_password]@db.internal:5432/main",
        "redis://app:[redacted:url_password]@cache:6379/0",
        "OPENAI_KEY_[redacted:api_key]",
        "[redacted:private_key]",
        "tls.key: [redacted:private_key]",
        "[redacted:api_key]",
    ]
    kept = await mem.add("knowledge", KEPT)
    assert kept.redacted is msgspec.UNSET
    (k,) = (await mem.get([kept.id])).memories
    assert k.content == KEPT
    _assert_no_trace(await _stored(rds, key_ns))
    assert ENCODED_PEM[:40].encode() not in await _stored(rds, key_ns)


@pytest.mark.transports("in_process")
async def test_an_update_redacts_its_tags(bus: MemoryBus, rds: aioredis.Redis, key_ns: str) -> None:
    mem = bus.agent(workflow_id="wf_upd")
    added = await mem.add("knowledge", "tagged later")
    reply = await mem.update(added.id, tags=["later", GITHUB])
    assert reply.redacted == ["api_key"]
    (m,) = (await mem.get([added.id])).memories
    assert m.tags == ["later", "redacted:api_key"]
    _assert_no_trace(await _stored(rds, key_ns))


@pytest.mark.transports("in_process")
async def test_a_capture_redacts_its_tool_everywhere_it_is_used(
    bus: MemoryBus, rds: aioredis.Redis, key_ns: str
) -> None:
    mem = bus.agent(workflow_id="wf_tool")
    reply = await mem.capture(f"fetch {OPENAI}", args={"path": "a.txt"}, output="done")
    # The reply names what was redacted, and only that: the tool's name.
    assert reply.redacted == ["api_key"]
    (m,) = (await mem.get([reply.id])).memories
    assert m.title == "Tool run: fetch [redacted:api_key]"
    assert "tool: fetch [redacted:api_key]" in m.facts
    assert m.tags == ["tool", "fetch_redacted:api_key"]
    assert m.metadata is not None and m.metadata["tool"] == "fetch [redacted:api_key]"
    _assert_no_trace(await _stored(rds, key_ns))


@pytest.mark.transports("in_process")
async def test_create_state_redacts_each_of_its_texts(
    bus: MemoryBus, rds: aioredis.Redis, key_ns: str, nc
) -> None:
    await bus.create_workspace("Proj", description="d", root_folder="/p", purpose="p")
    mem = bus.agent(workspace="Proj")
    async with _events(bus, nc) as events:
        reply = await mem.create_state(
            "before-deploy",
            conversation_context=f"we set OPENAI_API_KEY={OPENAI} in the shell",
            active_task=f"connect to {SLASHED_DSN}",
            active_files=[f"/secrets/{GITHUB}.txt"],
            next_steps=["rotate the key", f"revoke {JWT}"],
            description=f"backup {AT_DSN}",
            tags=["deploy", GITHUB],
        )
    assert reply.redacted == ["url_password", "api_key", "jwt"]
    state = await mem.load_state("before-deploy")
    assert state.conversation_context == "we set OPENAI_API_KEY=[redacted:api_key] in the shell"
    assert state.active_task == (
        "connect to postgres://app:[redacted:url_password]@db.internal:5432/main"
    )
    assert state.active_files == ["/secrets/[redacted:api_key].txt"]
    assert state.next_steps == ["rotate the key", "revoke [redacted:jwt]"]
    assert state.description == "backup redis://app:[redacted:url_password]@cache:6379/0"
    assert state.tags == ["deploy", "redacted:api_key"]
    found = await mem.search("OPENAI_API_KEY shell", types=["state"], mode="text")
    assert [r.id for r in found.results] == [state.id]
    _assert_no_trace(msgspec.json.encode(found))
    assert events
    _assert_no_trace(b"".join(events))
    _assert_no_trace(await _stored(rds, key_ns))


@pytest.mark.transports("in_process")
async def test_a_name_holding_a_secret_is_refused_even_under_redact(bus: MemoryBus) -> None:
    with pytest.raises(InvalidRequest, match=r"`name` holds .*\(api_key\).*cannot be redacted"):
        await bus.create_workspace(GITHUB, description="d", root_folder="/p", purpose="p")
    await bus.create_workspace("Proj", description="d", root_folder="/p", purpose="p")
    mem = bus.agent(workspace="Proj")
    with pytest.raises(InvalidRequest, match=r"`name` holds .*\(api_key\)"):
        await mem.create_state(
            GITHUB, conversation_context="c", active_task="t", active_files=[], next_steps=[]
        )
    assert (await mem.list_states()).data == []
    assert [w.name for w in (await bus.list_workspaces()).data] == ["Proj"]


@pytest.mark.transports("in_process")
async def test_workspace_texts_are_redacted_on_create_and_update(
    bus: MemoryBus, rds: aioredis.Redis, key_ns: str
) -> None:
    created = await bus.create_workspace(
        "Ops",
        description=f"uses {SLASHED_DSN}",
        root_folder="/ops",
        purpose="run things",
        workflows=[f"login with {JWT}"],
        key_files=["/ops/a.env"],
        preferences={"token": GITHUB, GITHUB: 1},
    )
    assert created.redacted == ["url_password", "jwt", "api_key"]
    plain = await bus.update_workspace("Ops", purpose="nothing secret")
    assert plain.redacted is msgspec.UNSET
    updated = await bus.update_workspace("Ops", key_files=[f"/ops/{OPENAI}"])
    assert updated.redacted == ["api_key"]
    ws = await bus.load_workspace("Ops")
    assert ws.description == "uses postgres://app:[redacted:url_password]@db.internal:5432/main"
    assert ws.workflows == ["login with [redacted:jwt]"]
    assert ws.key_files == ["/ops/[redacted:api_key]"]
    assert ws.preferences == {"token": "[redacted:api_key]", "[redacted:api_key]": 1}
    _assert_no_trace(await _stored(rds, key_ns))


@pytest.mark.transports("in_process")
async def test_reconcile_embeds_and_answers_only_redacted_facts(
    bus: MemoryBus, bus_client: InProcess, rds: aioredis.Redis, ns: str
) -> None:
    # A real embeddings cache in front of the test's embedder (the handlers' hash embedder
    # runs without one): what reaches it is what any embedder and its cache would see.
    cache = EmbeddingsCache(name=f"testcache:{ns}", async_redis_client=rds)
    cached = CachedEmbedder(bus_client.deps.embedder, cache)
    deps = bus_client.deps
    bus_client.deps = dataclasses.replace(deps, embedder=cached)
    try:
        mem = bus.agent(workflow_id="wf_rec")
        reply = await mem.reconcile(
            [f"the staging key is {OPENAI}", ReconcileFact(content=f"db at {AT_DSN}")]
        )
        await asyncio.gather(*cached._pending)
    finally:
        bus_client.deps = deps
    assert reply.redacted == ["api_key", "url_password"]
    assert [r.content for r in reply.results] == [
        "the staging key is [redacted:api_key]",
        "db at redis://app:[redacted:url_password]@cache:6379/0",
    ]
    # The cache holds vectors under digests of the texts (v4): the redacted facts' are
    # there, and nothing of the secrets.
    model = cache_model(cached.name, cached.dimension)
    for fact in [r.content for r in reply.results]:
        assert await rds.exists(entry_key(f"testcache:{ns}", fact, model))
    entries = [await rds.hgetall(k) async for k in rds.scan_iter(match=f"testcache:{ns}*")]
    kept = b"\n".join(v for e in entries for v in e.values())
    _assert_no_trace(kept)


@pytest.mark.transports("in_process")
async def test_apply_redacts_each_action_and_says_so(
    bus: MemoryBus, rds: aioredis.Redis, key_ns: str
) -> None:
    mem = bus.agent(workflow_id="wf_apply")
    old = await mem.add("knowledge", "the old note")
    reply = await mem.apply(
        [
            {"action": "add", "type": "knowledge", "content": "a", "source": f"from {OPENAI}"},
            {"action": "update", "id": old.id, "tags": ["n", GITHUB]},
        ]
    )
    assert reply.redacted == ["api_key"]
    added = (await mem.get([reply.results[0].id])).memories[0]
    assert added.source == "from [redacted:api_key]"
    assert (await mem.get([old.id])).memories[0].tags == ["n", "redacted:api_key"]
    _assert_no_trace(await _stored(rds, key_ns))


@pytest.mark.transports("in_process")
async def test_block_refuses_every_write_with_a_secret_anywhere_and_writes_nothing(
    bus: MemoryBus, bus_client: InProcess, rds: aioredis.Redis, key_ns: str
) -> None:
    await bus.create_workspace("Proj", description="d", root_folder="/p", purpose="p")
    mem = bus.agent(workflow_id="wf_block", workspace="Proj")
    kept = await mem.add("knowledge", "kept before")
    state = dict(conversation_context="c", active_task="t", active_files=[], next_steps=[])
    refused = [
        (r"`source` holds .*\(url_password\)", mem.add("knowledge", "x", source=SLASHED_DSN)),
        (r"`tags` holds .*\(api_key\)", mem.add("knowledge", "x", tags=[GITHUB])),
        (r"`related_people` holds .*\(jwt\)", mem.add("knowledge", "x", related_people=[JWT])),
        (r"`related_files` holds .*\(api_key\)", mem.add("knowledge", "x", related_files=[GLUED])),
        (r"`metadata` holds .*\(api_key\)", mem.add("knowledge", "x", metadata={GITHUB: 1})),
        (r"`content` holds .*\(private_key\)", mem.add("knowledge", f"k: {ENCODED_PEM}")),
        (r"`content` holds .*\(api_key\)", mem.add("knowledge", HIDDEN)),
        (r"`tags` holds .*\(api_key\)", mem.update(kept.id, tags=[GITHUB])),
        (r"`tool` holds .*\(api_key\)", mem.capture(f"run {OPENAI}")),
        (
            r"`conversation_context` holds .*\(api_key\)",
            mem.create_state("s1", **{**state, "conversation_context": GLUED}),
        ),
        (r"`active_task` holds .*\(jwt\)", mem.create_state("s2", **{**state, "active_task": JWT})),
        (
            r"`next_steps` holds .*\(private_key\)",
            mem.create_state("s3", **{**state, "next_steps": ["ok", LOWER_PEM]}),
        ),
        (r"`tags` holds .*\(api_key\)", mem.create_state("s4", **{**state, "tags": [GITHUB]})),
        (r"`facts\[1\].content` holds .*\(api_key\)", mem.reconcile(["fine", f"key {OPENAI}"])),
        (
            r"actions\[0\] \(add\): `source` holds .*\(api_key\)",
            mem.apply([{"action": "add", "type": "knowledge", "content": "a", "source": OPENAI}]),
        ),
        (
            r"`preferences` holds .*\(url_password\)",
            bus.create_workspace(
                "W2", description="d", root_folder="/", purpose="p", preferences={"db": AT_DSN}
            ),
        ),
        (r"`description` holds .*\(jwt\)", bus.update_workspace("Proj", description=JWT)),
    ]
    with _mode(bus_client, "block"):
        for pattern, call in refused:
            with pytest.raises(InvalidRequest, match=pattern):
                await call
    assert [m.id for m in (await mem.list()).memories] == [kept.id]
    assert (await mem.list_states()).data == []
    assert [w.name for w in (await bus.list_workspaces()).data] == ["Proj"]
    assert (await bus.load_workspace("Proj")).description == "d"
    _assert_no_trace(await _stored(rds, key_ns))
