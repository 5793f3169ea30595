"""The OpenAI-compatible embedder against a real local HTTP server, and the Redis cache that
keeps a text from being embedded twice."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest
import redis.asyncio as aioredis
from embedding_server import EmbeddingServer
from redisvl.extensions.cache.embeddings import EmbeddingsCache
from stacks import private_stack

from bus import MemoryBus
from deploy.embedded import EmbeddedStack
from handlers.embed.cache import CachedEmbedder
from handlers.embed.openai_api import OpenAIEmbedder

# Each test starts servers or handler processes of its own.
pytestmark = pytest.mark.processes


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer(dimension=64) as srv:
        yield srv


async def test_openai_embedder_talks_to_an_openai_compatible_server(
    server: EmbeddingServer,
) -> None:
    emb = OpenAIEmbedder(server.url, "test-model", api_key=None)

    vecs = await emb.embed(["alpha beta", "gamma"])

    assert emb.dimension == 64
    assert emb.name == "openai:test-model"
    assert server.models == {"test-model"}
    assert np.allclose(vecs[0], server.vector("alpha beta"), atol=1e-6)
    assert np.allclose(vecs[1], server.vector("gamma"), atol=1e-6)
    assert server.texts["alpha beta"] == 1


async def test_the_cache_avoids_a_second_embedding_call(
    server: EmbeddingServer, rds: aioredis.Redis
) -> None:
    name = f"membus:test-embcache:{id(server)}"
    cache = EmbeddingsCache(name=name, ttl=60, async_redis_client=rds)
    emb = CachedEmbedder(OpenAIEmbedder(server.url, "test-model", api_key=None), cache)
    before = server.requests

    first = await emb.embed(["cached text", "other text"])
    second = await emb.embed(["cached text"])
    third = await emb.embed(["other text", "new text"])

    assert server.texts["cached text"] == 1  # the dimension probe used another text
    assert server.texts["other text"] == 1
    assert server.texts["new text"] == 1
    assert server.requests - before == 2  # the first call and the "new text" miss
    assert np.allclose(first[0], second[0])
    assert np.allclose(first[1], third[0])


@pytest.fixture
async def openai_stack(server: EmbeddingServer) -> AsyncIterator[EmbeddedStack]:
    env = {"MEMBUS_OPENAI_BASE_URL": server.url, "MEMBUS_OPENAI_MODEL": "test-model"}
    async with private_stack("openai", env=env) as stack:
        yield stack


async def test_a_handler_embeds_through_the_openai_api_once_per_text(
    openai_stack: EmbeddedStack, server: EmbeddingServer
) -> None:
    async with await MemoryBus.connect(openai_stack.nats_url, namespace="oa") as bus:
        mem = bus.agent(workflow_id="wf_1")
        a = await mem.add("knowledge", "pelicans fly over the bay", dedup="none")
        b = await mem.add("knowledge", "pelicans fly over the bay", dedup="none")
        await mem.add("knowledge", "the stock market closed higher")
        hits = await mem.search("pelicans bay", mode="vector", limit=2)
        described = await mem.describe()

    assert a.id != b.id
    assert server.texts["pelicans fly over the bay"] == 1
    assert {h.id for h in hits.results} == {a.id, b.id}
    assert (described.embedder, described.dimension) == ("openai:test-model", 64)
