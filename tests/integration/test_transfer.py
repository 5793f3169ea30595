"""`export` and `import` (docs/protocol.md "Export and import"): whole memories out, page by
page, and back in as they were, once."""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
import redis.asyncio as aioredis
from inprocess import InProcess

from bus import Forbidden, InvalidRequest, MemoryBus, NotFound
from contracts.messages import ImportedMemory, ImportReply
from handlers.ops.transfer import embedding_digest
from handlers.store import keys

pytestmark = pytest.mark.transports("in_process", "nats", "cluster")


async def _all(bus: MemoryBus, embeddings: bool = False) -> list[dict[str, object]]:
    out = []
    async for page in bus.export(limit=7, embeddings=embeddings):
        out += [msgspec.to_builtins(m) for m in page]
    return out


def _imported(rows: list[dict[str, object]]) -> list[ImportedMemory]:
    return [msgspec.convert(row, ImportedMemory) for row in rows]


async def test_export_reads_every_live_memory_once_without_counting_access(
    bus: MemoryBus,
) -> None:
    mem = bus.agent(workflow_id="wf1")
    ids = {(await mem.add("fact", f"fact {i}", dedup="none")).id for i in range(25)}
    ids.add((await bus.agent().add("user_pref", "general one")).id)
    rows = await _all(bus)
    assert sorted(r["id"] for r in rows) == sorted(ids)  # each once, general and workflow
    again = await _all(bus)
    assert all(r["access_count"] == 0 for r in again)


async def test_a_page_too_big_for_the_payload_names_the_rest_as_pending(
    in_process: InProcess, ns: str
) -> None:
    small = InProcess(in_process.nc, dataclasses.replace(in_process.deps, max_payload=64_000))
    bus = await MemoryBus.connect(namespace=ns, nc=small)  # type: ignore[arg-type]
    mem = bus.agent()
    for i in range(130):  # more pending than one request may name (100)
        await mem.add("fact", f"{i} " + "long words " * 1000, dedup="none")  # ~11 KB each
    page = await bus.export_page(limit=200)
    assert len(page.pending) > 100 and page.memories  # some came, the rest are named
    assert len(page.memories) + len(page.pending) == 130
    rows = []
    async for part in bus.export(limit=200):
        rows += part
    assert len(rows) == 130 and len({m.id for m in rows}) == 130


async def test_import_keeps_ids_times_expiry_counters_and_vectors(bus: MemoryBus, ns: str) -> None:
    mem = bus.agent(workflow_id="wf1", agent_id="alice")
    kept = await mem.add("decision", "Use Postgres", tags=["db"], ttl_s=600, importance=0.7)
    await mem.get([kept.id])
    rows = await _all(bus, embeddings=True)
    assert len(rows[0]["embedding"]) == 384  # type: ignore[arg-type]

    copy = MemoryBus(bus.nc, f"{ns}b", bus.timeout, owns=False)
    reply = await copy.import_memories(_imported(rows))
    assert (reply.created, reply.existing, reply.expired) == ([kept.id], [], [])
    [got] = (await copy.export_page(ids=[kept.id], embeddings=True)).memories
    [was] = rows
    assert msgspec.to_builtins(got) == was
    # The vector itself came along: searching by it finds the memory at similarity 1.
    hit = (await copy.agent(workflow_id="wf1").search(embedding=was["embedding"])).results[0]  # type: ignore[arg-type]
    assert hit.id == kept.id and hit.similarity == pytest.approx(1.0, abs=1e-5)

    twice = await copy.import_memories(_imported(rows))
    assert (twice.created, twice.existing) == ([], [kept.id])


async def test_an_expired_memory_is_not_written(bus: MemoryBus) -> None:
    now = datetime.now(UTC)
    gone = ImportedMemory(
        id="gone1",
        type="fact",
        content="old news",
        created_at=now - timedelta(days=2),
        expires_at=now - timedelta(days=1),
    )
    live = ImportedMemory(id="live1", type="fact", content="still true", created_at=now)
    reply = await bus.import_memories([gone, live])
    assert (reply.created, reply.expired) == (["live1"], ["gone1"])


async def test_one_bad_memory_fails_the_import_whole(bus: MemoryBus, rds: aioredis.Redis) -> None:
    now = datetime.now(UTC)
    good = ImportedMemory(id="ok1", type="fact", content="fine", created_at=now)
    bad = ImportedMemory(id="bad1", type="no_such_type", content="x", created_at=now)
    with pytest.raises(InvalidRequest, match="Unknown memory type"):
        await bus.import_memories([good, bad])
    assert not await rds.exists(keys.record_key(bus.namespace, "ok1"))
    with pytest.raises(InvalidRequest, match="same id twice"):
        await bus.import_memories([good, good])


async def test_export_and_import_need_full_trust(bus: MemoryBus) -> None:
    inner = MemoryBus(bus.nc, bus.namespace, bus.timeout, owns=False, trust="inner")
    with pytest.raises(Forbidden, match="export needs full trust"):
        await inner.export_page()
    memory = ImportedMemory(id="x1", type="fact", content="x", created_at=datetime.now(UTC))
    with pytest.raises(Forbidden, match="import needs full trust"):
        await inner.import_memories([memory])


async def test_an_imported_vector_is_checked_as_an_added_one(
    bus: MemoryBus, rds: aioredis.Redis
) -> None:
    now = datetime.now(UTC)
    seen = await bus.agent().describe()
    # Said to be the vector of this content by this namespace's embedder: then it is used.
    of = embedding_digest(seen.embedder, seen.dimension, "x")
    flat = ImportedMemory(
        id="z1", type="fact", content="x", created_at=now, embedding=[0.0] * 384, embedding_of=of
    )
    with pytest.raises(InvalidRequest, match=r"Memory 'z1'.*not all zeros"):
        await bus.import_memories([flat])
    short = ImportedMemory(
        id="z2", type="fact", content="x", created_at=now, embedding=[1.0] * 8, embedding_of=of
    )
    with pytest.raises(InvalidRequest, match=r"Memory 'z2'.*8 dimensions"):
        await bus.import_memories([short])
    assert not await rds.exists(keys.record_key(bus.namespace, "z1"))


async def test_an_edited_line_is_deduplicated_by_its_own_content(bus: MemoryBus, ns: str) -> None:
    # The dedup key is computed from what is imported: a line whose content was edited does
    # not keep the key of its old text (which would fold every later add of that text into
    # the edited memory, never storing it).
    mem = bus.agent(workflow_id="wf1")
    first = await mem.add("fact", "The deploy key lives in the vault")
    [row] = await _all(bus)
    row["content"] = "The deploy key lives on the wiki"
    copy = MemoryBus(bus.nc, f"{ns}b", bus.timeout, owns=False)
    assert (await copy.import_memories(_imported([row]))).created == [first.id]
    there = copy.agent(workflow_id="wf1")
    original = await there.add("fact", "The deploy key lives in the vault")
    assert original.duplicate_of is None and original.id != first.id
    edited = await there.add("fact", "the deploy key  lives on the WIKI")
    assert (edited.duplicate_of, edited.mention_count) == (first.id, 2)
    # A line that opted out of dedup ("") stays out of it.
    plain = await mem.add("fact", "kept apart", dedup="none")
    [out] = (await bus.export_page(ids=[plain.id])).memories
    assert out.content_hash == ""
    await copy.import_memories(_imported([msgspec.to_builtins(out)]))
    assert (await there.add("fact", "kept apart")).duplicate_of is None


async def test_an_imported_vector_is_used_only_for_its_own_text_and_embedder(
    bus: MemoryBus, ns: str
) -> None:
    mem = bus.agent(workflow_id="wf1")
    for text in ("alpha text", "beta text", "gamma text", "delta text"):
        await mem.add("fact", text)
    rows = {r["content"]: r for r in await _all(bus, embeddings=True)}
    fresh = MemoryBus(bus.nc, f"{ns}c", bus.timeout, owns=False)
    for text in ("alpha text", "beta edited", "gamma text", "delta text"):
        await fresh.agent(workflow_id="wf1").add("fact", text)
    embedded = {r["content"]: r["embedding"] for r in await _all(fresh, embeddings=True)}
    alien = [1.0 if i % 2 else -1.0 for i in range(384)]
    kept = rows["alpha text"]
    kept["embedding"] = alien  # its own digest: taken as it is
    edited = rows["beta text"]
    edited["content"] = "beta edited"  # its vector is of the old text: embedded anew
    edited["embedding"] = alien
    bare = rows["gamma text"]
    bare["embedding"], bare["embedding_of"] = alien, None  # no digest: embedded
    other = rows["delta text"]
    other["embedding"] = alien  # another model's vector of the same text: embedded
    other["embedding_of"] = embedding_digest("some-other-model", 384, "delta text")
    copy = MemoryBus(bus.nc, f"{ns}b", bus.timeout, owns=False)
    await copy.import_memories(_imported([kept, edited, bare, other]))
    stored = {r["content"]: r for r in await _all(copy, embeddings=True)}
    assert stored["alpha text"]["embedding"] == pytest.approx(alien)
    for text in ("beta edited", "gamma text", "delta text"):
        assert stored[text]["embedding"] == pytest.approx(embedded[text]), text
    seen = await copy.agent().describe()
    assert stored["beta edited"]["embedding_of"] == embedding_digest(
        seen.embedder, seen.dimension, "beta edited"
    )


async def test_an_idle_memory_expires_from_its_own_times(
    bus: MemoryBus, ns: str, rds: aioredis.Redis
) -> None:
    copy = MemoryBus(bus.nc, f"{ns}b", bus.timeout, owns=False)
    key_ns = await _key_ns(copy)
    now = datetime.now(UTC).replace(microsecond=0)  # times are kept to the millisecond
    ahead = ImportedMemory(  # a last access in the future keeps it no longer than now + idle
        id="i1",
        type="fact",
        content="idle one",
        created_at=now - timedelta(hours=1),
        last_accessed_at=now + timedelta(days=365),
        expires_at=now + timedelta(days=365, seconds=600),
        idle_ttl_s=600,
    )
    capped = ImportedMemory(  # exported at its TTL's end: kept as its bound
        id="i2",
        type="fact",
        content="idle, near its ttl",
        created_at=now - timedelta(minutes=5),
        last_accessed_at=now - timedelta(seconds=10),
        expires_at=now + timedelta(seconds=100),
        idle_ttl_s=600,
    )
    before = int(datetime.now(UTC).timestamp() * 1000)
    await copy.import_memories([ahead, capped])
    after = int(datetime.now(UTC).timestamp() * 1000)
    t1 = await rds.pexpiretime(keys.record_key(key_ns, "i1"))
    assert before + 600_000 <= t1 <= after + 600_000
    t2 = await rds.pexpiretime(keys.record_key(key_ns, "i2"))
    assert t2 == int(capped.expires_at.timestamp() * 1000)  # type: ignore[union-attr]
    # A read does not push it past that bound.
    got = (await copy.agent().get(["i2"])).memories[0]
    assert await rds.pexpiretime(keys.record_key(key_ns, "i2")) == t2
    assert got.expires_at == capped.expires_at


async def _key_ns(bus: MemoryBus) -> str:
    """The namespace as its Redis keys name it (a pooled one on a cluster)."""
    nc = bus.nc
    if isinstance(nc, InProcess):
        return await nc.deps.store.locate(bus.namespace)
    return bus.namespace


# Hostile values an export file could carry (hand-edited, or from another system): each
# import either refuses the memory, naming it, or stores what every read can serve.
_NOW = datetime.now(UTC)
_HOSTILE: list[dict[str, object]] = [
    {"id": "a\u0000b"},
    {"id": "a\u0085b"},
    {"id": "a b"},
    {"id": "a:b"},
    {"id": "a*b"},
    {"id": "{a}"},
    {"id": "é"},
    {"access_count": 2**63},
    {"access_count": 2**53},
    {"access_count": -1},
    {"mention_count": 2**63},
    {"mention_count": 0},
    {"created_at": "0001-01-01T00:00:00Z"},
    {"created_at": "9999-12-31T23:59:59Z"},
    {"updated_at": "0001-01-01T00:00:00Z"},
    {"expires_at": "9999-12-31T23:59:59.999Z"},
    {"last_accessed_at": "0001-01-01T00:00:00Z"},
    {"last_accessed_at": "9999-12-31T23:59:59Z"},
    {"superseded_by": "x\u0000y"},
    {"tags": ["a\u0000b"]},
    {"agent_id": "ag\u0000ent"},
    {"session_id": "s\u0000"},
    {"related_people": ["Jo\u0000sé"]},
    {"related_files": ["a\u0000.py"]},
    {"workflow_id": "wf\u0000"},
    {"source": "x\u0000"},
    {"metadata": {"k\u0000": "v\u0000"}},
    {"content_hash": "\u0000" * 10},
]


async def _reads_all_answer(bus: MemoryBus, ids: list[str]) -> None:
    """Every read of the namespace answers (an error naming the caller's mistake is fine,
    `internal` is not)."""
    mem = bus.agent()
    wide = bus.agent(workflow_id="wf1")
    for read in (
        mem.list(limit=50),
        wide.list(limit=50),
        mem.describe(),
        wide.search("anything at all", limit=10),
        wide.search("anything at all", limit=10, mode="text"),
        mem.get(ids),
        wide.recall("anything at all", session_id="s1"),
        wide.people(),
        bus.export_page(limit=100),
    ):
        await read
    for mid in ids:
        for read in (mem.timeline(mid), mem.history(mid), mem.get([mid])):
            with contextlib.suppress(NotFound):
                await read


@pytest.mark.parametrize("hostile", _HOSTILE, ids=[str(h)[:40] for h in _HOSTILE])
async def test_nothing_imported_breaks_a_read(bus: MemoryBus, hostile: dict[str, object]) -> None:
    row: dict[str, object] = {
        "id": "h1",
        "type": "fact",
        "content": "an imported fact",
        "workflow_id": "wf1",
        "created_at": (_NOW - timedelta(hours=1)).isoformat(),
        **hostile,
    }
    body = msgspec.json.encode({"memories": [row]})
    try:
        await bus.request("import", body, ImportReply)
    except InvalidRequest as exc:
        # The error names the memory (its place in the request, or its id).
        assert "memories[0]" in exc.message or repr(row["id"]) in exc.message, exc.message
    await _reads_all_answer(bus, [str(row["id"])])
