"""The real all-MiniLM-L6-v2 embedder in a handler, and the namespace's embedder guard.

A handler of another embedder in the session's queue group would answer some of its
requests, so these tests run on an embedded stack of their own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import numpy as np
import pytest
import redis.asyncio as aioredis
from redisvl.extensions.cache.embeddings import EmbeddingsCache
from stacks import private_stack

from bus import MemoryBus, Unavailable
from deploy.embedded import EmbeddedStack, wait_for_handlers
from handlers.embed import minilm_available, minilm_missing
from handlers.embed.cache import CachedEmbedder, text_digest
from handlers.embed.minilm import MiniLMEmbedder

pytestmark = pytest.mark.minilm


@pytest.fixture(scope="module")
async def minilm_stack() -> AsyncIterator[EmbeddedStack]:
    assert minilm_available(), f"make test installs minilm; missing: {minilm_missing()}"
    async with private_stack("minilm", wait_s=120) as stack:
        yield stack


async def test_minilm_finds_a_paraphrase_that_shares_no_words(minilm_stack: EmbeddedStack) -> None:
    async with await MemoryBus.connect(minilm_stack.nats_url, namespace="semantic") as bus:
        mem = bus.agent(workflow_id="wf_1")
        pref = await mem.add("user_pref", "The user likes short replies")
        await mem.add("knowledge", "Photosynthesis converts sunlight into chemical energy")
        await mem.add("decision", "We deploy every Tuesday afternoon")

        hits = await mem.search("keep answers brief", limit=3)
        described = await mem.describe()

    assert hits.results[0].id == pref.id
    assert hits.results[0].similarity > hits.results[1].similarity + 0.1
    assert (described.embedder, described.dimension) == ("minilm", 384)


async def test_a_namespace_refuses_vectors_from_another_embedder(
    minilm_stack: EmbeddedStack,
) -> None:
    async with await MemoryBus.connect(minilm_stack.nats_url, namespace="guarded") as bus:
        mem = bus.agent()
        await mem.add("knowledge", "written by the minilm handler")
        for proc in list(minilm_stack.handlers):
            minilm_stack.stop_handler(proc)
        procs = minilm_stack.start_handlers(1, {"MEMBUS_EMBEDDER": "hash"})
        await wait_for_handlers(minilm_stack.nats_url, 1, procs, timeout=60)

        with pytest.raises(Unavailable) as err:
            await mem.add("knowledge", "written by a hash handler")
        own = [0.0] * 384
        own[3] = 1.0
        added = await mem.add("knowledge", "with the caller's own vector", embedding=own)
        described = await mem.describe()

    assert "MEMBUS_EMBEDDER=minilm" in err.value.message
    assert added.id
    assert (described.embedder, described.total) == ("minilm", 2)


async def test_int8_query_vectors_never_reach_stored_memories(rds: aioredis.Redis) -> None:
    """A text first searched (int8 query vector), then added: the memory gets the fp32
    vector, from the model, and the shared Redis cache holds the fp32 one only."""
    cache = EmbeddingsCache(
        name=f"membus:test-int8cache:{uuid.uuid4().hex}", async_redis_client=rds
    )
    model = MiniLMEmbedder()
    emb = CachedEmbedder(model, cache)
    text = "the deploy window moved to thursday evening"
    try:
        [query] = await emb.embed_queries([text])
        [again] = await emb.embed_queries([text])
        [stored] = await emb.embed([text])
        await emb.close()  # waits for the cache write
        cached = await cache.aget(text_digest(text), f"minilm/{model.dimension}")
    finally:
        await cache.aclear()

    np.testing.assert_allclose(query, model.encode_queries([text])[0], atol=1e-5)
    assert again is query  # the handler's own recent queries
    np.testing.assert_allclose(stored, model.encode([text])[0], atol=1e-5)
    assert 0.95 <= float(np.dot(query, stored)) < 0.9999
    assert cached is not None
    np.testing.assert_allclose(np.asarray(cached["embedding"]), stored, atol=1e-6)
