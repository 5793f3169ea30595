"""v4 keyed memories (PROTOCOL.md "Keyed memories"): an `add` with a `key` creates the
memory or replaces, in place, the current memory of its store holding that key; with
`expected_version` conditionally (0: only if none holds it)."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
import redis.asyncio as aioredis

from bus import AgentMemory, MemoryBus
from bus.errors import Conflict, InvalidRequest
from contracts.messages import ImportedMemory
from handlers.store import keys

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")


async def _key_index(rds: aioredis.Redis, key_ns: str) -> list[bytes]:
    """The namespace's key index entries (every node's, on a cluster)."""
    return [k async for k in rds.scan_iter(match=keys.key_prefix(key_ns) + "*")]


async def test_a_keyed_add_replaces_the_memory_holding_its_key(wf123: AgentMemory) -> None:
    first = await wf123.add("user_pref", "Theme: dark", key="ui/theme", tags=["ui"])
    assert first.version == 1 and not first.replaced
    second = await wf123.add("user_pref", "Theme: light", key="ui/theme", importance=0.9)
    assert second.id == first.id and second.replaced and second.version == 2

    got = await wf123.get(keys=["ui/theme", "ui/font"])
    assert [m.id for m in got.memories] == [first.id]
    memory = got.memories[0]
    assert memory.content == "Theme: light" and memory.key == "ui/theme"
    assert memory.version == 2 and memory.importance == 0.9
    assert memory.tags == []  # the new fields replace the old, tags included
    assert got.missing_keys == ["ui/font"] and got.missing == []
    history = (await wf123.history(first.id)).entries
    assert [e.event for e in history] == ["added", "updated"]
    # One current memory holds the key: searches and lists find only the new text.
    listed = (await wf123.list(limit=100)).memories
    assert [(m.id, m.content) for m in listed] == [(first.id, "Theme: light")]


async def test_expected_version_makes_a_keyed_add_conditional(wf123: AgentMemory) -> None:
    made = await wf123.add("fact", "Port 8080", key="svc/port", expected_version=0)
    with pytest.raises(Conflict) as caught:
        await wf123.add("fact", "Port 9090", key="svc/port", expected_version=0)
    assert caught.value.id == made.id and caught.value.current_version == 1
    with pytest.raises(Conflict) as caught:
        await wf123.add("fact", "Port 9090", key="svc/port", expected_version=3)
    assert caught.value.current_version == 1
    with pytest.raises(Conflict) as caught:
        await wf123.add("fact", "Port 1", key="svc/none", expected_version=2)
    assert caught.value.current_version == 0 and caught.value.id is None

    replaced = await wf123.add("fact", "Port 9090", key="svc/port", expected_version=1)
    assert replaced.replaced and replaced.version == 2
    got = await wf123.get(keys=["svc/port", "svc/none"])
    assert [m.content for m in got.memories] == ["Port 9090"]
    assert got.missing_keys == ["svc/none"]


async def test_concurrent_first_puts_of_one_key_leave_one_memory(wf123: AgentMemory) -> None:
    outcomes = await asyncio.gather(
        *(
            wf123.add("fact", f"Owner: agent {n}", key="owner", expected_version=0)
            for n in range(8)
        ),
        return_exceptions=True,
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(won) == 1 and sum(isinstance(o, Conflict) for o in outcomes) == 7
    listed = (await wf123.list(limit=100)).memories
    assert [m.id for m in listed] == [won[0].id]

    # Unconditional puts of one new key: one memory, every put applied to it in turn.
    puts = await asyncio.gather(*(wf123.add("fact", f"Lead: {n}", key="lead") for n in range(8)))
    assert len({p.id for p in puts}) == 1
    assert sorted(p.version for p in puts) == list(range(1, 9))
    assert sum(p.replaced for p in puts) == 7
    got = await wf123.get(keys=["lead"])
    assert len(got.memories) == 1 and got.memories[0].version == 8


async def test_a_key_is_unique_per_store_and_freed_by_delete_and_supersede(
    bus: MemoryBus, wf123: AgentMemory, rds: aioredis.Redis, key_ns: str
) -> None:
    private = await wf123.add("fact", "Budget: 10k", key="budget")
    shared = await wf123.add("fact", "Budget: 12k", key="budget", store="shared")
    assert shared.id != private.id and not shared.replaced
    got = await wf123.get(keys=["budget"])
    assert {m.id for m in got.memories} == {private.id, shared.id}
    # A caller that sees only the shared store gets only that one.
    inner = (await MemoryBus.connect(namespace=bus.namespace, nc=bus.nc, trust="inner")).agent(
        workflow_id="wf_123"
    )
    assert [m.id for m in (await inner.get(keys=["budget"])).memories] == [shared.id]

    assert len(await _key_index(rds, key_ns)) == 2
    await wf123.delete([private.id])
    assert len(await _key_index(rds, key_ns)) == 1  # the shared one's index remains
    again = await wf123.add("fact", "Budget: 15k", key="budget")
    assert again.id not in (private.id, shared.id) and not again.replaced

    newer = await wf123.add("fact", "Budget is now tracked elsewhere", supersedes=[again.id])
    assert newer.superseded == [again.id]
    fresh = await wf123.add("fact", "Budget: 20k", key="budget")
    assert fresh.id != again.id and not fresh.replaced  # a superseded memory holds no key
    keyed = {m.id for m in (await wf123.get(keys=["budget"])).memories}
    assert keyed == {fresh.id, shared.id}
    # The key itself is the writer's text: its index names only a digest of it.
    for name in await _key_index(rds, key_ns):
        assert b"budget" not in name
    # An erasure frees the key as a delete does.
    assert (await wf123.delete([fresh.id], erase=True)).erased == 1
    assert len(await _key_index(rds, key_ns)) == 1
    last = await wf123.add("fact", "Budget: 25k", key="budget")
    assert last.id != fresh.id and not last.replaced and last.version == 1


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"key": "k", "supersedes": ["01NOSUCH0000000000000000000"]}, "supersedes"),
        ({"key": "k", "dedup": "semantic"}, "semantic"),
        ({"expected_version": 1}, "needs a key"),
        ({"key": ""}, "key"),
        ({"key": "a\u0007b"}, "key"),
        # C1 controls are control characters too (NEL, and CSI which terminals act on).
        ({"key": "a\u0085b"}, "key"),
        ({"key": "a\u009b31mb"}, "key"),
        ({"key": "k" * 257}, "key"),
        ({"key": "openai/sk-proj-" + "a1B2c3D4e5" * 4}, "`key` holds what looks like a secret"),
    ],
)
async def test_bad_keyed_adds_are_refused(
    wf123: AgentMemory, fields: dict[str, object], words: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        await wf123.add("fact", "x", **fields)  # type: ignore[arg-type]
    assert words in caught.value.message
    assert (await wf123.list(limit=10)).memories == []


async def test_apply_refuses_a_keyed_action(wf123: AgentMemory) -> None:
    with pytest.raises(InvalidRequest, match="no `key`"):
        await wf123.apply([{"action": "add", "type": "fact", "content": "x", "key": "k"}])


async def test_export_and_import_keep_keys(
    bus: MemoryBus, wf123: AgentMemory, servers: object, ns: str
) -> None:
    made = await wf123.add("fact", "Region: eu-west-1", key="infra/region")
    exported = [m async for page in bus.export() for m in page]
    assert [m.key for m in exported if m.id == made.id] == ["infra/region"]
    lines = [msgspec.json.encode(m) for m in exported]
    other = await MemoryBus.connect(namespace=f"{ns}x", nc=bus.nc)
    try:
        await other.import_memories([msgspec.json.decode(x, type=ImportedMemory) for x in lines])
        mem = other.agent(workflow_id="wf_123")
        got = await mem.get(keys=["infra/region"])
        assert [(m.id, m.version) for m in got.memories] == [(made.id, 1)]
        # The imported memory holds its key: a keyed add replaces it.
        again = await mem.add("fact", "Region: eu-central-1", key="infra/region")
        assert again.id == made.id and again.replaced and again.version == 2
    finally:
        await other.close()
