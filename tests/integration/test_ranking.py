"""Ranking by similarity, importance and recency, on real Redis.

Recency needs memories of different ages, so these tests call the operations directly with a
clock they control (the same functions the handlers run), against the session's Redis.
"""

from __future__ import annotations

import dataclasses

import pytest
from inprocess import T0, Clock
from redisvl.index import AsyncSearchIndex
from redisvl.schema import IndexSchema

from bus import AgentMemory
from contracts import AddRequest, SearchRequest
from handlers import ops as operations
from handlers.embed import HashEmbedder
from handlers.ops import search as search_ops
from handlers.ops import writes
from handlers.ops.ranking import DAY_MS
from handlers.store import keys
from handlers.store.placement import index_name
from handlers.store.resp import index_attributes
from handlers.store.schema import schema_dict


@pytest.fixture
def direct(in_process) -> tuple[operations.Deps, Clock]:
    """The in-process handler's operations, with a clock the test moves."""
    clock = Clock()
    return dataclasses.replace(in_process.deps, clock=clock), clock


async def test_equal_similarity_ranks_higher_importance_first(wf123: AgentMemory) -> None:
    low = await wf123.add("knowledge", "the deployment runbook", importance=0.1, dedup="none")
    high = await wf123.add("knowledge", "the deployment runbook", importance=0.9, dedup="none")

    hits = await wf123.search("deployment runbook", mode="vector")

    assert [h.id for h in hits.results] == [high.id, low.id]
    assert hits.results[0].similarity == pytest.approx(hits.results[1].similarity)
    assert hits.results[0].score - hits.results[1].score == pytest.approx(0.15 * 0.8, abs=1e-3)


async def test_newer_memory_outranks_an_older_equal_one(
    direct: tuple[operations.Deps, Clock], ns: str
) -> None:
    deps, clock = direct
    req = AddRequest(type="knowledge", content="quarterly report", dedup="none")
    old = await writes.add(ns, req, deps)
    clock.now = T0 + 15 * DAY_MS
    new = await writes.add(ns, req, deps)

    reply = await search_ops.search(
        ns, SearchRequest(query="quarterly report", mode="vector"), deps
    )

    assert [r.id for r in reply.results] == [new.id, old.id]
    sim = reply.results[0].similarity
    assert reply.results[0].score == pytest.approx(0.7 * sim + 0.15 * 0.6 + 0.15 * 1.0, abs=1e-4)
    assert reply.results[1].score == pytest.approx(0.7 * sim + 0.15 * 0.6 + 0.15 * 0.5, abs=1e-4)


async def test_recency_reaches_zero_after_thirty_days(
    direct: tuple[operations.Deps, Clock], ns: str
) -> None:
    deps, clock = direct
    await writes.add(ns, AddRequest(type="knowledge", content="ancient note"), deps)
    clock.now = T0 + 45 * DAY_MS

    query = SearchRequest(query="ancient note", mode="vector")
    [hit] = (await search_ops.search(ns, query, deps)).results

    assert hit.score == pytest.approx(0.7 * hit.similarity + 0.15 * 0.6, abs=1e-4)


async def test_overfetch_lets_importance_lift_a_less_similar_memory(
    direct: tuple[operations.Deps, Clock], ns: str
) -> None:
    deps, _ = direct
    # Many slightly-closer, unimportant memories, and one important memory a bit further away.
    for i in range(30):
        req = AddRequest(type="observation", content=f"alpha beta gamma n{i}", importance=0.0)
        await writes.add(ns, req, deps)
    key = AddRequest(type="identity", content="alpha beta gamma delta epsilon", importance=1.0)
    important = await writes.add(ns, key, deps)

    query = SearchRequest(query="alpha beta gamma", limit=1, mode="vector")
    reply = await search_ops.search(ns, query, deps)

    assert reply.results[0].id == important.id


async def test_an_index_from_an_older_schema_gains_the_missing_fields(
    direct: tuple[operations.Deps, Clock], ns: str, servers
) -> None:
    deps, _ = direct
    old = schema_dict(ns, 384)
    old["fields"] = [f for f in old["fields"] if f["name"] not in ("tagtext", "mention_count")]
    client = deps.store.client
    legacy = AsyncSearchIndex(IndexSchema.from_dict(old), redis_client=client)
    await legacy.create()
    await client.hset(
        keys.record_key(ns, "01LEGACY"),
        mapping={
            "id": "01LEGACY",
            "type": "knowledge",
            "content": "written before the upgrade",
            "tags": "vintage",
            "tagtext": "vintage",
            "importance": 0.5,
            "general": "1",
            "created_at": T0,
            "updated_at": T0,
            "expires_at": 253_402_300_799_000,
            "embedding": HashEmbedder().embed_one("written before").tobytes(),
        },
    )

    reply = await search_ops.search(ns, SearchRequest(query="vintage", mode="text"), deps)

    assert [r.id for r in reply.results] == ["01LEGACY"]
    info = await client.execute_command("FT.INFO", index_name(ns))
    assert {"tagtext", "mention_count"} <= index_attributes(info)
